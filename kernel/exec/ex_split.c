/*
 * ex_split.c — lexical splitting of a C cell into top-level chunks.
 *
 * Two passes: a tokenizer (comments dropped, strings/char literals and
 * preprocessor lines kept whole), then a chunker that walks tokens at
 * bracket depth 0 and decides where each construct ends. The rules for
 * where a construct ends are the C grammar's, reduced to what matters at
 * file scope:
 *   - `;` at depth 0 ends a chunk, unless an `else` follows it, or it is
 *     inside a `do` statement before its `while (...)`;
 *   - `}` back at depth 0 ends a function definition, a compound
 *     statement or the body of if/for/while/switch, but not an
 *     initializer (`= {` with the `=` outside brackets), a
 *     struct/union/enum body, a `do` body or a body followed by `else`.
 * Classification then reads the chunk's first tokens: a declaration
 * starts with specifiers (keywords, or a typedef name: built in, of an
 * earlier cell, or of this cell). In C++ mode (%%cuda cells) templates,
 * classes, namespaces and CUDA-qualified code are kept verbatim.
 */
#include "ex_split.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TK_IDENT, TK_NUMBER, TK_STRING, TK_CHAR, TK_PUNCT, TK_PREPROC } tk_kind_t;

typedef struct {
  tk_kind_t kind;
  size_t start, end; /* byte offsets in the source, end exclusive */
  int line;
} tk_t;

typedef struct {
  tk_t *v;
  size_t n, cap;
} tk_list_t;

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static int tk_push(tk_list_t *l, tk_kind_t k, size_t s, size_t e, int line) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    tk_t *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (tk_t){k, s, e, line};
  return 0;
}

/* Tokenize. Returns 0, or -1 with err set (unterminated comment/string).
 * `open_state` (may be NULL) receives 1 when the source ends inside a
 * comment or string (used by is_complete). */
static int tokenize(const char *src, tk_list_t *out, char *err, size_t errlen, int *open_state) {
  size_t i = 0, n = strlen(src);
  int line = 1, at_line_start = 1;
  if (open_state)
    *open_state = 0;
  while (i < n) {
    char c = src[i];
    if (c == '\n') {
      line++;
      i++;
      at_line_start = 1;
      continue;
    }
    if (isspace((unsigned char)c)) {
      i++;
      continue;
    }
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      while (i < n && src[i] != '\n')
        i++;
      continue;
    }
    if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      int start_line = line;
      i += 2;
      while (i + 1 < n && !(src[i] == '*' && src[i + 1] == '/')) {
        if (src[i] == '\n')
          line++;
        i++;
      }
      if (i + 1 >= n) {
        if (open_state)
          *open_state = 1;
        set_err(err, errlen, "line %d: comment is not closed (missing */)", start_line);
        return -1;
      }
      i += 2;
      continue;
    }
    if (c == '#' && at_line_start) {
      size_t s = i;
      int start_line = line;
      while (i < n && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < n && src[i + 1] == '\n') {
          i += 2;
          line++;
          continue;
        }
        i++;
      }
      if (tk_push(out, TK_PREPROC, s, i, start_line))
        return -1;
      continue;
    }
    /* Magic lines (`%cflags ...`) are handled before splitting; a `%` that
     * reaches here is the modulo operator. */
    at_line_start = 0;
    if (c == '"' || c == '\'') {
      size_t s = i++;
      while (i < n && src[i] != c && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < n)
          i++;
        i++;
      }
      if (i >= n || src[i] != c) {
        if (open_state)
          *open_state = 1;
        set_err(err, errlen, "line %d: %s literal is not closed", line,
                c == '"' ? "string" : "character");
        return -1;
      }
      i++;
      if (tk_push(out, c == '"' ? TK_STRING : TK_CHAR, s, i, line))
        return -1;
      continue;
    }
    if (isalpha((unsigned char)c) || c == '_') {
      size_t s = i;
      while (i < n && (isalnum((unsigned char)src[i]) || src[i] == '_'))
        i++;
      /* prefixed literals: L"..", u8".." */
      if (i < n && (src[i] == '"' || src[i] == '\'') && i - s <= 2) {
        continue; /* the literal is tokenized next; prefix glued by text */
      }
      if (tk_push(out, TK_IDENT, s, i, line))
        return -1;
      continue;
    }
    if (isdigit((unsigned char)c) ||
        (c == '.' && i + 1 < n && isdigit((unsigned char)src[i + 1]))) {
      size_t s = i;
      while (i < n &&
             (isalnum((unsigned char)src[i]) || src[i] == '.' || src[i] == '_' ||
              ((src[i] == '+' || src[i] == '-') &&
               (src[i - 1] == 'e' || src[i - 1] == 'E' || src[i - 1] == 'p' || src[i - 1] == 'P'))))
        i++;
      if (tk_push(out, TK_NUMBER, s, i, line))
        return -1;
      continue;
    }
    /* punctuators: only the single characters matter to the chunker,
     * except that `->` and `...` must not be read as `-`,`>`. */
    size_t len = 1;
    if ((c == '-' && i + 1 < n && src[i + 1] == '>') ||
        (c == '.' && i + 2 < n && src[i + 1] == '.' && src[i + 2] == '.'))
      len = c == '.' ? 3 : 2;
    if (tk_push(out, TK_PUNCT, i, i + len, line))
      return -1;
    i += len;
  }
  return 0;
}

