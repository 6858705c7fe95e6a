/*
 * ex_cell.c — code generation: a cell's chunks into a translation unit
 * with versioned names, its tag and entry points. See ex_cell.h for the
 * scheme; what earlier cells defined is kept by ex_cell_state.c.
 */
#define _GNU_SOURCE
#include "ex_cell.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nbf_buf.h"
#include "nbf_util.h"

/* Stands for the unit's tag until the unit's hash is known. */
#define TAG_PLACEHOLDER "@NBFTAG@"

/* FNV-1a over `s`, leaving out `#line` marker lines: they name the cell
 * by its execution count, which must not defeat the compile cache. */
static uint64_t unit_hash(const char *s, uint64_t h) {
  int bol = 1;
  while (*s) {
    if (bol && strncmp(s, "#line ", 6) == 0) {
      const char *nl = strchr(s, '\n');
      if (!nl)
        break;
      s = nl + 1;
      continue;
    }
    h ^= (unsigned char)*s;
    h *= NBF_FNV_PRIME;
    bol = *s == '\n';
    s++;
  }
  return h;
}

/* Mix into h the size and modification time of each file the unit
 * includes with quotes (`#include "mylib.h"`, a path relative to the
 * executor's directory or absolute), so editing such a header defeats the
 * compile cache as editing the cell would. Headers those include are not
 * followed; system headers (<...>) are taken as unchanging. */
static uint64_t hash_local_includes(const char *src, uint64_t h) {
  for (const char *p = src; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    const char *q = p;
    while (*q == ' ' || *q == '\t')
      q++;
    if (*q++ != '#')
      continue;
    while (*q == ' ' || *q == '\t')
      q++;
    if (strncmp(q, "include", 7) != 0)
      continue;
    q += 7;
    while (*q == ' ' || *q == '\t')
      q++;
    if (*q != '"')
      continue;
    const char *e = strchr(q + 1, '"');
    const char *nl = strchr(q, '\n');
    if (!e || (nl && e > nl) || e - q - 1 >= 4096)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)(e - q - 1), q + 1);
    struct stat st;
    char info[128];
    if (stat(path, &st) == 0)
      snprintf(info, sizeof info, "|%lld.%09ld:%lld", (long long)st.st_mtim.tv_sec,
               (long)st.st_mtim.tv_nsec, (long long)st.st_size);
    else
      snprintf(info, sizeof info, "|missing");
    h = nbf_fnv1a(path, nbf_fnv1a(info, h));
  }
  return h;
}

static int has_word(const char *text, const char *word) {
  return ex_cell_find_word(text, word) != NULL;
}

/* Is the declared object itself const (`const int k`, `int *const p`),
 * as opposed to a pointer to const (`const char *s`)? */
static int object_is_const(const ex_chunk_t *k, const ex_declarator_t *d) {
  const char *star = strrchr(d->declarator, '*');
  if (!star)
    return has_word(k->specifiers, "const");
  return has_word(star + 1, "const");
}

typedef enum {
  INIT_NONE,   /* no initializer: zero                                    */
  INIT_STATIC, /* braced list or array: a static initializer              */
  INIT_CONST,  /* const object: a static initializer, never reset         */
  INIT_RUNTIME /* assigned when the cell runs (may call functions)        */
} init_kind_t;

/* Whether an initializer contains a compound literal (`(int[]){1, 2}`,
 * `&(struct p){0}`): a `)` followed by `{`. At file scope C gives it
 * static storage, so such an initializer stays a static one: assigned in
 * the run function, the literal would be automatic and dangle. */
static int has_compound_literal(const char *init) {
  for (const char *p = strchr(init, ')'); p; p = strchr(p + 1, ')')) {
    const char *q = p + 1;
    while (isspace((unsigned char)*q))
      q++;
    if (*q == '{')
      return 1;
  }
  return 0;
}

/* Whether an initializer calls a function (a name followed by `(`, other
 * than the operators sizeof, _Alignof, alignof, offsetof): it can only run
 * when the cell runs (nbfork's extension of C), and a compound literal in
 * it is an argument the call consumes. */
