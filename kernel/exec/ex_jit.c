/*
 * ex_jit.c — see ex_jit.h.
 */
#define _GNU_SOURCE
#include "ex_jit.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cell.h"
#include "nbf_param.h"

/* Words that may make up a parameter's type when it is passed in
 * registers of one class per value: scalar C types. */
static int scalar_word(const char *w, size_t n) {
  static const char words[] =
      " void char short int long float double signed unsigned _Bool bool const volatile"
      " register restrict size_t ssize_t ptrdiff_t intptr_t uintptr_t intmax_t uintmax_t"
      " int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t off_t pid_t time_t"
      " wchar_t acc_dtype_t acc_op_t acc_precision_t acc_result_t ";
  return ex_cell_word_in(words, w, n);
}

/* The n bytes at `text` as a string in dst[size]: 0, or -1 when they do
 * not fit (the callers then decline the call to the system compiler). */
static int copy_text(char *dst, size_t size, const char *text, size_t n) {
  if (n >= size)
    return -1;
  memcpy(dst, text, n);
  dst[n] = 0;
  return 0;
}

/* Whether a typedef earlier cells made is a scalar, a pointer or an
 * enum (not a struct or union, which may be passed split across
 * register classes). */
static int scalar_typedef(const ex_cell_state_t *st, const char *name, size_t n) {
  char buf[128];
  if (copy_text(buf, sizeof buf, name, n))
    return 0;
  ex_cell_name_t d;
  if (!st || !ex_cell_find(st, buf, &d) || strcmp(d.kind, "type") || !d.decl)
    return 0;
  if (strstr(d.decl, "struct") || strstr(d.decl, "union"))
    return strchr(d.decl, '*') != NULL; /* a pointer to one */
  if (strstr(d.decl, "enum") || strchr(d.decl, '*'))
    return 1;
  /* typedef <scalar words> name; */
  const char *p = d.decl;
  int words = 0;
  size_t wn;
  for (const char *w = ex_cell_next_word(&p, &wn); wn; w = ex_cell_next_word(&p, &wn)) {
    words++;
    if (!(wn == 7 && !strncmp(w, "typedef", 7)) && !(wn == n && !strncmp(w, name, n)) &&
        !scalar_word(w, wn))
      return 0;
  }
  return words > 2;
}

/* One parameter's text (`const char *s`, `pair_t p`, `int`, `...`). */
static int scalar_param(const ex_cell_state_t *st, const char *text, size_t n) {
  char p[256];
  if (copy_text(p, sizeof p, text, n))
    return 0;
  if (strchr(p, '*') || strchr(p, '['))
    return 1; /* a pointer (an array parameter is one) */
  if (strstr(p, "...") || strstr(p, "enum"))
    return 1;
  if (strstr(p, "long") && strstr(p, "double"))
    return 0; /* long double: x87, in memory: leave it to GCC */
  const char *last = NULL, *q = p;
  size_t lastn = 0, wn;
  int types = 0;
  for (const char *w = ex_cell_next_word(&q, &wn); wn; w = ex_cell_next_word(&q, &wn)) {
    if (scalar_word(w, wn)) {
      types++;
      continue;
    }
    if (last) { /* an unknown word before another one: a type name */
      if (!scalar_typedef(st, last, lastn))
        return 0;
      types++;
    }
    last = w;
    lastn = wn;
  }
  /* the last unknown word is the parameter's name when a type came before
   * it, else the type itself */
  if (last && !types)
    return scalar_typedef(st, last, lastn);
  return types > 0;
}

int ex_jit_simple_call(const ex_cell_state_t *st, const char *call) {
  if (!st || !call)
    return 0;
  char buf[128];
  size_t n = ex_cell_take_word(&call, buf, sizeof buf);
  if (!n || *call != '(')
    return 0; /* not NAME(...): a pointer call, a member, a macro... */
  ex_cell_name_t f;
  if (!ex_cell_find(st, buf, &f) || strcmp(f.kind, "function") || !f.decl)
    return 0;
  /* the parameter list: from the first '(' after the name to its match */
  const char *p = strstr(f.decl, buf);
  p = p ? strchr(p + n, '(') : NULL;
  if (!p)
    return 0;
  p++;
  int depth = 0;
  const char *start = p;
  for (; *p; p++) {
    if (*p == '(' || *p == '[')
      depth++;
    else if ((*p == ')' || *p == ']') && depth > 0)
      depth--;
    else if ((*p == ',' || *p == ')') && depth == 0) {
      if (!scalar_param(st, start, (size_t)(p - start)))
        return 0;
      if (*p == ')')
        return 1;
      start = p + 1;
    }
  }
  return 0;
}

#ifdef NBFORK_HAVE_TCC
#include <libtcc.h>

/* Thunks kept loaded, oldest first; the oldest is dropped when full (no
 * worker of an earlier launch still runs: launches are synchronous). */
#define EX_JIT_KEEP 64

typedef struct {
  char tag[17];
  TCCState *state;
  ex_jit_launch_fn fn;
} ex_jit_entry_t;

static ex_jit_entry_t g_kept[EX_JIT_KEEP];
static int g_nkept;

int ex_jit_enabled(void) {
  return nbf_param_NBFORK_JIT();
}