/* ---- token helpers ---------------------------------------------------- */

typedef struct {
  const char *src;
  tk_t *t;
  size_t n;
  ex_is_type_fn is_type;
  void *ctx;
  char **local_types; /* typedef names defined earlier in this cell */
  size_t nlocal;
  int cxx; /* EX_SPLIT_CXX */
} cx_t;

static int tk_is(const cx_t *c, size_t i, const char *s) {
  if (i >= c->n)
    return 0;
  size_t len = c->t[i].end - c->t[i].start;
  return strlen(s) == len && memcmp(c->src + c->t[i].start, s, len) == 0;
}

static char *dup_range(const char *src, size_t s, size_t e) {
  char *r = malloc(e - s + 1);
  if (r) {
    memcpy(r, src + s, e - s);
    r[e - s] = 0;
  }
  return r;
}

static char *tk_text(const cx_t *c, size_t i) {
  return dup_range(c->src, c->t[i].start, c->t[i].end);
}

/* 1-based byte column of token i on its line. */
static int tk_col(const cx_t *c, size_t i) {
  size_t s = c->t[i].start, ls = s;
  while (ls > 0 && c->src[ls - 1] != '\n')
    ls--;
  return (int)(s - ls) + 1;
}

/* Text from token a to token b inclusive, as in the source. */
static char *tk_span(const cx_t *c, size_t a, size_t b) {
  return dup_range(c->src, c->t[a].start, c->t[b].end);
}

static const char *const kw_specifier[] = {
    "void",          "char",          "short",      "int",      "long",       "float",
    "double",        "signed",        "unsigned",   "_Bool",    "bool",       "_Complex",
    "const",         "volatile",      "restrict",   "static",   "extern",     "register",
    "inline",        "typedef",       "struct",     "union",    "enum",       "__attribute__",
    "_Atomic",       "_Thread_local", "__thread",   "_Alignas", "__inline__", "__restrict",
    "__extension__", "_Noreturn",     "__typeof__", "typeof",   NULL};

/* Keywords that name (part of) a base type: after one of these, the next
 * identifier is a declarator, not a typedef name. */
static const char *const kw_base[] = {"void",  "char",     "short",  "int",      "long",
                                      "float", "double",   "signed", "unsigned", "_Bool",
                                      "bool",  "_Complex", NULL};

static const char *const kw_statement[] = {"if",      "for",   "while",    "do",   "switch",
                                           "return",  "break", "continue", "goto", "case",
                                           "default", "else",  NULL};

/* Keywords that are operators: `sizeof x` is an expression, never a
 * declaration of `x` with type `sizeof`. */
static const char *const kw_operator[] = {"sizeof",  "_Alignof", "__alignof__",
                                          "alignof", "_Generic", NULL};

static int in_list(const cx_t *c, size_t i, const char *const *list) {
  for (; *list; list++)
    if (tk_is(c, i, *list))
      return 1;
  return 0;
}

static const char *const builtin_types[] = {
    "size_t",  "ssize_t",    "FILE",      "va_list", "ptrdiff_t", "wchar_t", "bool",
    "jmp_buf", "sigjmp_buf", "pthread_t", "DIR",     "time_t",
    /* <stdatomic.h>'s typedefs (no _t suffix) */
    "atomic_bool", "atomic_char", "atomic_schar", "atomic_uchar", "atomic_short",
    "atomic_ushort", "atomic_int", "atomic_uint", "atomic_long", "atomic_ulong", "atomic_llong",
    "atomic_ullong", "atomic_flag", NULL};

static int is_type_name(const cx_t *c, size_t i) {
  if (i >= c->n || c->t[i].kind != TK_IDENT)
    return 0;
  if (in_list(c, i, builtin_types))
    return 1;
  size_t len = c->t[i].end - c->t[i].start;
  const char *s = c->src + c->t[i].start;
  if (len > 2 && s[len - 2] == '_' && s[len - 1] == 't')
    return 1; /* POSIX reserves *_t for types: uint8_t, acc_t, ... */
  for (size_t j = 0; j < c->nlocal; j++)
    if (strlen(c->local_types[j]) == len && memcmp(c->local_types[j], s, len) == 0)
      return 1;
  if (c->is_type) {
    char *name = tk_text(c, i);
    int r = name && c->is_type(name, c->ctx);
    free(name);
    return r;
  }
  return 0;
}