static int has_call(const char *init) {
  static const char *const operators[] = {"sizeof",   "_Alignof",           "alignof",
                                          "offsetof", "__builtin_offsetof", "__alignof__"};
  for (const char *p = init; *p; p++) {
    if (!(isalpha((unsigned char)*p) || *p == '_') ||
        (p > init && (isalnum((unsigned char)p[-1]) || p[-1] == '_')))
      continue;
    const char *e = p;
    while (isalnum((unsigned char)*e) || *e == '_')
      e++;
    const char *q = e;
    while (isspace((unsigned char)*q))
      q++;
    int op = 0;
    for (size_t i = 0; i < sizeof operators / sizeof *operators; i++)
      op |= strlen(operators[i]) == (size_t)(e - p) && !strncmp(p, operators[i], (size_t)(e - p));
    if (*q == '(' && !op)
      return 1;
    p = e - 1;
  }
  return 0;
}

static init_kind_t init_kind(const ex_chunk_t *k, const ex_declarator_t *d) {
  if (object_is_const(k, d))
    return INIT_CONST;
  if (!d->init)
    return INIT_NONE;
  if (d->init_braced || strchr(d->declarator, '[') ||
      (has_compound_literal(d->init) && !has_call(d->init)))
    return INIT_STATIC;
  return INIT_RUNTIME;
}

/* Helpers that show a cell's last expression as Jupyter execute_result
 * (text/plain): integers in decimal, floating point in the shortest form
 * that reads back equal, `char *` as a quoted C string, other pointers in
 * hex, structs by size. They declare the libc functions they call under
 * private names (asm labels), so a cell needs no header and its own names
 * never clash with them. C dispatches with _Generic; C++ (%%cuda cells)
 * with overloads. A void expression shows nothing. */
