/*
 * ex_jit_cell.c — see ex_jit.h (straight-line cells through TinyCC).
 */
#define _GNU_SOURCE
#include "ex_jit.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Words after which the cell is left to the system compiler: layouts and
 * calling conventions TinyCC may not share with GCC (aggregates passed by
 * value, complex types, attributes), and what TinyCC lacks (thread-local
 * storage, atomics, 128-bit integers, inline asm). */
static const char k_declined[] = " struct union __attribute__ _Complex complex __int128 _Atomic"
                                 " __thread _Thread_local thread_local asm __asm__ __asm _Pragma ";

static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self);

/* Whether a name that earlier cells defined may be used from a TinyCC
 * unit: a function whose declaration names no aggregate type (so none is
 * passed or returned by value), a type that is not an aggregate (a
 * pointer to one is fine), a macro whose body passes the same test, and
 * any variable (both compilers lay out plain structs alike; a type with
 * attributes is declined when the cell names it). Names no cell defined
 * are the library's and libc's: none takes an aggregate by value. */
static int safe_name(const ex_cell_state_t *st, const char *w, size_t n, int depth) {
  char name[128];
  if (n >= sizeof name)
    return 0;
  memcpy(name, w, n);
  name[n] = 0;
  ex_cell_name_t d;
  if (!ex_cell_find(st, name, &d) || !d.decl || !d.kind)
    return 1;
  if (!strcmp(d.kind, "type"))
    return strchr(d.decl, '*') != NULL || safe_text(st, d.decl, depth + 1, name);
  if (!strcmp(d.kind, "function") || !strcmp(d.kind, "macro"))
    return safe_text(st, d.decl, depth + 1, name);
  return 1;
}

/* Every word of `text` acceptable (k_declined, no `long double`: x87,
 * passed in memory, left to GCC as ex_jit_simple_call does; safe_name),
 * looking through at most two levels of earlier cells' declarations;
 * `self` (the name `text` declares, or NULL) is not looked up again. */
static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self) {
  if (depth > 2)
    return 0;
  const char *p = text;
  size_t n;
  int after_long = 0;
  for (const char *w = ex_cell_next_word(&p, &n); n; w = ex_cell_next_word(&p, &n)) {
    if (isdigit((unsigned char)*w))
      continue;
    if (ex_cell_word_in(k_declined, w, n) || (after_long && n == 6 && !strncmp(w, "double", 6)))
      return 0;
    after_long = n == 4 && !strncmp(w, "long", 4);
    int is_self = self && strlen(self) == n && !strncmp(self, w, n);
    if (st && !is_self && !safe_name(st, w, n, depth))
      return 0;
  }
  return 1;
}

int ex_jit_cell_safe(const ex_cell_state_t *st, const char *code) {
  if (!code || strstr(code, "#include \"") || strstr(code, "# include \"") ||
      strstr(code, "#pragma"))
    return 0;
  return safe_text(st, code, 0, NULL);
}

#ifdef NBFORK_HAVE_TCC
#include <libtcc.h>

/* TinyCC's diagnostics are not shown: on any of them the cell goes to the
 * system compiler, which reports its own. */
static void quiet(void *opaque, const char *msg) {
  (void)opaque;
  (void)msg;
}

int ex_jit_cell_so(const char *source, const char *incdir, const char *path) {
  if (!source || !path || !ex_jit_enabled())
    return -1;
  TCCState *s = tcc_new();
  if (!s)
    return -1;
#ifdef NBFORK_TCC_LIB_DIR
  tcc_set_lib_path(s, NBFORK_TCC_LIB_DIR); /* before output type: it reads libtcc1.a */
#endif
  tcc_set_error_func(s, NULL, quiet);
  /* -Werror: a warning sends the cell to GCC, whose diagnostics (with
   * -Werror=implicit-function-declaration) the user then sees */
  tcc_set_options(s, "-Werror -std=c11");
  int rc = tcc_set_output_type(s, TCC_OUTPUT_DLL);
  if (rc == 0 && incdir)
    rc = tcc_add_include_path(s, incdir);
  if (rc == 0)
    rc = tcc_compile_string(s, source);
  if (rc == 0)
    rc = tcc_output_file(s, path);
  tcc_delete(s);
  if (rc != 0)
    unlink(path);
  return rc == 0 ? 0 : -1;
}

#else /* no libtcc: every cell goes to the system compiler */

int ex_jit_cell_so(const char *source, const char *incdir, const char *path) {
  (void)source;
  (void)incdir;
  (void)path;
  return -1;
}

#endif