/* Index just after the balanced bracket group opening at i, or n. */
static size_t skip_group(const cx_t *c, size_t i) {
  int depth = 0;
  for (; i < c->n; i++) {
    if (tk_is(c, i, "(") || tk_is(c, i, "[") || tk_is(c, i, "{"))
      depth++;
    else if (tk_is(c, i, ")") || tk_is(c, i, "]") || tk_is(c, i, "}")) {
      if (--depth == 0)
        return i + 1;
    }
  }
  return c->n;
}

/* <complex.h>'s `complex` and `imaginary` are macros for _Complex and
 * _Imaginary: a specifier when a declarator follows (`double complex z`,
 * `float complex *p`), a name otherwise (`int complex = 3;` without the
 * header is valid C). */
static int macro_specifier(const cx_t *c, size_t i, size_t b) {
  if (!tk_is(c, i, "complex") && !tk_is(c, i, "imaginary"))
    return 0;
  return i + 1 <= b && (c->t[i + 1].kind == TK_IDENT || tk_is(c, i + 1, "*") ||
                        tk_is(c, i + 1, "("));
}

/* Parse declaration specifiers starting at a. Returns the index of the
 * first declarator token; *is_decl = 1 when what was seen can only start a
 * declaration (a specifier keyword or a known type name). */
static size_t parse_specifiers(const cx_t *c, size_t a, size_t b, int *is_decl) {
  size_t i = a;
  int have_base = 0;
  *is_decl = 0;
  while (i <= b) {
    if (tk_is(c, i, "struct") || tk_is(c, i, "union") || tk_is(c, i, "enum")) {
      *is_decl = 1;
      have_base = 1;
      i++;
      /* `struct __attribute__((packed)) tag`, `struct _Alignas(8) tag` */
      while (i <= b && (tk_is(c, i, "__attribute__") || tk_is(c, i, "_Alignas") ||
                        tk_is(c, i, "__declspec")))
        i = i + 1 <= b && tk_is(c, i + 1, "(") ? skip_group(c, i + 1) : i + 1;
      if (i <= b && c->t[i].kind == TK_IDENT)
        i++;
      if (i <= b && tk_is(c, i, "{"))
        i = skip_group(c, i);
      continue;
    }
    if (tk_is(c, i, "__attribute__") || tk_is(c, i, "_Alignas") || tk_is(c, i, "__typeof__") ||
        tk_is(c, i, "typeof")) {
      *is_decl = 1;
      if (tk_is(c, i, "__typeof__") || tk_is(c, i, "typeof"))
        have_base = 1;
      i++;
      if (i <= b && tk_is(c, i, "("))
        i = skip_group(c, i);
      continue;
    }
    if (in_list(c, i, kw_specifier) || macro_specifier(c, i, b)) {
      *is_decl = 1;
      if (in_list(c, i, kw_base))
        have_base = 1;
      i++;
      continue;
    }
    if (!have_base && c->t[i].kind == TK_IDENT && !in_list(c, i, kw_operator)) {
      /* A typedef name: known, or followed by something that can only
       * start a declarator (`T x`, `T *x =`, `T *x;`). */
      int known = is_type_name(c, i);
      int ident_next =
          i + 1 <= b && c->t[i + 1].kind == TK_IDENT && !in_list(c, i + 1, kw_statement);
      if (known || ident_next) {
        *is_decl = 1;
        have_base = 1;
        i++;
        continue;
      }
    }
    break;
  }
  return i;
}

static void decls_free(ex_chunk_t *k) {
  for (size_t i = 0; i < k->ndecls; i++) {
    free(k->decls[i].name);
    free(k->decls[i].declarator);
    free(k->decls[i].init);
  }
  free(k->decls);
  k->decls = NULL;
  k->ndecls = 0;
}

static void chunk_free(ex_chunk_t *k) {
  char *owned[] = {k->text, k->name, k->specifiers, k->signature, k->body, k->doc};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
    free(owned[i]);
  decls_free(k);
}

/* The comment right above source offset `start` (only whitespace between,
 * at most one line break), not reaching back before offset `lo` (the end
 * of the previous token): a block comment or a run of `//` lines, each
 * on lines of their own (a comment trailing code belongs to that code).
 * Caller frees; NULL when there is none. */