static const char show_helpers[] =
    "#define __NBF_U __attribute__((unused))\n"
    "extern int __nbf_snprintf(char *, __SIZE_TYPE__, const char *, ...) __asm__(\"snprintf\");\n"
    "extern double __nbf_strtod(const char *, char **) __asm__(\"strtod\");\n"
    "extern float __nbf_strtof(const char *, char **) __asm__(\"strtof\");\n"
    "static __NBF_U void __nbf_show_ll(long long v){char b[32];"
    "__nbf_snprintf(b,sizeof b,\"%lld\",v);nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_ull(unsigned long long v){char b[32];"
    "__nbf_snprintf(b,sizeof b,\"%llu\",v);nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_d(double v){char b[40];for(int p=1;p<=17;p++){"
    "__nbf_snprintf(b,sizeof b,\"%.*g\",p,v);if(__nbf_strtod(b,0)==v)break;}"
    "nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_f(float v){char b[40];for(int p=1;p<=9;p++){"
    "__nbf_snprintf(b,sizeof b,\"%.*g\",p,(double)v);if(__nbf_strtof(b,0)==v)break;}"
    "nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_ld(long double v){char b[64];"
    "__nbf_snprintf(b,sizeof b,\"%Lg\",v);nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_bool(int v){nbf__execute_result(v?\"true\":\"false\");}\n"
    "static __NBF_U void __nbf_show_char(char v){char b[32];"
    "if(v>=32&&v<127)__nbf_snprintf(b,sizeof b,\"'%c' (%d)\",v,v);"
    "else __nbf_snprintf(b,sizeof b,\"%d\",v);nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_str(const char *s){if(!s){nbf__execute_result(\"NULL\");"
    "return;}__SIZE_TYPE__ n=0;while(s[n])n++;char *b=(char *)__builtin_malloc(4*n+3);"
    "if(!b)return;__SIZE_TYPE__ o=0;b[o++]='\"';for(__SIZE_TYPE__ i=0;i<n;i++){"
    "unsigned char c=(unsigned char)s[i];if(c=='\"'||c=='\\\\'){b[o++]='\\\\';b[o++]=(char)c;}"
    "else if(c=='\\n'){b[o++]='\\\\';b[o++]='n';}else if(c=='\\t'){b[o++]='\\\\';b[o++]='t';}"
    "else if(c<32||c==127){__nbf_snprintf(b+o,5,\"\\\\x%02x\",c);o+=4;}else b[o++]=(char)c;}"
    "b[o++]='\"';b[o]=0;nbf__execute_result(b);__builtin_free(b);}\n"
    "static __NBF_U void __nbf_show_ptr(const void *p){char b[32];"
    "if(p)__nbf_snprintf(b,sizeof b,\"%p\",p);else __nbf_snprintf(b,sizeof b,\"NULL\");"
    "nbf__execute_result(b);}\n"
    "static __NBF_U void __nbf_show_obj(__SIZE_TYPE__ size){char b[64];"
    "__nbf_snprintf(b,sizeof b,\"<%zu-byte value>\",(__SIZE_TYPE__)size);"
    "nbf__execute_result(b);}\n"
    "#ifndef __cplusplus\n"
    /* every C shower takes (type class, size, value) so _Generic's default
     * can be variadic and receive structs too */
    "#define __NBF_SHOW_AS(name, T, f) static __NBF_U void name(int c, __SIZE_TYPE__ n, T v)"
    "{(void)c;(void)n;f(v);}\n"
    "__NBF_SHOW_AS(__nbf_c_bool, _Bool, __nbf_show_bool)\n"
    "__NBF_SHOW_AS(__nbf_c_char, char, __nbf_show_char)\n"
    "__NBF_SHOW_AS(__nbf_c_ll, long long, __nbf_show_ll)\n"
    "__NBF_SHOW_AS(__nbf_c_ull, unsigned long long, __nbf_show_ull)\n"
    "__NBF_SHOW_AS(__nbf_c_f, float, __nbf_show_f)\n"
    "__NBF_SHOW_AS(__nbf_c_d, double, __nbf_show_d)\n"
    "__NBF_SHOW_AS(__nbf_c_ld, long double, __nbf_show_ld)\n"
    "__NBF_SHOW_AS(__nbf_c_str, const char *, __nbf_show_str)\n"
    "static __NBF_U void __nbf_c_u128(int c, __SIZE_TYPE__ n, unsigned __int128 u){"
    "(void)c;(void)n;char b[48];int i=47;b[i]=0;do{b[--i]=(char)('0'+(int)(u%10));u/=10;}"
    "while(u);nbf__execute_result(b+i);}\n"
    "static __NBF_U void __nbf_c_i128(int c, __SIZE_TYPE__ n, __int128 v){"
    "(void)c;(void)n;char b[48];int i=47;unsigned __int128 u=v<0?-(unsigned __int128)v:"
    "(unsigned __int128)v;b[i]=0;do{b[--i]=(char)('0'+(int)(u%10));u/=10;}while(u);"
    "if(v<0)b[--i]='-';nbf__execute_result(b+i);}\n"
    "static __NBF_U void __nbf_c_other(int c, __SIZE_TYPE__ n, ...){"
    "__builtin_va_list ap;__builtin_va_start(ap,n);"
    "if(c==5)__nbf_show_ptr(__builtin_va_arg(ap,void *));"
    "else __nbf_show_obj(n);__builtin_va_end(ap);}\n"
    "#define __nbf_isvoid(x) __builtin_types_compatible_p(__typeof__(x), void)\n"
    "#define __nbf_show(x) __builtin_choose_expr(__nbf_isvoid(x), (void)(x), "
    "__nbf_show1(__builtin_choose_expr(__nbf_isvoid(x), 0, (x))))\n"
    "#define __nbf_show1(y) __extension__ ({ __auto_type __nbf_v = (y); _Generic(__nbf_v, "
    "_Bool: __nbf_c_bool, char: __nbf_c_char, signed char: __nbf_c_ll, "
    "unsigned char: __nbf_c_ull, short: __nbf_c_ll, unsigned short: __nbf_c_ull, "
    "int: __nbf_c_ll, unsigned: __nbf_c_ull, long: __nbf_c_ll, unsigned long: __nbf_c_ull, "
    "long long: __nbf_c_ll, unsigned long long: __nbf_c_ull, float: __nbf_c_f, "
    "double: __nbf_c_d, long double: __nbf_c_ld, char *: __nbf_c_str, "
    "const char *: __nbf_c_str, __int128: __nbf_c_i128, unsigned __int128: __nbf_c_u128, "
    "default: __nbf_c_other)"
    "(__builtin_classify_type(__nbf_v), sizeof __nbf_v, __nbf_v); })\n"
    "#else\n"
    "static __NBF_U void __nbf_show_cxx(bool v){__nbf_show_bool(v);}\n"
    "static __NBF_U void __nbf_show_cxx(char v){__nbf_show_char(v);}\n"
    "static __NBF_U void __nbf_show_cxx(signed char v){__nbf_show_ll(v);}\n"
    "static __NBF_U void __nbf_show_cxx(unsigned char v){__nbf_show_ull(v);}\n"
    "static __NBF_U void __nbf_show_cxx(short v){__nbf_show_ll(v);}\n"
    "static __NBF_U void __nbf_show_cxx(unsigned short v){__nbf_show_ull(v);}\n"
    "static __NBF_U void __nbf_show_cxx(int v){__nbf_show_ll(v);}\n"
    "static __NBF_U void __nbf_show_cxx(unsigned v){__nbf_show_ull(v);}\n"
    "static __NBF_U void __nbf_show_cxx(long v){__nbf_show_ll(v);}\n"
    "static __NBF_U void __nbf_show_cxx(unsigned long v){__nbf_show_ull(v);}\n"
    "static __NBF_U void __nbf_show_cxx(long long v){__nbf_show_ll(v);}\n"
    "static __NBF_U void __nbf_show_cxx(unsigned long long v){__nbf_show_ull(v);}\n"
    "static __NBF_U void __nbf_show_cxx(float v){__nbf_show_f(v);}\n"
    "static __NBF_U void __nbf_show_cxx(double v){__nbf_show_d(v);}\n"
    "static __NBF_U void __nbf_show_cxx(long double v){__nbf_show_ld(v);}\n"
    "static __NBF_U void __nbf_show_cxx(char *v){__nbf_show_str(v);}\n"
    "static __NBF_U void __nbf_show_cxx(const char *v){__nbf_show_str(v);}\n"
    "template <class T> static __NBF_U void __nbf_show_cxx(T *p){__nbf_show_ptr((const void "
    "*)p);}\n"
    "template <class T> static __NBF_U void __nbf_show_cxx(const T &){__nbf_show_obj(sizeof(T));}\n"
    "static __NBF_U void __nbf_show_any(__nbf_tag) {}\n"
    "template <class T> static __NBF_U void __nbf_show_any(__nbf_box<T> b){__nbf_show_cxx(*b.p);}\n"
    "#define __nbf_show(x) __nbf_show_any(((x), __nbf_tag()))\n"
    "#endif\n";

