/*
 * ex_launch_thunk.c — see ex_launch_thunk.h.
 */
#define _GNU_SOURCE
#include "ex_launch_thunk.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cell.h"

/* What the launched function returns, as far as its declaration says. */
typedef enum {
  RET_VOID,    /* the worker exits 0 */
  RET_INT,     /* an integer type: the exit code */
  RET_OTHER,   /* double, a pointer, a struct: refused */
  RET_TYPEDEF, /* a name the thunk checks when it compiles */
  RET_UNKNOWN  /* no declaration (a macro, a library function): checked when it compiles */
} ret_kind_t;

static const char storage_words[] = " static inline extern _Noreturn __inline __inline__ "
                                    "__extension__ const volatile register ";
static const char int_words[] = " char short int long signed unsigned _Bool bool size_t ssize_t "
                                "ptrdiff_t intptr_t uintptr_t intmax_t uintmax_t int8_t int16_t "
                                "int32_t int64_t uint8_t uint16_t uint32_t uint64_t off_t pid_t "
                                "acc_result_t enum ";

/* Classify the return type text (`static inline unsigned long`) and put
 * the type as the user would name it (`unsigned long`) in type[size]. */
static ret_kind_t classify(const char *ret, size_t len, char *type, size_t size) {
  size_t tn = 0;
  int words = 0, ints = 0, voids = 0, other = memchr(ret, '*', len) != NULL;
  type[0] = 0;
  for (const char *p = ret, *end = ret + len; p < end;) {
    if (!isalnum((unsigned char)*p) && *p != '_') {
      p++;
      continue;
    }
    const char *w = p;
    while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
      p++;
    size_t n = (size_t)(p - w);
    if (n == 13 && !strncmp(w, "__attribute__", 13)) { /* skip its ((...)) */
      for (int depth = 0; p < end; p++) {
        depth += *p == '(' ? 1 : *p == ')' ? -1 : 0;
        if (depth == 0 && *p == ')') {
          p++;
          break;
        }
      }
      continue;
    }
    if (ex_cell_word_in(storage_words, w, n))
      continue;
    words++;
    voids += n == 4 && !strncmp(w, "void", 4);
    ints += ex_cell_word_in(int_words, w, n);
    other |= ex_cell_word_in(" float double _Complex struct union ", w, n);
    if (tn < size)
      tn += (size_t)snprintf(type + tn, size - tn, "%s%.*s", tn ? " " : "", (int)n, w);
  }
  if (other) {
    size_t stars = 0;
    for (size_t i = 0; i < len; i++)
      stars += ret[i] == '*';
    snprintf(type + tn, tn < size ? size - tn : 0, "%s%.*s", stars ? " " : "", (int)stars,
             "****************");
    return RET_OTHER;
  }
  if (voids == 1 && words == 1)
    return RET_VOID;
  if (words && ints == words)
    return RET_INT;
  return words == 1 ? RET_TYPEDEF : RET_UNKNOWN;
}

/* A typedef of an earlier cell (`typedef float real_t;`, no braces):
 * what it names, the type shown as `real_t (float)`; else RET_TYPEDEF,
 * left to the compiler. */
static ret_kind_t typedef_kind(const ex_cell_state_t *st, char *type, size_t tsize) {
  ex_cell_name_t t;
  if (!ex_cell_find(st, type, &t) || strcmp(t.kind, "type") || !t.decl || strchr(t.decl, '{') ||
      strchr(t.decl, '(') || strncmp(t.decl, "typedef", 7))
    return RET_TYPEDEF;
  const char *at = ex_cell_find_word(t.decl + 7, type);
  char named[128];
  ret_kind_t k =
      at ? classify(t.decl + 7, (size_t)(at - t.decl - 7), named, sizeof named) : RET_TYPEDEF;
  if (k == RET_OTHER) {
    size_t n = strlen(type);
    snprintf(type + n, tsize - n, " (%s)", named);
  }
  return k == RET_UNKNOWN ? RET_TYPEDEF : k;
}

/* name's declaration in the %launch cell's own code, or NULL. */
static const char *own_decl(const ex_split_t *cell, const char *name) {
  for (size_t i = 0; cell && i < cell->count; i++) {
    const ex_chunk_t *k = &cell->chunks[i];
    if (k->name && !strcmp(k->name, name) && k->kind == EX_CHUNK_FUNCTION)
      return k->signature;
    if (k->name && !strcmp(k->name, name) && k->kind == EX_CHUNK_PROTOTYPE)
      return k->text;
  }
  return NULL;
}

/* What `name`'s declaration (in the cell, else in an earlier one) says it
 * returns. */
static ret_kind_t return_kind(const ex_cell_state_t *st, const ex_split_t *cell, const char *call,
                              char *name, size_t nsize, char *type, size_t tsize,
                              const char **declp) {
  size_t n = 0;
  while (isspace((unsigned char)*call))
    call++;
  while ((isalnum((unsigned char)call[n]) || call[n] == '_') && n + 1 < nsize)
    n++;
  memcpy(name, call, n);
  name[n] = 0;
  ex_cell_name_t f;
  const char *decl = n ? own_decl(cell, name) : NULL;
  if (!decl && n && st && ex_cell_find(st, name, &f) && !strcmp(f.kind, "function"))
    decl = f.decl;
  *declp = decl;
  if (!decl)
    return RET_UNKNOWN;
  const char *at = ex_cell_find_word(decl, name);
  ret_kind_t k = at ? classify(decl, (size_t)(at - decl), type, tsize) : RET_UNKNOWN;
  return k == RET_TYPEDEF ? typedef_kind(st, type, tsize) : k;
}