static char *doc_comment(const char *src, size_t lo, size_t start) {
  size_t e = start; /* exclusive end of the comment */
  int breaks = 0;
  while (e > lo && isspace((unsigned char)src[e - 1])) {
    if (src[e - 1] == '\n' && ++breaks > 1)
      return NULL; /* a blank line separates the comment from the chunk */
    e--;
  }
  if (e == lo)
    return NULL;
  size_t first;
  if (e - lo >= 4 && src[e - 1] == '/' && src[e - 2] == '*') {
    size_t s = e - 2;
    while (s-- > lo)
      if (src[s] == '/' && src[s + 1] == '*')
        break;
    if (s == (size_t)-1 || s < lo || src[s] != '/' || src[s + 1] != '*')
      return NULL;
    first = s;
  } else {
    /* `//` lines: walk back line by line while each starts with `//` */
    first = (size_t)-1;
    size_t line_end = e;
    for (;;) {
      size_t ls = line_end;
      while (ls > lo && src[ls - 1] != '\n')
        ls--;
      size_t t = ls;
      while (t < line_end && (src[t] == ' ' || src[t] == '\t'))
        t++;
      if (!(t + 1 < line_end && src[t] == '/' && src[t + 1] == '/'))
        break;
      if (ls > 0 && src[ls - 1] != '\n')
        break; /* code before it on its line */
      first = t;
      if (ls == 0 || ls <= lo + 1)
        break;
      line_end = ls - 1;
    }
    if (first == (size_t)-1)
      return NULL;
  }
  /* the comment must start its line */
  for (size_t t = first; t > 0 && src[t - 1] != '\n'; t--)
    if (src[t - 1] != ' ' && src[t - 1] != '\t')
      return NULL;
  return dup_range(src, first, e);
}

/* Specifier text from token a to e-1, without storage-class keywords that
 * do not survive versioning (static, inline, extern). */
static char *specifier_text(const cx_t *c, size_t a, size_t e) {
  size_t cap = 1;
  for (size_t i = a; i < e; i++)
    cap += c->t[i].end - c->t[i].start + 1;
  char *r = malloc(cap);
  if (!r)
    return NULL;
  r[0] = 0;
  size_t len = 0;
  for (size_t i = a; i < e; i++) {
    if (tk_is(c, i, "static") || tk_is(c, i, "inline") || tk_is(c, i, "__inline__") ||
        tk_is(c, i, "extern"))
      continue;
    size_t tl = c->t[i].end - c->t[i].start;
    /* keep the original text of groups (struct bodies) by copying tokens
     * with single spaces: enough for a type to recompile identically. */
    if (len)
      r[len++] = ' ';
    memcpy(r + len, c->src + c->t[i].start, tl);
    len += tl;
    r[len] = 0;
  }
  return r;
}

/* First identifier of a declarator that is its name (skipping qualifiers
 * and anything inside [] or a parameter list). */
static int declarator_name(const cx_t *c, size_t a, size_t b, size_t *out) {
  int depth_sq = 0;
  for (size_t i = a; i <= b; i++) {
    if (tk_is(c, i, "["))
      depth_sq++;
    else if (tk_is(c, i, "]"))
      depth_sq--;
    else if (!depth_sq && c->t[i].kind == TK_IDENT && !in_list(c, i, kw_specifier)) {
      *out = i;
      return 0;
    }
  }
  return -1;
}

/* Fill a VARIABLE chunk's declarators from tokens d..b (b is the `;`). */
static int parse_declarators(const cx_t *c, ex_chunk_t *k, size_t d, size_t b) {
  size_t i = d;
  while (i < b) {
    size_t s = i, eq = (size_t)-1;
    int depth = 0;
    for (; i < b; i++) {
      if (tk_is(c, i, "(") || tk_is(c, i, "[") || tk_is(c, i, "{"))
        depth++;
      else if (tk_is(c, i, ")") || tk_is(c, i, "]") || tk_is(c, i, "}"))
        depth--;
      else if (!depth && tk_is(c, i, "=") && eq == (size_t)-1)
        eq = i;
      else if (!depth && tk_is(c, i, ","))
        break;
    }
    if (eq != (size_t)-1 && eq + 1 >= i)
      return -1; /* `int x = ;`: the compiler will say what is missing */
    size_t decl_end = (eq == (size_t)-1 ? i : eq) - 1; /* inclusive */
    size_t name_i;
    if (decl_end < s || declarator_name(c, s, decl_end, &name_i))
      return -1;
    ex_declarator_t *v = realloc(k->decls, (k->ndecls + 1) * sizeof *v);
    if (!v)
      return -1;
    k->decls = v;
    ex_declarator_t *dd = &k->decls[k->ndecls++];
    memset(dd, 0, sizeof *dd);
    dd->name = tk_text(c, name_i);
    dd->declarator = tk_span(c, s, decl_end);
    if (eq != (size_t)-1 && eq + 1 < i) {
      dd->init = tk_span(c, eq + 1, i - 1);
      dd->init_braced = tk_is(c, eq + 1, "{");
      dd->init_line = c->t[eq + 1].line;
      dd->init_col = tk_col(c, eq + 1);
    }
    if (i < b && tk_is(c, i, ","))
      i++;
  }
  return 0;
}