/* C++ only: `(EXPR, __nbf_tag())` is the built-in comma (a tag) when EXPR
 * is void, else our operator (a box pointing at the value): overloads on
 * the result tell the two apart. Used to show values and by launch thunks. */
static const char cxx_support[] =
    "#ifdef __cplusplus\n"
    "struct __nbf_tag {};\n"
    "template <class T> struct __nbf_box { const T *p; };\n"
    "template <class T> static __attribute__((unused)) __nbf_box<T> operator,(const T &v, "
    "__nbf_tag) { __nbf_box<T> b = {&v}; return b; }\n"
    "static __attribute__((unused)) int __nbf_launch_int(__nbf_tag) { return 0; }\n"
    "template <class T> static __attribute__((unused)) int __nbf_launch_int(__nbf_box<T> b) "
    "{ return (int)*b.p; }\n"
    "#endif\n";

/* Replace every TAG_PLACEHOLDER in src with tag (caller frees). */
static char *fill_tag(const char *src, const char *tag) {
  nbf_buf_t b = {0};
  const char *p = src, *q;
  size_t pl = strlen(TAG_PLACEHOLDER);
  while ((q = strstr(p, TAG_PLACEHOLDER)) != NULL) {
    if (nbf_buf_append(&b, p, (size_t)(q - p)) || nbf_buf_puts(&b, tag))
      goto oom;
    p = q + pl;
  }
  if (nbf_buf_puts(&b, p))
    goto oom;
  return nbf_buf_take(&b);
oom:
  nbf_buf_free(&b);
  return NULL;
}

/* The three parts of a unit being generated: the translation unit
 * (`src`), the body of its run function (`run`: statements and runtime
 * initializers, in order) and what a re-run resets first (`reset`).
 * `ok` turns 0 when memory ran out; checked once, at the end. */