static int starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A flag that changes nothing the thunk's meaning depends on. */
static int ignorable(const char *w) {
  static const char exact[] = " -w -pipe -fPIC -fpic -fPIE -fpie -std=c99 -std=c11 -std=c17"
                              " -std=c18 -std=gnu99 -std=gnu11 -std=gnu17 -std=gnu18"
                              " -fno-omit-frame-pointer -fomit-frame-pointer"
                              " -fno-strict-aliasing -fstrict-aliasing ";
  const size_t n = strlen(w);
  for (const char *p = exact; p && p[1]; p = strchr(p + 1, ' '))
    if (!strncmp(p + 1, w, n) && p[1 + n] == ' ')
      return 1;
  if (starts(w, "-W"))
    return !starts(w, "-Wp,") && !starts(w, "-Wa,") && !starts(w, "-Wl,") ? 1 : 0;
  return starts(w, "-O") || starts(w, "-g") || starts(w, "-march=") || starts(w, "-mtune=") ||
         starts(w, "-fdiagnostics-");
}

/* Mirror `cflags` on `s`: 0, or -1 when a flag asks for the system
 * compiler. */
static int apply_flags(TCCState *s, const char *cflags) {
  if (!cflags)
    return 0;
  if (strpbrk(cflags, "'\"\\$`"))
    return -1; /* quoting: leave its meaning to the system compiler */
  char *copy = strdup(cflags), *save = NULL;
  if (!copy)
    return -1;
  int rc = 0;
  for (char *w = strtok_r(copy, " \t\n", &save); w && rc == 0; w = strtok_r(NULL, " \t\n", &save)) {
    if (w[0] == '-' && (w[1] == 'I' || w[1] == 'D' || w[1] == 'U')) {
      /* -IDIR or -I DIR, -DNAME[=VALUE], -UNAME */
      char *arg = w[2] ? w + 2 : strtok_r(NULL, " \t\n", &save);
      if (!arg) {
        rc = -1;
      } else if (w[1] == 'I') {
        tcc_add_include_path(s, arg);
      } else if (w[1] == 'U') {
        tcc_undefine_symbol(s, arg);
      } else {
        char *eq = strchr(arg, '=');
        if (eq)
          *eq = 0;
        tcc_define_symbol(s, arg, eq ? eq + 1 : NULL);
      }
    } else if (!strcmp(w, "-pthread")) {
      tcc_define_symbol(s, "_REENTRANT", NULL); /* what it means to the preprocessor */
    } else if (!ignorable(w)) {
      rc = -1;
    }
  }
  free(copy);
  return rc;
}

/* TinyCC's diagnostics are not shown: on any of them the unit goes to
 * the system compiler, which reports its own. */
static void quiet(void *opaque, const char *msg) {
  (void)opaque;
  (void)msg;
}

ex_jit_launch_fn ex_jit_launch(const ex_cell_state_t *st, const char *call, const char *source,
                               const char *tag, const char *launch_symbol, const char *incdir,
                               const char *cflags) {
  if (!source || !tag || !launch_symbol || !ex_jit_enabled() || !ex_jit_simple_call(st, call))
    return NULL;
  for (int i = 0; i < g_nkept; i++)
    if (!strcmp(g_kept[i].tag, tag))
      return g_kept[i].fn;
  /* a quoted include is searched next to the notebook, an order TinyCC
   * would not reproduce exactly */
  if (strstr(source, "#include \"") || strstr(source, "# include \""))
    return NULL;
  TCCState *s = tcc_new();
  if (!s)
    return NULL;
#ifdef NBFORK_TCC_LIB_DIR
  tcc_set_lib_path(s, NBFORK_TCC_LIB_DIR); /* before output type: it reads libtcc1.a */
#endif
  tcc_set_error_func(s, NULL, quiet);
  tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
  ex_jit_launch_fn fn = NULL;
  tcc_set_options(s, "-Werror");
  if (apply_flags(s, cflags) == 0) {
    if (incdir)
      tcc_add_include_path(s, incdir);
    if (tcc_compile_string(s, source) == 0 && tcc_relocate(s, TCC_RELOCATE_AUTO) >= 0)
      fn = (ex_jit_launch_fn)tcc_get_symbol(s, launch_symbol);
  }
  if (!fn) {
    tcc_delete(s);
    return NULL;
  }
  if (g_nkept == EX_JIT_KEEP) {
    tcc_delete(g_kept[0].state);
    memmove(g_kept, g_kept + 1, (EX_JIT_KEEP - 1) * sizeof *g_kept);
    g_nkept--;
  }
  ex_jit_entry_t *e = &g_kept[g_nkept++];
  strncpy(e->tag, tag, sizeof e->tag - 1);
  e->tag[sizeof e->tag - 1] = 0;
  e->state = s;
  e->fn = fn;
  return fn;
}

#else /* no libtcc: always the system compiler */

int ex_jit_enabled(void) {
  return 0;
}

ex_jit_launch_fn ex_jit_launch(const ex_cell_state_t *st, const char *call, const char *source,
                               const char *tag, const char *launch_symbol, const char *incdir,
                               const char *cflags) {
  (void)st;
  (void)call;
  (void)source;
  (void)tag;
  (void)launch_symbol;
  (void)incdir;
  (void)cflags;
  return NULL;
}

#endif