static const char *const kw_cxx_decl[] = {"template", "namespace",     "using",
                                          "class",    "static_assert", NULL};
static const char *const kw_cuda[] = {"__global__", "__device__",  "__host__", "__constant__",
                                      "__shared__", "__managed__", NULL};

/* C++ mode: is the chunk a declaration to keep as written (see
 * EX_CHUNK_VERBATIM)? CUDA qualifiers count when they come before the
 * declarator's parameter list, initializer or body. */
static int is_cxx_verbatim(const cx_t *c, size_t a, size_t b) {
  if (in_list(c, a, kw_cxx_decl))
    return 1;
  if (tk_is(c, a, "extern") && a + 1 <= b && c->t[a + 1].kind == TK_STRING)
    return 1; /* extern "C" ... */
  for (size_t i = a; i <= b; i++) {
    if (tk_is(c, i, "(") || tk_is(c, i, "=") || tk_is(c, i, "{") || tk_is(c, i, ";"))
      break;
    if (in_list(c, i, kw_cuda))
      return 1;
  }
  return 0;
}

/* The index of the `{` that the `}` at index `close` closes, searching
 * back no further than `lo`; `close` itself when there is none. */
static size_t matching_open(const cx_t *c, size_t close, size_t lo) {
  int depth = 0;
  for (size_t j = close;; j--) {
    if (tk_is(c, j, "}"))
      depth++;
    else if (tk_is(c, j, "{") && --depth == 0)
      return j;
    if (j == lo)
      return close;
  }
}