typedef struct {
  nbf_buf_t src, run, reset;
  const char *label;
  int ok, has_expr;
  const ex_cell_state_t *st; /* where the %launch thunk looks its function up: */
  const ex_split_t *sp;      /* the cell's own code first, then earlier cells  */
  int cxx, refused;          /* refused: the thunk's function returns a refused type */
  char *err;
  size_t errlen;
} gen_t;

/* printf into one part of the unit, after a `#line N "cell[3]"` marker
 * and col - 1 spaces, so diagnostics name the cell, its line and its
 * (byte) column: the text starts where it stood in the cell. */
static void __attribute__((format(printf, 5, 6)))
emit_at(gen_t *g, nbf_buf_t *b, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = NULL;
  int n = vasprintf(&text, fmt, ap);
  va_end(ap);
  g->ok &= n >= 0 && !nbf_buf_printf(b, "#line %d \"%s\"\n%*s%s", line, g->label,
                                     col > 1 ? col - 1 : 0, "", text);
  free(text);
}

#define emit(g, b, line, ...) emit_at(g, b, line, 1, __VA_ARGS__)

/* A global: the declaration goes to the unit under its versioned name;
 * an initializer that must run goes to the run function, and what a
 * re-run from the compile cache must reset goes to `reset`. */
static void emit_variable(gen_t *g, const ex_chunk_t *k) {
  for (size_t d = 0; d < k->ndecls; d++) {
    const ex_declarator_t *dd = &k->decls[d];
    init_kind_t ik = init_kind(k, dd);
    int si = dd->init && ik != INIT_RUNTIME;
    /* the initializer on a line of its own, at its cell line and column */
    emit_at(g, &g->src, k->line, k->col, "%s %s __asm__(\"%s__c" TAG_PLACEHOLDER "\")%s\n",
            k->specifiers, dd->declarator, dd->name, si ? " =" : ";");
    if (si)
      emit_at(g, &g->src, dd->init_line, dd->init_col, "%s;\n", dd->init);
    if (ik == INIT_RUNTIME) {
      /* through a local, so braced macros (ACC_CONFIG_INIT) and
       * struct-valued calls both work as initializers */
      emit(g, &g->run, k->line, "{ __typeof__(%s) __nbf_init =\n", dd->name);
      emit_at(g, &g->run, dd->init_line, dd->init_col, "%s; %s = __nbf_init; }\n", dd->init,
              dd->name);
    } else if (ik == INIT_NONE && !strstr(dd->declarator, "[]"))
      emit(g, &g->reset, k->line, "__builtin_memset((void *)&%s, 0, sizeof %s);\n", dd->name,
           dd->name);
    else if (ik == INIT_STATIC && has_compound_literal(dd->init)) {
      /* the copy at file scope too: a compound literal in a function is
       * automatic, and its address no constant */
      emit(g, &g->src, k->line, "static const __typeof__(%s) __nbf_i_%s =\n", dd->name, dd->name);
      emit_at(g, &g->src, dd->init_line, dd->init_col, "%s;\n", dd->init);
      emit(g, &g->reset, k->line,
           "__builtin_memcpy((void *)&%s, (const void *)&__nbf_i_%s, sizeof %s);\n", dd->name,
           dd->name, dd->name);
    } else if (ik == INIT_STATIC) {
      emit(g, &g->reset, k->line, "{ static const __typeof__(%s) __nbf_i =\n", dd->name);
      emit_at(g, &g->reset, dd->init_line, dd->init_col,
              "%s; __builtin_memcpy((void *)&%s, (const void *)&__nbf_i, sizeof %s); }\n", dd->init,
              dd->name, dd->name);
    }
  }
}

