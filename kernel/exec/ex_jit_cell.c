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
 * value, x87 and complex types, attributes, packing), and what TinyCC
 * lacks (thread-local storage, atomics, 128-bit integers, inline asm). */
static const char *const k_declined[] = {
    "struct", "union",   "__attribute__", "_Complex",  "complex", "__int128", "_Atomic",
    "__thread", "_Thread_local", "thread_local", "asm", "__asm__", "__asm", "_Pragma", NULL};

static int is_ident(int c) {
  return isalnum(c) || c == '_';
}

static int declined_word(const char *w, size_t n) {
  for (const char *const *d = k_declined; *d; d++)
    if (strlen(*d) == n && !strncmp(*d, w, n))
      return 1;
  return 0;
}

/* Whether `text` says `long double` (x87, passed in memory: left to GCC,
 * as ex_jit_simple_call does). */
static int has_long_double(const char *text) {
  for (const char *p = strstr(text, "long"); p; p = strstr(p + 4, "long")) {
    const char *q = p + 4;
    while (isspace((unsigned char)*q))
      q++;
    if (!strncmp(q, "double", 6) && !is_ident((unsigned char)q[6]))
      return 1;
  }
  return 0;
}

static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self);

/* Whether a name that earlier cells defined may be used from a TinyCC
 * unit: a function whose declaration names no aggregate type (so none is
 * passed or returned by value), a type that is not an aggregate (a
 * pointer to one is fine), a macro whose body passes the same test, any
 * variable (plain layouts agree; attributes and packing were declined in
 * the type's own cell only if used here by name). Names no cell defined
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

/* Every word of `text` acceptable (k_declined, safe_name), looking
 * through at most two levels of earlier cells' declarations; `self` (the
 * name `text` declares, or NULL) is not looked up again. */
static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self) {
  if (depth > 2 || has_long_double(text))
    return 0;
  const char *p = text;
  while (*p) {
    if (!is_ident((unsigned char)*p)) {
      p++;
      continue;
    }
    const char *w = p;
    while (is_ident((unsigned char)*p))
      p++;
    size_t n = (size_t)(p - w);
    if (isdigit((unsigned char)*w))
      continue;
    if (declined_word(w, n))
      return 0;
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