/* Whether the parentheses after `name` at p hold only blanks: `f()`. */
static int empty_parens(const char *p, size_t n) {
  p += n;
  while (isspace((unsigned char)*p))
    p++;
  if (*p++ != '(')
    return 0;
  while (isspace((unsigned char)*p))
    p++;
  return *p == ')';
}

/* C before C23: `int train()` takes any arguments, unchecked; a call with
 * some is refused (the function reads none of them). */
static int unchecked_arguments(const char *decl, const char *name, const char *call) {
  const char *at = decl ? ex_cell_find_word(decl, name) : NULL;
  while (isspace((unsigned char)*call))
    call++;
  return at && empty_parens(at, strlen(name)) && !empty_parens(call, strlen(name));
}

/* `#line` then spaces, so the call's diagnostics point at the %launch
 * line and column of the cell. */
static int put_call(nbf_buf_t *b, const ex_launch_site_t *s) {
  if (s->line <= 0)
    return nbf_buf_printf(b, "#line 1 \"%%launch\"\n%s\n#line 1 \"<nbfork>\"\n", s->call);
  return nbf_buf_printf(b, "#line %d \"%s\"\n%*s%s\n#line 1 \"<nbfork>\"\n", s->line, s->label,
                        s->col > 1 ? s->col - 1 : 0, "", s->call);
}

/* C: argument mismatches C only warns about are errors in the thunk
 * (GCC and Clang know these names; TinyCC runs with -Werror, ex_jit.c). */
static const char c_errors[] = "#ifndef __TINYC__\n"
                               "#pragma GCC diagnostic error \"-Wint-conversion\"\n"
                               "#pragma GCC diagnostic error \"-Wincompatible-pointer-types\"\n"
                               "#pragma GCC diagnostic error \"-Wimplicit-function-declaration\"\n"
                               "#endif\n";

/* The C thunk for each kind of return. */
static int put_c(nbf_buf_t *b, const ex_launch_site_t *s, ret_kind_t k, const char *type,
                 const char *tag) {
  int r = nbf_buf_printf(b, "#line 1 \"<nbfork>\"\n%sint __nbf_launch_%s(void) {\n", c_errors, tag);
  if (k == RET_VOID || k == RET_INT) {
    r |= nbf_buf_puts(b, k == RET_INT ? "return\n" : "(void)(\n");
    r |= put_call(b, s);
    r |= nbf_buf_puts(b, k == RET_INT ? ";\n}\n" : ");\nreturn 0;\n}\n");
  } else if (k == RET_TYPEDEF) { /* checked by the compiler: an integer class or refused */
    r |= nbf_buf_printf(b, "%s __nbf_r =\n", type);
    r |= put_call(b, s);
    r |= nbf_buf_puts(b, ";\n");
    /* the assertion at the %launch line too: the error names the cell */
    char *assert_text = NULL;
    if (asprintf(&assert_text,
                 "_Static_assert(__builtin_classify_type(__nbf_r) <= 4, \"%%launch: the launched "
                 "function returns %s, not an integer type; a launched function returns int (the "
                 "exit code of the worker, 0 = success) or void\");",
                 type) < 0)
      return -1;
    ex_launch_site_t at = *s;
    at.call = assert_text;
    r |= put_call(b, &at);
    free(assert_text);
    r |= nbf_buf_puts(
        b, "return __builtin_choose_expr(__builtin_classify_type(__nbf_r) <= 4, __nbf_r, 1);\n}\n");
  } else { /* no declaration: the call's type decides, the call written three times */
    r |= nbf_buf_puts(b, "return __builtin_choose_expr(__builtin_types_compatible_p(__typeof__(\n");
    r |= put_call(b, s);
    r |= nbf_buf_puts(b, "), void), ((\n");
    r |= put_call(b, s);
    r |= nbf_buf_puts(b, "), 0), (\n");
    r |= put_call(b, s);
    r |= nbf_buf_puts(b, "));\n}\n");
  }
  return r;
}

int ex_launch_thunk(const ex_cell_state_t *st, const ex_split_t *cell, const ex_launch_site_t *site,
                    int cxx, const char *tag, nbf_buf_t *src, char *err, size_t errlen) {
  char name[128], type[256] = "";
  const char *decl = NULL;
  ret_kind_t k = return_kind(st, cell, site->call, name, sizeof name, type, sizeof type, &decl);
  if (!cxx && unchecked_arguments(decl, name, site->call)) {
    snprintf(err, errlen,
             "line %d: %%launch %s: too many arguments: '%s' is declared with an empty parameter "
             "list (`%s`), which C does not check; it takes none. Call %s(), or declare its "
             "parameters",
             site->line, site->call, name, decl, name);
    return -1;
  }
  if (k == RET_OTHER) {
    snprintf(err, errlen,
             "line %d: %%launch %s: '%s' returns %s; a launched function returns int (the worker's "
             "exit code: 0 = success, as from main) or void (the worker exits 0). nbfork does "
             "not convert other values: return an int (e.g. a wrapper: int %s_main(void) { %s; "
             "return 0; })",
             site->line, site->call, name, type, name, site->call);
    return -1;
  }
  if (!cxx)
    return put_c(src, site, k, type, tag) ? -2 : 0;
  /* C++ (a %%cuda cell): one expression, void or converted by
   * __nbf_launch_int (ex_cell.c's support code) */
  int r = nbf_buf_printf(src,
                         "#line 1 \"<nbfork>\"\nextern \"C\" int __nbf_launch_%s(void) {\n"
                         "  return __nbf_launch_int(((\n",
                         tag);
  r |= put_call(src, site);
  r |= nbf_buf_puts(src, "), __nbf_tag()));\n}\n");
  return r ? -2 : 0;
}