/* `#define NAME ...`: NAME is the key, so a re-definition replaces it. */
static void classify_preproc(ex_chunk_t *k) {
  k->kind = EX_CHUNK_PREPROC;
  const char *p = k->text + 1;
  while (*p == ' ' || *p == '\t')
    p++;
  if (strncmp(p, "define", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
    p += 6;
    while (*p == ' ' || *p == '\t')
      p++;
    size_t l = 0;
    while (isalnum((unsigned char)p[l]) || p[l] == '_')
      l++;
    k->name = dup_range(p, 0, l);
  }
}

/* typedef: the name is the last identifier at depth 0, or the one inside
 * `(*name)` of a function-pointer typedef (`typedef int (*fn_t)(int);`). */
static void classify_typedef(const cx_t *c, size_t a, size_t b, ex_chunk_t *k) {
  k->kind = EX_CHUNK_TYPE;
  for (size_t i = b; i > a; i--) {
    if (c->t[i].kind == TK_IDENT && !in_list(c, i, kw_specifier)) {
      k->name = tk_text(c, i);
      return;
    }
    if (tk_is(c, i, ")")) {
      size_t j = a;
      while (j < b && !(tk_is(c, j, "(") && tk_is(c, j + 1, "*")))
        j++;
      if (j < b && c->t[j + 2].kind == TK_IDENT)
        k->name = tk_text(c, j + 2);
      return;
    }
  }
}

/* A struct/union/enum definition alone (`struct S {...};`, tokens a..b):
 * named "struct S" when it has a tag. A lone `enum` ending the cell has
 * none (its tag was read past the last token: tests/fuzz/fuzz_split). */
static void classify_tagged_type(const cx_t *c, size_t a, size_t b, ex_chunk_t *k) {
  k->kind = EX_CHUNK_TYPE;
  size_t t = a + 1; /* the tag, past attributes (`struct __attribute__((packed)) S`) */
  while (t < b && (tk_is(c, t, "__attribute__") || tk_is(c, t, "_Alignas")))
    t = t + 1 < b && tk_is(c, t + 1, "(") ? skip_group(c, t + 1) : t + 1;
  if (!(tk_is(c, a, "struct") || tk_is(c, a, "union") || tk_is(c, a, "enum")) || t >= b ||
      c->t[t].kind != TK_IDENT)
    return;
  char *tag = tk_text(c, a), *nm = tk_text(c, t);
  if (tag && nm) {
    size_t l = strlen(tag) + strlen(nm) + 2;
    k->name = malloc(l);
    if (k->name)
      snprintf(k->name, l, "%s %s", tag, nm);
  }
  free(tag);
  free(nm);
}

/* Tokens d..b end in `}`: a function definition (a declarator with a
 * parameter list, then a body) or else a statement. */
static void classify_braced(const cx_t *c, size_t d, size_t b, ex_chunk_t *k) {
  size_t open = matching_open(c, b, d), name_i;
  if (!(open > d && declarator_name(c, d, open - 1, &name_i) == 0)) {
    k->kind = EX_CHUNK_STATEMENT;
    return;
  }
  k->kind = EX_CHUNK_FUNCTION;
  k->name = tk_text(c, name_i);
  char *decl = tk_span(c, d, open - 1);
  size_t l = strlen(k->specifiers) + strlen(decl) + 2;
  k->signature = malloc(l);
  if (k->signature)
    snprintf(k->signature, l, "%s %s", k->specifiers, decl);
  free(decl);
  k->body = tk_span(c, open, b);
}

/* Tokens d..b (b is `;`) after the specifiers: a prototype (the
 * declarator's name directly followed by `(`, no initializer) or
 * variables. */
static void classify_semi_declaration(const cx_t *c, size_t d, size_t b, ex_chunk_t *k) {
  size_t name_i;
  if (d < b && declarator_name(c, d, b - 1, &name_i) == 0 && tk_is(c, name_i + 1, "(")) {
    int has_init = 0;
    for (size_t i = d; i < b; i++)
      if (tk_is(c, i, "="))
        has_init = 1;
    if (!has_init) {
      k->kind = EX_CHUNK_PROTOTYPE;
      k->name = tk_text(c, name_i);
      return;
    }
  }
  k->kind = EX_CHUNK_VARIABLE;
  if (parse_declarators(c, k, d, b)) {
    /* not a well-formed declaration after all: let the compiler judge it
     * as a statement, where the error message will point at it */
    decls_free(k);
    k->kind = EX_CHUNK_STATEMENT;
  }
}

/* A declaration whose specifiers end before token d. */
static void classify_declaration(const cx_t *c, size_t a, size_t d, size_t b, ex_chunk_t *k) {
  k->is_extern = 0;
  for (size_t i = a; i < d; i++)
    if (tk_is(c, i, "extern"))
      k->is_extern = 1;
  k->specifiers = specifier_text(c, a, d);
  /* Versioned definitions are global symbols: blank `static`/`inline` in
   * the text, keeping every column where it was for diagnostics. */
  for (size_t i = a; i < d; i++)
    if (tk_is(c, i, "static") || tk_is(c, i, "inline") || tk_is(c, i, "__inline__"))
      memset(k->text + (c->t[i].start - c->t[a].start), ' ', c->t[i].end - c->t[i].start);
  if (tk_is(c, b, "}"))
    classify_braced(c, d, b, k);
  else if (!tk_is(c, b, ";"))
    k->kind = EX_CHUNK_STATEMENT; /* compiler will say what is missing */
  else
    classify_semi_declaration(c, d, b, k);
}

/* What is left once the chunk is no directive, statement or typedef:
 * after its declaration specifiers, an expression or statement (none),
 * a struct/union/enum definition alone, or a declaration. */
static void classify_specified(const cx_t *c, size_t a, size_t b, int last, ex_chunk_t *k) {
  int ends_semi = tk_is(c, b, ";"), is_decl = 0;
  size_t d = parse_specifiers(c, a, b, &is_decl);
  if (!is_decl)
    k->kind = (last && !ends_semi) ? EX_CHUNK_EXPRESSION : EX_CHUNK_STATEMENT;
  else if (d > b || (d == b && ends_semi))
    classify_tagged_type(c, a, b, k);
  else
    classify_declaration(c, a, d, b, k);
}

/* Classify tokens a..b (inclusive) into chunk k. `last` = final chunk of
 * the cell. 0, or -1 when memory ran out. */
static int classify(const cx_t *c, size_t a, size_t b, int last, ex_chunk_t *k) {
  k->line = c->t[a].line;
  k->col = tk_col(c, a);
  k->text = tk_span(c, a, b);
  if (!k->text)
    return -1;
  k->doc = doc_comment(c->src, a ? c->t[a - 1].end : 0, c->t[a].start);
  if (c->t[a].kind == TK_PREPROC && a < b)
    k->kind = EX_CHUNK_STATEMENT; /* pragmas, then their statement */
  else if (c->t[a].kind == TK_PREPROC)
    classify_preproc(k);
  else if (c->cxx && is_cxx_verbatim(c, a, b))
    k->kind = EX_CHUNK_VERBATIM;
  else if (in_list(c, a, kw_statement) || tk_is(c, a, "{"))
    k->kind = EX_CHUNK_STATEMENT;
  else if (tk_is(c, a, "typedef"))
    classify_typedef(c, a, b, k);
  else
    classify_specified(c, a, b, last, k);
  return 0;
}

/* A `#pragma` at token i directly followed by a statement (OpenMP's
 * `#pragma omp parallel for`, `#pragma GCC unroll 4`): it belongs to
 * that statement, as C says, so it runs with it in the run function. */
static int pragma_heads_statement(const cx_t *c, size_t i) {
  if (i + 1 >= c->n || c->t[i + 1].kind == TK_PREPROC)
    return 0;
  char *text = tk_text(c, i);
  int pragma = text && ex_split_is_pragma(text);
  free(text);
  return pragma && (in_list(c, i + 1, kw_statement) || tk_is(c, i + 1, "{"));
}

/* The first token of the chunk that began at a, past the pragmas that
 * head it. */
static size_t chunk_head(const cx_t *c, size_t a, size_t i) {
  while (a < i && c->t[a].kind == TK_PREPROC)
    a++;
  return a;
}

/* Does the `}` at index i (back to depth 0) end the chunk that began at
 * token a? See the rules at the top of the file. */
static int brace_ends_chunk(const cx_t *c, size_t a, size_t i) {
  a = chunk_head(c, a, i);
  if (tk_is(c, a, "typedef") || tk_is(c, a, "do"))
    return 0;
  if (i + 1 < c->n && tk_is(c, i + 1, "else"))
    return 0;
  if (i + 1 < c->n && (tk_is(c, i + 1, ";") || tk_is(c, i + 1, ",")))
    return 0;
  size_t open = matching_open(c, i, a);
  if (open == a)
    return 1; /* a bare compound statement */
  if (in_list(c, a, kw_statement))
    return 1; /* if/for/while/switch body (`==` or `=` in its head is no initializer) */
  if (c->cxx && (tk_is(c, a, "template") || tk_is(c, a, "namespace") ||
                 (tk_is(c, a, "extern") && a + 1 < c->n && c->t[a + 1].kind == TK_STRING)))
    return 1; /* `template <int N = 3> ... { }`, `namespace ns { }`, `extern "C" { }` */
  /* initializer: `= {` or `= (T){`, with the `=` outside any bracket */
  int depth = 0;
  for (size_t j = a; j < open; j++) {
    if (tk_is(c, j, "(") || tk_is(c, j, "[") || tk_is(c, j, "{"))
      depth++;
    else if (tk_is(c, j, ")") || tk_is(c, j, "]") || tk_is(c, j, "}"))
      depth--;
    else if (depth == 0 && tk_is(c, j, "="))
      return 0;
  }
  /* struct/union/enum body: `struct [tag] {` */
  if (tk_is(c, open - 1, "struct") || tk_is(c, open - 1, "union") || tk_is(c, open - 1, "enum"))
    return 0;
  if (open >= 2 && c->t[open - 1].kind == TK_IDENT &&
      (tk_is(c, open - 2, "struct") || tk_is(c, open - 2, "union") || tk_is(c, open - 2, "enum")))
    return 0;
  return 1;
}

/* Does the `;` at index i (depth 0) end the chunk that began at token a?
 * Not before an `else` (`if (x) a(); else b();`), and not inside a `do`
 * statement before its `while (...)`. */
static int semi_ends_chunk(const cx_t *c, size_t a, size_t i) {
  a = chunk_head(c, a, i);
  if (i + 1 < c->n && tk_is(c, i + 1, "else"))
    return 0;
  if (tk_is(c, a, "do")) {
    /* the `;` must follow `while ( ... )` */
    if (i == 0 || !tk_is(c, i - 1, ")"))
      return 0;
    int depth = 0;
    for (size_t j = i - 1; j > a; j--) {
      if (tk_is(c, j, ")"))
        depth++;
      else if (tk_is(c, j, "(") && --depth == 0)
        return tk_is(c, j - 1, "while");
    }
    return 0;
  }
  return 1;
}

ex_result_t ex_split(const char *src, int flags, ex_is_type_fn is_type, void *ctx, ex_split_t *out,
                     char *err, size_t errlen) {
  tk_list_t tl = {0};
  memset(out, 0, sizeof *out);
  if (tokenize(src, &tl, err, errlen, NULL)) {
    free(tl.v);
    return EX_ERR_SPLIT;
  }
  cx_t c = {src, tl.v, tl.n, is_type, ctx, NULL, 0, (flags & EX_SPLIT_CXX) != 0};
  size_t cap = 0;
  size_t a = 0;
  int depth = 0;
  for (size_t i = 0; i < c.n; i++) {
    int end = 0;
    if (c.t[i].kind == TK_PREPROC) {
      /* a directive inside a construct stays inside it */
      end = i == a && !pragma_heads_statement(&c, i);
    } else if (tk_is(&c, i, "(") || tk_is(&c, i, "[") || tk_is(&c, i, "{")) {
      depth++;
    } else if (tk_is(&c, i, ")") || tk_is(&c, i, "]") || tk_is(&c, i, "}")) {
      if (--depth < 0) {
        set_err(err, errlen, "line %d: unmatched '%c'", c.t[i].line, src[c.t[i].start]);
        goto fail;
      }
      if (depth == 0 && tk_is(&c, i, "}") && brace_ends_chunk(&c, a, i))
        end = 1;
    } else if (depth == 0 && tk_is(&c, i, ";")) {
      end = semi_ends_chunk(&c, a, i);
    }
    if (!end && i + 1 < c.n)
      continue;
    if (!end && depth > 0) {
      set_err(err, errlen, "line %d: bracket opened here is not closed", c.t[a].line);
      goto fail;
    }
    if (out->count == cap) {
      cap = cap ? cap * 2 : 8;
      ex_chunk_t *v = realloc(out->chunks, cap * sizeof *v);
      if (!v)
        goto fail;
      out->chunks = v;
    }
    ex_chunk_t *k = &out->chunks[out->count++];
    memset(k, 0, sizeof *k);
    if (classify(&c, a, i, i + 1 == c.n, k))
      goto fail;
    if (k->kind == EX_CHUNK_TYPE && k->name && !strchr(k->name, ' ')) {
      char **v = realloc(c.local_types, (c.nlocal + 1) * sizeof *v);
      if (!v)
        goto fail;
      c.local_types = v;
      c.local_types[c.nlocal++] = k->name; /* borrowed from the chunk */
    }
    a = i + 1;
  }
  free(tl.v);
  free(c.local_types);
  return EX_OK;
fail:
  free(tl.v);
  free(c.local_types);
  ex_split_free(out);
  if (err && errlen && err[0])
    return EX_ERR_SPLIT; /* the message says what does not parse */
  set_err(err, errlen, "out of memory");
  return EX_ERR_NOMEM;
}

void ex_split_free(ex_split_t *s) {
  for (size_t i = 0; i < s->count; i++)
    chunk_free(&s->chunks[i]);
  free(s->chunks);
  s->chunks = NULL;
  s->count = 0;
}

int ex_split_is_pragma(const char *text) {
  while (*text == ' ' || *text == '\t')
    text++;
  if (*text++ != '#')
    return 0;
  while (*text == ' ' || *text == '\t')
    text++;
  return !strncmp(text, "pragma", 6) && (text[6] == ' ' || text[6] == '\t' || !text[6]);
}

int ex_split_defines_function(const ex_split_t *sp, const char *name) {
  for (size_t i = 0; i < sp->count; i++)
    if (sp->chunks[i].kind == EX_CHUNK_FUNCTION && strcmp(sp->chunks[i].name, name) == 0)
      return 1;
  return 0;
}

static int tk_word(const char *src, const tk_t *t, const char *w) {
  size_t n = strlen(w);
  return t->kind == TK_IDENT && t->end - t->start == n && !memcmp(src + t->start, w, n);
}

/* Does the source end where C requires a statement to follow: after
 * `else`, `do`, or the `( ... )` head of if/for/while/switch (`if (1)`
 * waits for its body, as Python's `if x:` does in IPython)? */
static int wants_statement(const char *src, const tk_list_t *tl) {
  if (!tl->n)
    return 0;
  const tk_t *t = &tl->v[tl->n - 1];
  if (tk_word(src, t, "else") || tk_word(src, t, "do"))
    return 1;
  if (t->kind != TK_PUNCT || src[t->start] != ')')
    return 0;
  int depth = 0;
  for (size_t j = tl->n; j-- > 0;) {
    const tk_t *u = &tl->v[j];
    if (u->kind != TK_PUNCT)
      continue;
    if (src[u->start] == ')')
      depth++;
    else if (src[u->start] == '(' && --depth == 0) {
      if (j == 0)
        return 0;
      const tk_t *kw = &tl->v[j - 1];
      return tk_word(src, kw, "if") || tk_word(src, kw, "for") || tk_word(src, kw, "while") ||
             tk_word(src, kw, "switch");
    }
  }
  return 0;
}

const char *ex_split_is_complete(const char *src) {
  tk_list_t tl = {0};
  int open_state = 0;
  char err[8];
  if (tokenize(src, &tl, err, sizeof err, &open_state)) {
    free(tl.v);
    return open_state ? "incomplete" : "invalid";
  }
  int depth = 0;
  const char *r = "complete";
  for (size_t i = 0; i < tl.n; i++) {
    char ch = src[tl.v[i].start];
    if (tl.v[i].kind != TK_PUNCT)
      continue;
    if (ch == '(' || ch == '[' || ch == '{')
      depth++;
    else if (ch == ')' || ch == ']' || ch == '}') {
      if (--depth < 0) {
        r = "invalid";
        break;
      }
    }
  }
  if (depth > 0 || (depth == 0 && !strcmp(r, "complete") && wants_statement(src, &tl)))
    r = "incomplete";
  /* a trailing backslash continues the line */
  size_t n = strlen(src);
  while (n && (src[n - 1] == '\n' || src[n - 1] == ' '))
    n--;
  if (n && src[n - 1] == '\\' && strcmp(r, "complete") == 0)
    r = "incomplete";
  free(tl.v);
  return r;
}