/* One chunk of the cell into its place in the unit. */
static void emit_chunk(gen_t *g, const ex_split_t *sp, const ex_chunk_t *k) {
  switch (k->kind) {
  case EX_CHUNK_PROTOTYPE:
    if (ex_split_defines_function(sp, k->name)) {
      size_t l = strlen(k->text);
      while (l && (k->text[l - 1] == ';' || k->text[l - 1] == ' '))
        l--;
      emit_at(g, &g->src, k->line, k->col, "%.*s __asm__(\"%s__c" TAG_PLACEHOLDER "\");\n", (int)l,
              k->text, k->name);
    } else { /* a function defined in an earlier cell or a library */
      emit_at(g, &g->src, k->line, k->col, "%s\n", k->text);
    }
    break;
  case EX_CHUNK_PREPROC:
  case EX_CHUNK_TYPE:
  case EX_CHUNK_VERBATIM:
    emit_at(g, &g->src, k->line, k->col, "%s\n", k->text);
    break;
  case EX_CHUNK_FUNCTION:
    emit(g, &g->src, k->line, "%s __asm__(\"%s__c" TAG_PLACEHOLDER "\");\n", k->signature, k->name);
    emit_at(g, &g->src, k->line, k->col, "%s\n", k->text);
    break;
  case EX_CHUNK_VARIABLE:
    if (k->is_extern)
      emit_at(g, &g->src, k->line, k->col, "%s\n", k->text);
    else
      emit_variable(g, k);
    break;
  case EX_CHUNK_STATEMENT:
    emit_at(g, &g->run, k->line, k->col, "%s\n", k->text);
    break;
  case EX_CHUNK_EXPRESSION:
    /* the expression on a line of its own, at its cell line and column,
     * the macro's name on the line before it (`#line 0` for the first:
     * accepted; a #line inside the macro's arguments would not be) */
    g->has_expr = 1;
    g->ok &= !nbf_buf_printf(&g->run, "#line %d \"%s\"\n__nbf_show((\n%*s%s));\n", k->line - 1,
                             g->label, k->col > 1 ? k->col - 1 : 0, "", k->text);
    break;
  }
}

/* No function, no C++ declaration, no loop: see ex_cell_unit_t.straight. */
static int is_straight(const ex_split_t *sp) {
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (k->kind == EX_CHUNK_FUNCTION || k->kind == EX_CHUNK_VERBATIM || has_word(k->text, "for") ||
        has_word(k->text, "while") || has_word(k->text, "do") || has_word(k->text, "goto"))
      return 0;
  }
  return 1;
}

/* The helpers that show a value and call a launch thunk, before any
 * code of the user's: pragmas and macros of the cells (`#pragma GCC
 * diagnostic error "-Wconversion"`, `#define int long`) never reach
 * them, so no error points into nbfork's own code. */
static void emit_helpers(gen_t *g, const ex_split_t *sp, const char *launch_call) {
  for (size_t i = 0; i < sp->count; i++)
    if (sp->chunks[i].kind == EX_CHUNK_EXPRESSION)
      g->has_expr = 1;
  if (g->has_expr || launch_call)
    g->ok &= !nbf_buf_printf(&g->src, "#line 1 \"<nbfork>\"\n%s", cxx_support);
  if (g->has_expr)
    g->ok &= !nbf_buf_puts(&g->src, show_helpers);
}

/* The entry points after the cell's own code: the run function (a cell
 * that runs again from the compile cache, same shared object already
 * loaded, first resets its globals), the %launch thunk and the %timeit
 * loop. */
static void emit_entry_points(gen_t *g, const ex_launch_site_t *launch, const char *timeit_stmt) {
  nbf_buf_t *src = &g->src;
  g->ok &= !nbf_buf_puts(src, "#line 1 \"<nbfork>\"\n#ifdef __cplusplus\nextern \"C\"\n#endif\n"
                              "void __nbf_run_" TAG_PLACEHOLDER "(void) {\n");
  if (g->reset.len)
    g->ok &= !nbf_buf_printf(
        src, "static int __nbf_ran;\nif (__nbf_ran++) {\n%s#line 1 \"<nbfork>\"\n}\n",
        g->reset.data);
  g->ok &= !nbf_buf_printf(src, "%s}\n", g->run.data ? g->run.data : "");
  if (launch && g->ok) {
    int r = ex_launch_thunk(g->st, g->sp, launch, g->cxx, TAG_PLACEHOLDER, src, g->err, g->errlen);
    g->ok &= r != -2;
    g->refused |= r == -1;
  }
  if (timeit_stmt)
    /* the timed statement in a loop the executor calls (ex_timeit.h);
     * the empty asm keeps the optimizer from merging the iterations */
    g->ok &= !nbf_buf_printf(src,
                             "#line 1 \"<nbfork>\"\n#ifdef __cplusplus\nextern \"C\"\n#endif\n"
                             "void __nbf_timeit_" TAG_PLACEHOLDER "(long __nbf_n) {\n"
                             "  for (long __nbf_i = 0; __nbf_i < __nbf_n; __nbf_i++) {\n"
                             "#line 1 \"%%timeit\"\n%s;\n"
                             "#line 1 \"<nbfork>\"\n"
                             "    __asm__ __volatile__(\"\" ::: \"memory\");\n  }\n}\n",
                             timeit_stmt);
}

/* Hash the unit into its tag, put the tag in, name the entry points. The
 * compiler it is meant for is part of the salt (item 3 of issue 20). */
static ex_result_t finish_unit(ex_cell_unit_t *out, const char *src, const char *salt) {
  uint64_t h =
      nbf_fnv1a(out->tinycc ? "|tinycc" : "|cc", nbf_fnv1a(salt ? salt : "", NBF_FNV_OFFSET));
  h = unit_hash(src, h);
  h = hash_local_includes(src, h);
  snprintf(out->tag, sizeof out->tag, "%016llx", (unsigned long long)h);
  out->source = fill_tag(src, out->tag);
  snprintf(out->run_symbol, sizeof out->run_symbol, "__nbf_run_%s", out->tag);
  snprintf(out->launch_symbol, sizeof out->launch_symbol, "__nbf_launch_%s", out->tag);
  snprintf(out->timeit_symbol, sizeof out->timeit_symbol, "__nbf_timeit_%s", out->tag);
  return out->source ? EX_OK : EX_ERR_NOMEM;
}

/* Whether identifier w[0..n) is one of libnbfork's public names (every
 * one of include/'s file-scope names has one of these prefixes). */
static int nbfork_word(const char *w, size_t n) {
  static const char *const pre[] = {"acc_", "ACC_", "nbf_", "NBF_", "NBFORK_"};
  for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
    if (n >= strlen(pre[i]) && !strncmp(w, pre[i], strlen(pre[i])))
      return 1;
  return 0;
}

/* Whether w[0..n) may be a name <stdint.h> (1) or <stddef.h> (2)
 * defines: over-approximated (any INT..., u?int..._t), never under. */
static int std_word(const char *w, size_t n) {
  static const char *const stddef[] = {"size_t", "ptrdiff_t", "NULL", "offsetof", "wchar_t",
                                       "max_align_t"};
  for (size_t i = 0; i < sizeof stddef / sizeof *stddef; i++)
    if (n == strlen(stddef[i]) && !strncmp(w, stddef[i], n))
      return 2;
  static const char *const caps[] = {"INT", "UINT", "PTRDIFF_", "SIZE_MAX", "SIG_ATOMIC_",
                                     "WCHAR_", "WINT_"};
  for (size_t i = 0; i < sizeof caps / sizeof *caps; i++)
    if (n >= strlen(caps[i]) && !strncmp(w, caps[i], strlen(caps[i])))
      return 1;
  int u = w[0] == 'u';
  return n > 5u + u && !strncmp(w + u, "int", 3) && !strncmp(w + n - 2, "_t", 2) ? 1 : 0;
}

/* The headers of a TinyCC unit, put at `at` of src: <nbfork.h> (which
 * brings <stddef.h> and <stdint.h>) only when the unit names one of
 * libnbfork's names, else those two only when it may name theirs. Parsing
 * nbfork.h was ~60% of a trivial cell's TinyCC compile (4.9M of 8.3M
 * instructions). Leaving a header out can only make a name undeclared,
 * never change a declared one's meaning (those headers define nothing
 * else: no pragma, no unprefixed macro): TinyCC then fails and the cell
 * goes to the system compiler with its whole unit, as for any other
 * TinyCC failure. */
static int tinycc_headers(nbf_buf_t *src, size_t at) {
  int lib = 0, std = 0;
  for (const char *p = src->data + at; *p;) {
    if (isalpha((unsigned char)*p) || *p == '_') {
      const char *w = p;
      while (isalnum((unsigned char)*p) || *p == '_')
        p++;
      lib |= nbfork_word(w, (size_t)(p - w));
      std |= std_word(w, (size_t)(p - w));
    } else {
      p++;
    }
  }
  const char *head = lib   ? "#include <nbfork.h>\n"
                     : std ? "#include <stddef.h>\n#include <stdint.h>\n"
                           : "";
  nbf_buf_t out = {0};
  if (nbf_buf_append(&out, src->data, at) || nbf_buf_puts(&out, head) ||
      nbf_buf_puts(&out, src->data + at)) {
    nbf_buf_free(&out);
    return -1;
  }
  nbf_buf_free(src);
  *src = out;
  return 0;
}

ex_result_t ex_cell_generate_at(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                                const ex_launch_site_t *launch, const char *timeit_stmt,
                                const char *salt, int tinycc, ex_cell_unit_t *out, char *err,
                                size_t errlen) {
  const char *launch_call = launch ? launch->call : NULL;
  memset(out, 0, sizeof *out);
  EX_CHECK(ex_split(code, cxx ? EX_SPLIT_CXX : 0, ex_cell_is_type, st, &out->split, err, errlen));
  ex_result_t tr = ex_cell_state_check_types(st, &out->split, err, errlen);
  if (tr != EX_OK) {
    ex_split_free(&out->split);
    return tr;
  }
  out->cxx = cxx;
  /* a %timeit loop is compiled with the flags of function code */
  out->straight = is_straight(&out->split) && !timeit_stmt;
  out->tinycc = tinycc && out->straight && !cxx;
  out->has_launch = launch_call != NULL;
  out->has_timeit = timeit_stmt != NULL;
  snprintf(out->label, sizeof out->label, "%s", label);
  const ex_split_t *sp = &out->split;
  gen_t g = {.label = label, .ok = 1, .st = st, .sp = sp, .cxx = cxx, .err = err, .errlen = errlen};
  g.ok &= !nbf_buf_puts(&g.src, "/* generated by nbfork from a notebook cell */\n");
  size_t head_at = g.src.len; /* TinyCC's headers go here once its unit is known */
  if (!out->tinycc)
    g.ok &= !nbf_buf_puts(&g.src, "#include <nbfork.h>\n");
  emit_helpers(&g, sp, launch_call);
  g.ok &= !(out->tinycc ? ex_cell_state_prelude_for(st, sp, code, &g.src)
                        : ex_cell_state_prelude(st, sp, &g.src));
  if (out->tinycc)
    g.ok &= !ex_cell_state_indirect(st, sp, code, &g.src);
  for (size_t i = 0; i < sp->count; i++)
    emit_chunk(&g, sp, &sp->chunks[i]);
  emit_entry_points(&g, launch, timeit_stmt);
  if (out->tinycc && g.ok && !g.refused)
    g.ok &= !tinycc_headers(&g.src, head_at);
  ex_result_t r = g.refused ? EX_ERR_COMPILE
                  : g.ok    ? finish_unit(out, g.src.data, salt)
                            : EX_ERR_NOMEM;
  nbf_buf_free(&g.src);
  nbf_buf_free(&g.run);
  nbf_buf_free(&g.reset);
  if (r != EX_OK) {
    if (r == EX_ERR_NOMEM)
      snprintf(err, errlen, "out of memory");
    ex_split_free(&out->split);
  }
  return r;
}

ex_result_t ex_cell_generate(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                             const char *launch_call, const char *timeit_stmt, const char *salt,
                             ex_cell_unit_t *out, char *err, size_t errlen) {
  return ex_cell_generate_for(st, code, cxx, label, launch_call, timeit_stmt, salt, 0, out, err,
                              errlen);
}

ex_result_t ex_cell_generate_for(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                                 const char *launch_call, const char *timeit_stmt, const char *salt,
                                 int tinycc, ex_cell_unit_t *out, char *err, size_t errlen) {
  ex_launch_site_t site = {launch_call, label, 0, 0};
  return ex_cell_generate_at(st, code, cxx, label, launch_call ? &site : NULL, timeit_stmt, salt,
                             tinycc, out, err, errlen);
}

void ex_cell_unit_free(ex_cell_unit_t *u) {
  free(u->source);
  ex_split_free(&u->split);
  memset(u, 0, sizeof *u);
}
