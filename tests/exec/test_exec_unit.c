/*
 * test_exec_unit.c — unit tests of the cell engine: ex_split (chunk kinds
 * for many cell shapes), ex_cell (versioned symbols, prelude, compile-cache
 * tags, initializers), ex_compile (diagnostics clean-up, the cache) and,
 * with the system compiler, the whole compile/load/run path in-process.
 *
 * Run one case: build/bin/test_exec_unit split_function  (--list for all).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/nbf_test.h"
#include "ex_cell.h"
#include "ex_cell_state_impl.h"
#include "ex_compile.h"
#include "ex_cuda_hook.h"
#include "ex_decl.h"
#include "ex_diag.h"
#include "ex_jit.h"
#include "ex_magic.h"
#include "ex_objects.h"
#include "ex_split.h"
#include "ex_timeit.h"
#include "nbf_buf.h"
#include "nbf_util.h"

#ifndef EX_TEST_INCDIR
#error "EX_TEST_INCDIR (directory of nbfork.h) must be defined"
#endif
#ifndef EX_TEST_LIBDIR
#error "EX_TEST_LIBDIR (directory of libnbfork.so) must be defined"
#endif

/* ------------------------------------------------------------ helpers */

static const char *kind_name(ex_chunk_kind_t k) {
  switch (k) {
  case EX_CHUNK_PREPROC:
    return "PREPROC";
  case EX_CHUNK_TYPE:
    return "TYPE";
  case EX_CHUNK_FUNCTION:
    return "FUNCTION";
  case EX_CHUNK_PROTOTYPE:
    return "PROTOTYPE";
  case EX_CHUNK_VARIABLE:
    return "VARIABLE";
  case EX_CHUNK_STATEMENT:
    return "STATEMENT";
  case EX_CHUNK_EXPRESSION:
    return "EXPRESSION";
  case EX_CHUNK_VERBATIM:
    return "VERBATIM";
  }
  return "?";
}

static ex_split_t split_ok_with(const char *src, ex_is_type_fn is_type, void *ctx) {
  ex_split_t s;
  char err[256] = "";
  if (ex_split(src, 0, is_type, ctx, &s, err, sizeof err) != EX_OK)
    NBF_TEST_FAIL("ex_split failed on:\n%s\n--- error: %s", src, err);
  return s;
}

static ex_split_t split_ok(const char *src) {
  return split_ok_with(src, NULL, NULL);
}

/* The chunk kinds of `src`, comma-separated ("VARIABLE,EXPRESSION"). */
static char *kinds_of(const char *src) {
  ex_split_t s = split_ok(src);
  static char buf[1024];
  buf[0] = 0;
  for (size_t i = 0; i < s.count; i++) {
    if (i)
      strcat(buf, ",");
    strcat(buf, kind_name(s.chunks[i].kind));
  }
  ex_split_free(&s);
  return buf;
}

#define ASSERT_KINDS(src, kinds) ASSERT_EQ_STR(kinds_of(src), kinds)

static void expect_split_error(const char *src, const char *msg_part) {
  ex_split_t s;
  char err[256] = "";
  ex_result_t rc = ex_split(src, 0, NULL, NULL, &s, err, sizeof err);
  if (rc == EX_OK) {
    ex_split_free(&s);
    NBF_TEST_FAIL("ex_split accepted unbalanced source:\n%s", src);
  }
  ASSERT_EQ(rc, EX_ERR_SPLIT);
  ASSERT_CONTAINS(err, msg_part);
  ASSERT_EQ(s.count, 0);
}

/* ------------------------------------------------------- ex_split cases */

NBF_TEST(split_function) {
  ex_split_t s = split_ok("int sq(int x) {\n  return x * x;\n}\n");
  ASSERT_EQ(s.count, 1);
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "FUNCTION");
  ASSERT_EQ_STR(s.chunks[0].name, "sq");
  ASSERT_EQ_STR(s.chunks[0].signature, "int sq(int x)");
  ASSERT_EQ_STR(s.chunks[0].body, "{\n  return x * x;\n}");
  ASSERT_EQ(s.chunks[0].line, 1);
  ex_split_free(&s);

  s = split_ok(
      "char *dup2(const char *s) { return 0; }\nstruct P mk(void) { struct P p; return p; }");
  ASSERT_EQ(s.count, 2);
  ASSERT_EQ_STR(s.chunks[0].name, "dup2");
  ASSERT_EQ_STR(s.chunks[0].signature, "char *dup2(const char *s)");
  ASSERT_EQ_STR(kind_name(s.chunks[1].kind), "FUNCTION");
  ASSERT_EQ_STR(s.chunks[1].name, "mk");
  ASSERT_EQ(s.chunks[1].line, 2);
  ex_split_free(&s);

  /* two functions and a call in one cell */
  ASSERT_KINDS("int a(void) { return 1; }\nint b(void) { return a() + 1; }\nb()",
               "FUNCTION,FUNCTION,EXPRESSION");
}

NBF_TEST(split_static_inline) {
  ex_split_t s = split_ok("static inline int twice(int x) { return 2 * x; }");
  ASSERT_EQ(s.count, 1);
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "FUNCTION");
  ASSERT_EQ_STR(s.chunks[0].signature, "int twice(int x)");
  /* `static inline` blanked in place: columns of diagnostics stay right */
  ASSERT_EQ_STR(s.chunks[0].text, "              int twice(int x) { return 2 * x; }");
  ex_split_free(&s);

  s = split_ok("static int counter = 0;");
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].specifiers, "int");
  ex_split_free(&s);
}

NBF_TEST(split_prototype) {
  ex_split_t s = split_ok("int sq(int x);\nextern double f(void);\nvoid g();");
  ASSERT_EQ_STR(kinds_of("int sq(int x);\nextern double f(void);\nvoid g();"),
                "PROTOTYPE,PROTOTYPE,PROTOTYPE");
  ASSERT_EQ_STR(s.chunks[0].name, "sq");
  ASSERT_EQ_STR(s.chunks[1].name, "f");
  ASSERT_EQ(s.chunks[1].is_extern, 1);
  ASSERT_EQ_STR(s.chunks[2].name, "g");
  ex_split_free(&s);

  /* a pointer to a function is a variable, not a prototype */
  s = split_ok("int (*fp)(int);");
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].decls[0].name, "fp");
  ASSERT_EQ_STR(s.chunks[0].decls[0].declarator, "(*fp)(int)");
  ex_split_free(&s);

  s = split_ok("int (*op)(int, int) = add;");
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].decls[0].init, "add");
  ex_split_free(&s);
}

NBF_TEST(split_global_without_initializer) {
  ex_split_t s = split_ok("int counter;\nfloat weights[784];\nunsigned long long big;");
  ASSERT_EQ(s.count, 3);
  for (size_t i = 0; i < 3; i++) {
    ASSERT_EQ_STR(kind_name(s.chunks[i].kind), "VARIABLE");
    ASSERT_EQ(s.chunks[i].ndecls, 1);
    ASSERT_TRUE(s.chunks[i].decls[0].init == NULL);
  }
  ASSERT_EQ_STR(s.chunks[0].decls[0].name, "counter");
  ASSERT_EQ_STR(s.chunks[1].decls[0].name, "weights");
  ASSERT_EQ_STR(s.chunks[1].decls[0].declarator, "weights[784]");
  ASSERT_EQ_STR(s.chunks[2].specifiers, "unsigned long long");
  ex_split_free(&s);
}

NBF_TEST(split_global_with_initializer) {
  ex_split_t s = split_ok("double rate = 0.5;\nint a[3] = {1, 2, 3};\n"
                          "float *buf = malloc(10 * sizeof(float));\nconst char *name = \"x;y\";");
  ASSERT_EQ(s.count, 4);
  ASSERT_EQ_STR(s.chunks[0].decls[0].init, "0.5");
  ASSERT_EQ(s.chunks[0].decls[0].init_braced, 0);
  ASSERT_EQ_STR(s.chunks[1].decls[0].init, "{1, 2, 3}");
  ASSERT_EQ(s.chunks[1].decls[0].init_braced, 1);
  ASSERT_EQ_STR(s.chunks[2].decls[0].declarator, "*buf");
  ASSERT_EQ_STR(s.chunks[2].decls[0].init, "malloc(10 * sizeof(float))");
  ASSERT_EQ_STR(s.chunks[3].specifiers, "const char");
  ASSERT_EQ_STR(s.chunks[3].decls[0].init, "\"x;y\"");
  ex_split_free(&s);
}

NBF_TEST(split_multiple_declarators) {
  ex_split_t s = split_ok("int a = 1, *b, c[2] = {3, 4}, d = f(1, 2);");
  ASSERT_EQ(s.count, 1);
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ(s.chunks[0].ndecls, 4);
  const char *names[] = {"a", "b", "c", "d"};
  const char *decls[] = {"a", "*b", "c[2]", "d"};
  const char *inits[] = {"1", NULL, "{3, 4}", "f(1, 2)"};
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ_STR(s.chunks[0].decls[i].name, names[i]);
    ASSERT_EQ_STR(s.chunks[0].decls[i].declarator, decls[i]);
    if (inits[i])
      ASSERT_EQ_STR(s.chunks[0].decls[i].init, inits[i]);
    else
      ASSERT_TRUE(s.chunks[0].decls[i].init == NULL);
  }
  ex_split_free(&s);
}

NBF_TEST(split_typedef) {
  ex_split_t s = split_ok("typedef struct { float x, y; } vec2;\n"
                          "typedef int (*cmp_fn)(const void *, const void *);\n"
                          "typedef unsigned long ulong;\n"
                          "typedef int arr4[4];");
  ASSERT_EQ(s.count, 4);
  const char *names[] = {"vec2", "cmp_fn", "ulong", "arr4"};
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ_STR(kind_name(s.chunks[i].kind), "TYPE");
    ASSERT_EQ_STR(s.chunks[i].name, names[i]);
  }
  ex_split_free(&s);
}

NBF_TEST(split_struct_enum_union) {
  ex_split_t s = split_ok("struct point { int x, y; };\nenum color { RED, GREEN = 2 };\n"
                          "union num { int i; float f; };\nstruct point origin = {0, 0};\n"
                          "enum { ANON_A, ANON_B };");
  ASSERT_EQ_STR(kinds_of("struct point { int x, y; };\nenum color { RED, GREEN = 2 };\n"
                         "union num { int i; float f; };\nstruct point origin = {0, 0};\n"
                         "enum { ANON_A, ANON_B };"),
                "TYPE,TYPE,TYPE,VARIABLE,TYPE");
  ASSERT_EQ_STR(s.chunks[0].name, "struct point");
  ASSERT_EQ_STR(s.chunks[1].name, "enum color");
  ASSERT_EQ_STR(s.chunks[2].name, "union num");
  ASSERT_EQ_STR(s.chunks[3].decls[0].name, "origin");
  ASSERT_TRUE(s.chunks[4].name == NULL); /* anonymous enum: no key */
  ex_split_free(&s);

  /* a struct defined together with a variable */
  s = split_ok("struct cfg { int n; } global_cfg = { 3 };");
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].decls[0].name, "global_cfg");
  ex_split_free(&s);
}

/* A lone `enum` ending the cell: a TYPE without a name. Its tag was read
 * one token past the end; with exactly 64 tokens (the token list full)
 * that was outside the allocation (tests/fuzz/fuzz_split, input kept in
 * tests/fuzz/corpus/split/crash-lone-enum-64-tokens). */
NBF_TEST(split_lone_enum_at_end) {
  char src[128] = "";
  for (int i = 0; i < 31; i++)
    strcat(src, "0;");
  strcat(src, ";\nenum"); /* 62 + 1 + 1 tokens */
  const char *cells[] = {"enum", src};
  for (int c = 0; c < 2; c++) {
    ex_split_t s = split_ok(cells[c]);
    ASSERT_TRUE(s.count >= 1);
    ASSERT_EQ_STR(kind_name(s.chunks[s.count - 1].kind), "TYPE");
    ASSERT_TRUE(s.chunks[s.count - 1].name == NULL);
    ex_split_free(&s);
  }
}
NBF_TEST(split_preprocessor) {
  const char *src = "#include <stdio.h>\n#define N 10\n#define SQ(x) ((x) * (x))\n"
                    "#define LONG(a) \\\n  ((a) + 1)\n#ifdef N\nint n = N;\n#endif\n";
  ex_split_t s = split_ok(src);
  ASSERT_EQ_STR(kinds_of(src), "PREPROC,PREPROC,PREPROC,PREPROC,PREPROC,VARIABLE,PREPROC");
  ASSERT_TRUE(s.chunks[0].name == NULL);
  ASSERT_EQ_STR(s.chunks[1].name, "N");
  ASSERT_EQ_STR(s.chunks[2].name, "SQ");
  ASSERT_EQ_STR(s.chunks[3].name, "LONG");
  ASSERT_EQ_STR(s.chunks[3].text, "#define LONG(a) \\\n  ((a) + 1)");
  ASSERT_EQ(s.chunks[5].line, 7);
  ex_split_free(&s);
}

NBF_TEST(split_if_else) {
  ASSERT_KINDS("if (x == 1) { y(); } else { z(); }", "STATEMENT");
  ASSERT_KINDS("if (x) a(); else b();", "STATEMENT");
  ASSERT_KINDS("if (a) { f(); } else if (b) g(); else { h(); }", "STATEMENT");
  /* `==` in the condition is no initializer: the `}` ends the if */
  ASSERT_KINDS("if (a == b) { f(); }\nint z = 3;", "STATEMENT,VARIABLE");
  ASSERT_KINDS("if (a != b) { f(); }\nz", "STATEMENT,EXPRESSION");
  /* an else after a braceless body inside a for */
  ASSERT_KINDS("for (;;) if (x) a(); else b();\nint after;", "STATEMENT,VARIABLE");
}

NBF_TEST(split_do_while) {
  ASSERT_KINDS("do { i++; } while (i < 3);", "STATEMENT");
  ASSERT_KINDS("do i++; while (i < 3);\nint k;", "STATEMENT,VARIABLE");
  ASSERT_KINDS("while (n--) total += n;\nwhile (x) { x--; }", "STATEMENT,STATEMENT");
}

NBF_TEST(split_for) {
  ASSERT_KINDS("for (int i = 0; i < 3; i++) { s += i; }\nint after = 1;", "STATEMENT,VARIABLE");
  ASSERT_KINDS("for (int i = 0; i < 3; i++) s += i;\nprintf(\"%d\", s);", "STATEMENT,STATEMENT");
}

NBF_TEST(split_compound_and_switch) {
  ASSERT_KINDS("{ int t = 1; printf(\"%d\", t); }", "STATEMENT");
  ASSERT_KINDS("{ int t = 1; }\n{ int u = 2; }\nint v;", "STATEMENT,STATEMENT,VARIABLE");
  ASSERT_KINDS("switch (x) { case 1: y = 2; break; default: break; }\nx", "STATEMENT,EXPRESSION");
  ASSERT_KINDS("x = (struct P){1, 2};\np.x = 3;", "STATEMENT,STATEMENT");
  ASSERT_KINDS("int s = ({ int t = 2; t * t; });", "VARIABLE");
}

NBF_TEST(split_last_expression) {
  ASSERT_KINDS("int j = 5;\nj", "VARIABLE,EXPRESSION");
  ASSERT_KINDS("sq(3)", "EXPRESSION");
  ASSERT_KINDS("x + 1;", "STATEMENT");
  ASSERT_KINDS("\"abc\"", "EXPRESSION");
  ASSERT_KINDS("a[2] * 3.0", "EXPRESSION");
  ASSERT_KINDS("&j", "EXPRESSION");
  ASSERT_KINDS("(char)65", "EXPRESSION");
  ASSERT_KINDS("x = 5", "EXPRESSION");
  /* only the last chunk can be an expression */
  ASSERT_KINDS("f()\ng()", "EXPRESSION");
  ex_split_t s = split_ok("int j = 5;\nj // the value\n");
  ASSERT_EQ_STR(s.chunks[1].text, "j");
  ASSERT_EQ(s.chunks[1].line, 2);
  ex_split_free(&s);
  /* a declaration without `;` is not an expression */
  ASSERT_KINDS("int k = 3", "STATEMENT");
}

NBF_TEST(split_strings_and_comments_with_braces) {
  const char *src = "const char *s = \"{ not a block }\"; /* } */ char c = '}'; // {\n"
                    "puts(\"a;b\");\nchar q = '\\'';\nconst char *e = \"\\\"{\";";
  ex_split_t s = split_ok(src);
  ASSERT_EQ_STR(kinds_of(src), "VARIABLE,VARIABLE,STATEMENT,VARIABLE,VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].decls[0].init, "\"{ not a block }\"");
  ASSERT_EQ_STR(s.chunks[1].decls[0].init, "'}'");
  ASSERT_EQ_STR(s.chunks[3].decls[0].init, "'\\''");
  ASSERT_EQ_STR(s.chunks[4].decls[0].init, "\"\\\"{\"");
  ex_split_free(&s);
  ASSERT_KINDS("int f(void) { /* } */ return '{'; } // }\nf()", "FUNCTION,EXPRESSION");
}

NBF_TEST(split_unbalanced_is_error) {
  expect_split_error("int f() {\n  return 1;\n", "line 1: bracket opened here is not closed");
  expect_split_error("int x = 1;\n}", "line 2: unmatched '}'");
  expect_split_error("foo(1));", "unmatched ')'");
  expect_split_error("int a[3 = {1};", "not closed");
  expect_split_error("/* never closed", "comment is not closed");
  expect_split_error("puts(\"abc);", "string literal is not closed");
  expect_split_error("char c = 'x;", "character literal is not closed");
}

NBF_TEST(split_typedef_names) {
  /* a typedef earlier in the same cell makes `T *p;` a declaration */
  ASSERT_KINDS("typedef int myint;\nmyint *p;", "TYPE,VARIABLE");
  /* unknown T: `T * p;` is a multiplication */
  ASSERT_KINDS("T * p;", "STATEMENT");
  ASSERT_KINDS("T p;", "VARIABLE"); /* ident ident can only declare */
  ASSERT_KINDS("size_t *n;\nFILE *f;\nuint8_t *bytes;", "VARIABLE,VARIABLE,VARIABLE");
}

static int is_T(const char *name, void *ctx) {
  (void)ctx;
  return strcmp(name, "T") == 0;
}

NBF_TEST(split_known_types_from_earlier_cells) {
  ex_split_t s = split_ok_with("T * p;", is_T, NULL);
  ASSERT_EQ_STR(kind_name(s.chunks[0].kind), "VARIABLE");
  ASSERT_EQ_STR(s.chunks[0].decls[0].name, "p");
  ex_split_free(&s);
}

NBF_TEST(split_doc_comment) {
  ex_split_t s = split_ok("/* Squares x. */\nint sq(int x) { return x * x; }\n"
                          "// first\n// second\nint f(void);\n"
                          "int a; // about a\nint b;\n"
                          "/* far away */\n\nint c;");
  ASSERT_EQ(s.count, 5);
  ASSERT_EQ_STR(s.chunks[0].doc, "/* Squares x. */");
  ASSERT_EQ_STR(s.chunks[1].doc, "// first\n// second");
  ASSERT_TRUE(s.chunks[2].doc == NULL);
  ASSERT_TRUE(s.chunks[3].doc == NULL); /* `// about a` trails `int a;` */
  ASSERT_TRUE(s.chunks[4].doc == NULL); /* a blank line in between */
  ex_split_free(&s);
}

NBF_TEST(split_is_complete) {
  ASSERT_EQ_STR(ex_split_is_complete("int x = 1;"), "complete");
  ASSERT_EQ_STR(ex_split_is_complete(""), "complete");
  ASSERT_EQ_STR(ex_split_is_complete("int f() {"), "incomplete");
  ASSERT_EQ_STR(ex_split_is_complete("int f() {\n  return 1;\n}"), "complete");
  ASSERT_EQ_STR(ex_split_is_complete("printf(\"%d\",\n"), "incomplete");
  ASSERT_EQ_STR(ex_split_is_complete("/* still a comment"), "incomplete");
  ASSERT_EQ_STR(ex_split_is_complete("#define M(a) \\"), "incomplete");
  ASSERT_EQ_STR(ex_split_is_complete("}"), "invalid");
  ASSERT_EQ_STR(ex_split_is_complete("int x = 1;)"), "invalid");
  /* a control statement's head waits for its body */
  static const char *const wait[] = {"if (1)", "for (int i = 0; i < n; i++)\n", "switch (k)",
                                     "if (a) b(); else"};
  for (size_t i = 0; i < sizeof wait / sizeof *wait; i++)
    ASSERT_EQ_STR(ex_split_is_complete(wait[i]), "incomplete");
  static const char *const done[] = {"if (1) x = 2;", "g(f(1))", "x = (y)"};
  for (size_t i = 0; i < sizeof done / sizeof *done; i++)
    ASSERT_EQ_STR(ex_split_is_complete(done[i]), "complete");
}

NBF_TEST(split_cxx_cuda_cell) {
  const char *src = "#include <cstdio>\n"
                    "template <typename T> T twice(T v) { return v + v; }\n"
                    "template <int N = 3> int get() { return N; }\n"
                    "namespace ns { int inner(void) { return 1; } }\n"
                    "struct Acc { float s; };\n"
                    "class Box { public: int v; };\n"
                    "using std::size_t;\n"
                    "extern \"C\" { int c_api(int); }\n"
                    "__global__ void kern(float *x, int n) { x[0] = n; }\n"
                    "__device__ __host__ float both(float v) { return v; }\n"
                    "__constant__ float coef[4];\n"
                    "int host_fn(int x) { return twice(x); }\n"
                    "float hbuf[4];\n"
                    "host_fn(2)";
  ex_split_t s;
  char err[128] = "";
  ASSERT_EQ(ex_split(src, EX_SPLIT_CXX, NULL, NULL, &s, err, sizeof err), EX_OK);
  char kinds[512] = "";
  for (size_t i = 0; i < s.count; i++) {
    if (i)
      strcat(kinds, ",");
    strcat(kinds, kind_name(s.chunks[i].kind));
  }
  ASSERT_EQ_STR(kinds, "PREPROC,VERBATIM,VERBATIM,VERBATIM,TYPE,VERBATIM,VERBATIM,VERBATIM,"
                       "VERBATIM,VERBATIM,VERBATIM,FUNCTION,VARIABLE,EXPRESSION");
  ASSERT_EQ_STR(s.chunks[11].name, "host_fn");
  ex_split_free(&s);
  /* in C, `class` and `template` are plain identifiers */
  ASSERT_KINDS("int class = 1;\nclass = 2;", "VARIABLE,STATEMENT");
}

/* -------------------------------------------------------- ex_cell cases */

typedef struct {
  ex_cell_state_t *st;
  int count;
} cells_t;

static cells_t cells_new(void) {
  cells_t c = {ex_cell_state_new(), 0};
  ASSERT_TRUE(c.st != NULL);
  return c;
}

/* Generate the unit for `code` (and `%launch launch_call` when not
 * NULL) as the next cell; fails the test when it cannot. */
static ex_cell_unit_t gen_launch(cells_t *c, const char *code, const char *launch_call) {
  ex_cell_unit_t u;
  char label[32], err[256] = "";
  snprintf(label, sizeof label, "cell[%d]", ++c->count);
  if (ex_cell_generate(c->st, code, 0, label, launch_call, NULL, "salt", &u, err, sizeof err))
    NBF_TEST_FAIL("ex_cell_generate failed on:\n%s%s%s\n--- error: %s", code,
                  launch_call ? "\n%launch " : "", launch_call ? launch_call : "", err);
  return u;
}

/* Generate (and commit) a unit for `code` as the next cell. */
static ex_cell_unit_t gen(cells_t *c, const char *code, int commit) {
  ex_cell_unit_t u = gen_launch(c, code, NULL);
  if (commit)
    ASSERT_EQ(ex_cell_commit(c->st, &u), EX_OK);
  return u;
}

static char *label_of(const char *name, const char *tag) {
  static char buf[128];
  snprintf(buf, sizeof buf, "__asm__(\"%s__c%s\")", name, tag);
  return buf;
}

/* A TinyCC unit includes nbfork.h only when it names a runtime name,
 * stddef.h/stdint.h only when it may name theirs; a system compiler's
 * unit always includes nbfork.h (ex_cell.c: tinycc_headers). */
NBF_TEST(cell_tinycc_headers_by_need) {
  static const struct {
    const char *code;
    int lib, std;
  } cases[] = {{"int a = 1;", 0, 0},         {"size_t b = 2;", 0, 1},
               {"int64_t c = 3;", 0, 1},     {"int w = INT32_MAX > 0;", 0, 1},
               {"acc_t *d = 0;", 1, 0},      {"int e = ACC_F32;", 1, 0},
               {"double f = 0.5 * 3;", 0, 0}};
  cells_t c = cells_new();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ex_cell_unit_t fast, plain;
    char err[256];
    ASSERT_EQ(ex_cell_generate_for(c.st, cases[i].code, 0, "cell[1]", NULL, NULL, "salt", 1, &fast,
                                   err, sizeof err),
              EX_OK);
    ASSERT_TRUE(fast.tinycc);
    ASSERT_EQ(strstr(fast.source, "#include <nbfork.h>") != NULL, cases[i].lib);
    ASSERT_EQ(strstr(fast.source, "#include <stdint.h>") != NULL, cases[i].std);
    ASSERT_EQ(ex_cell_generate_for(c.st, cases[i].code, 0, "cell[1]", NULL, NULL, "salt", 0, &plain,
                                   err, sizeof err),
              EX_OK);
    ASSERT_CONTAINS(plain.source, "#include <nbfork.h>");
    ex_cell_unit_free(&fast);
    ex_cell_unit_free(&plain);
  }
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_versioned_symbols) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c, "int sq(int x) { return x * x; }\nint g = 3;\nsq(g)", 1);
  ASSERT_EQ(strlen(u.tag), 16);
  ASSERT_CONTAINS(u.source, "#include <nbfork.h>");
  ASSERT_CONTAINS(u.source, label_of("sq", u.tag));
  ASSERT_CONTAINS(u.source, label_of("g", u.tag));
  ASSERT_CONTAINS(u.source, "#line 1 \"cell[1]\"");
  ASSERT_CONTAINS(u.source, u.run_symbol);
  /* the expression on a line of its own, at its cell line and column */
  ASSERT_CONTAINS(u.source, "#line 2 \"cell[1]\"\n__nbf_show((\nsq(g)));");
  ASSERT_NOT_CONTAINS(u.source, "@NBFTAG@");
  /* the run function is extern "C" for %%cuda (C++) units */
  ASSERT_CONTAINS(u.source, "#ifdef __cplusplus\nextern \"C\"\n#endif\nvoid __nbf_run_");
  /* the show helpers need no libc header */
  ASSERT_NOT_CONTAINS(u.source, "#include <stdio.h>");
  ex_cell_unit_free(&u);
  ex_cell_state_destroy(&c.st);
  ASSERT_TRUE(c.st == NULL);
}

NBF_TEST(cell_prelude_for_later_cells) {
  cells_t c = cells_new();
  ex_cell_unit_t u1 = gen(&c,
                          "#include <math.h>\n#define N 4\ntypedef struct { int a; } box;\n"
                          "/* Squares x. */\nint sq(int x) { return x * x; }\nint g = 3;",
                          1);
  ex_cell_unit_t u2 = gen(&c, "box b;\nsq(N) + g", 0);
  ASSERT_CONTAINS(u2.source, "#include <math.h>");
  ASSERT_CONTAINS(u2.source, "#define N 4");
  ASSERT_CONTAINS(u2.source, "typedef struct { int a; } box;");
  char want[256];
  snprintf(want, sizeof want, "int sq(int x) __asm__(\"sq__c%s\");", u1.tag);
  ASSERT_CONTAINS(u2.source, want);
  snprintf(want, sizeof want, "extern int g __asm__(\"g__c%s\");", u1.tag);
  ASSERT_CONTAINS(u2.source, want);
  /* `box b;` is a declaration because box is a type of an earlier cell */
  ASSERT_EQ_STR(kind_name(u2.split.chunks[0].kind), "VARIABLE");
  ASSERT_TRUE(ex_cell_is_type("box", c.st));
  ASSERT_TRUE(!ex_cell_is_type("sq", c.st));

  ex_cell_name_t n;
  ASSERT_TRUE(ex_cell_find(c.st, "sq", &n));
  ASSERT_EQ_STR(n.kind, "function");
  ASSERT_EQ_STR(n.decl, "int sq(int x)");
  ASSERT_EQ_STR(n.doc, "/* Squares x. */");
  ASSERT_EQ_STR(n.label, "cell[1]");
  ASSERT_TRUE(ex_cell_find(c.st, "g", &n));
  ASSERT_EQ_STR(n.kind, "variable");
  ASSERT_EQ_STR(n.decl, "int g");
  ASSERT_TRUE(ex_cell_find(c.st, "N", &n));
  ASSERT_EQ_STR(n.kind, "macro");
  ASSERT_TRUE(!ex_cell_find(c.st, "nothing", &n));
  ex_cell_unit_free(&u1);
  ex_cell_unit_free(&u2);
  ex_cell_state_destroy(&c.st);
}

/* ------------------------------------ the prelude by key (issue 20, 7) */

/* The passes over the whole registry that ex_cell_state_prelude_for and
 * ex_cell_state_indirect made before they looked names up by key (a new
 * cell after 20,000 distinct ones cost 1.5x the first): the reference
 * their output must equal, byte for byte (the helpers both use, word
 * collection and the re-run macro rule, are the registry's own). */
static void ref_prelude_for(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                            nbf_buf_t *out) {
  nbf_buf_t words = {0};
  char *keep = calloc(st->n + 1, 1);
  nbf_buf_puts(&words, " ");
  ex_cell_state_collect_words(st, code, 0, &words);
  nbf_buf_puts(&words, " ");
  for (size_t i = st->n; i-- > 0;) {
    const entry_t *e = &st->entries[i];
    int named = strncmp(e->key, "sym:", 4) && strncmp(e->key, "proto:", 6);
    if (!named) {
      const char *name = strchr(e->key, ':') + 1;
      named = ex_cell_word_in(words.data, name, strlen(name));
      if (named) {
        ex_cell_state_collect_words(st, e->text, 0, &words);
        nbf_buf_puts(&words, " ");
      }
    }
    keep[i] = named && (!ex_cell_state_defines(sp, e->key) || ex_cell_state_same_macro(sp, e));
  }
  for (size_t i = 0; i < st->n; i++)
    if (keep[i])
      nbf_buf_puts(out, st->entries[i].text);
  free(keep);
  nbf_buf_free(&words);
}

static void ref_indirect(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                         nbf_buf_t *out) {
  nbf_buf_t words = {0};
  nbf_buf_puts(&words, " ");
  ex_cell_state_collect_words(st, code, 0, &words);
  nbf_buf_puts(&words, " ");
  int any = 0;
  for (size_t i = 0; i < st->n; i++) {
    const entry_t *e = &st->entries[i];
    const char *name = e->key + 4;
    if (strncmp(e->key, "sym:", 4) || !e->kind || strcmp(e->kind, "variable") ||
        !ex_cell_word_in(words.data, name, strlen(name)) || ex_cell_state_defines(sp, e->key))
      continue;
    if (!any++)
      nbf_buf_puts(out, "#line 1 \"<nbfork>\"\n");
    if (e->addr)
      nbf_buf_printf(out,
                     "static __typeof__(%s) *const __nbf_p_%s __attribute__((unused)) = "
                     "(__typeof__(%s) *)%#lxUL;\n",
                     name, name, name, (unsigned long)(uintptr_t)e->addr);
    else
      nbf_buf_printf(out,
                     "static __typeof__(%s) *const __nbf_p_%s __attribute__((unused)) = &%s;\n",
                     name, name, name);
    nbf_buf_printf(out, "#define %s (*(0, __nbf_p_%s))\n", name, name);
  }
  nbf_buf_free(&words);
}

/* A name of the generated notebook: v0..v11, f0..f5, M0..M3, and one
 * longer than the lookup's stack buffer. */
static const char *pick_name(unsigned *seed, char *buf, size_t n) {
  static char longname[220];
  if (!longname[0]) {
    memset(longname, 'w', sizeof longname - 1);
    longname[0] = 'L';
  }
  *seed = *seed * 1103515245u + 12345u;
  unsigned r = (*seed >> 8) % 24;
  if (r < 12)
    snprintf(buf, n, "v%u", r);
  else if (r < 18)
    snprintf(buf, n, "f%u", r - 12);
  else if (r < 22)
    snprintf(buf, n, "M%u", r - 18);
  else
    snprintf(buf, n, "%s", longname);
  return buf;
}

/* The next cell of the generated notebook: definitions that name each
 * other (`__typeof__`, macros, prototypes then definitions, redefinitions
 * that move an entry to the end, types, an #include). */
static void gen_cell(unsigned *seed, char *cell, size_t n) {
  char a[240], b[240];
  pick_name(seed, a, sizeof a);
  pick_name(seed, b, sizeof b);
  *seed = *seed * 1103515245u + 12345u;
  unsigned kind = (*seed >> 8) % 8;
  if (a[0] == 'M')
    snprintf(cell, n, "#define %s (%s + 1)", a, b[0] == 'M' ? "2" : b);
  else if (a[0] == 'f' && kind < 3)
    snprintf(cell, n, "int %s(int x);", a);
  else if (a[0] == 'f')
    snprintf(cell, n, "int %s(int x) { return x + (int)%s; }", a, b[0] == 'f' ? "1" : b);
  else if (kind == 0)
    snprintf(cell, n, "double %s = 2.5;", a);
  else if (kind == 1 && b[0] == 'v')
    snprintf(cell, n, "__typeof__(%s) %s = 3;", b, a);
  else if (kind == 2)
    snprintf(cell, n, "struct T%u { int a; }; int %s = 4;", *seed % 5, a);
  else if (kind == 3)
    snprintf(cell, n, "#include <stddef.h>\nlong %s = 5;", a);
  else
    snprintf(cell, n, "int %s = %u;", a, *seed % 100);
}

NBF_TEST(cell_prelude_by_key_equals_the_pass) {
  cells_t c = cells_new();
  unsigned seed = 20;
  size_t compared = 0;
  for (int i = 0; i < 400; i++) {
    char cell[600], err[256];
    gen_cell(&seed, cell, sizeof cell);
    ex_cell_unit_t u;
    if (ex_cell_generate(c.st, cell, 0, "cell[1]", NULL, NULL, "", &u, err, sizeof err) == EX_OK) {
      ASSERT_EQ(ex_cell_commit(c.st, &u), EX_OK);
      if (i % 3 == 0 && u.split.count && u.split.chunks[0].kind == EX_CHUNK_VARIABLE)
        ex_cell_state_place(c.st, u.split.chunks[0].decls[0].name, (void *)(uintptr_t)(i * 64 + 64),
                            4);
      ex_cell_unit_free(&u);
    }
    /* probes: statements naming a few names, and a cell defining one */
    for (int p = 0; p < 4; p++) {
      char a[240], b[240], probe[600];
      pick_name(&seed, a, sizeof a);
      pick_name(&seed, b, sizeof b);
      if (p == 3)
        snprintf(probe, sizeof probe, "int %s = 1;\n%s;", a[0] == 'v' ? a : "v0", b);
      else
        snprintf(probe, sizeof probe, "%s + %s;", a, b);
      ex_split_t sp;
      if (ex_split(probe, 0, ex_cell_is_type, c.st, &sp, err, sizeof err) != EX_OK)
        continue;
      nbf_buf_t got = {0}, want = {0};
      ASSERT_EQ(ex_cell_state_prelude_for(c.st, &sp, probe, &got), 0);
      ASSERT_EQ(ex_cell_state_indirect(c.st, &sp, probe, &got), 0);
      ref_prelude_for(c.st, &sp, probe, &want);
      ref_indirect(c.st, &sp, probe, &want);
      if (strcmp(got.data ? got.data : "", want.data ? want.data : ""))
        NBF_TEST_FAIL("cell %d, probe %s:\n--- by key:\n%s\n--- the pass:\n%s", i, probe,
                      got.data ? got.data : "", want.data ? want.data : "");
      compared += want.len > 0;
      nbf_buf_free(&got);
      nbf_buf_free(&want);
      ex_split_free(&sp);
    }
  }
  ASSERT_TRUE(compared > 1000); /* the probes named something */
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_redefinition_replaces) {
  cells_t c = cells_new();
  ex_cell_unit_t u1 = gen(&c, "int sq(int x) { return x * x; }\nint g = 1;", 1);
  ex_cell_unit_t u2 = gen(&c, "int sq(int x) { return x + 1; }\ndouble g = 2.5;", 1);
  /* the redefining cell does not see the old declarations */
  ASSERT_NOT_CONTAINS(u2.source, u1.tag);
  ex_cell_unit_t u3 = gen(&c, "sq(2) + g", 0);
  ASSERT_CONTAINS(u3.source, label_of("sq", u2.tag));
  ASSERT_CONTAINS(u3.source, "extern double g");
  ASSERT_NOT_CONTAINS(u3.source, u1.tag);
  ex_cell_name_t n;
  ASSERT_TRUE(ex_cell_find(c.st, "g", &n));
  ASSERT_EQ_STR(n.decl, "double g");
  ASSERT_EQ_STR(n.label, "cell[2]");
  ex_cell_unit_free(&u1);
  ex_cell_unit_free(&u2);
  ex_cell_unit_free(&u3);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_prototype_keeps_definition) {
  cells_t c = cells_new();
  ex_cell_unit_t u1 = gen(&c, "int sq(int x) { return x * x; }", 1);
  /* re-declaring a defined function keeps calling its version */
  ex_cell_unit_t u2 = gen(&c, "int sq(int x);\nint y = sq(2);", 1);
  ASSERT_CONTAINS(u2.source, label_of("sq", u1.tag));
  ex_cell_unit_t u3 = gen(&c, "sq(3)", 0);
  ASSERT_CONTAINS(u3.source, label_of("sq", u1.tag));
  /* a prototype and its definition in one cell: one versioned symbol */
  ex_cell_unit_t u4 = gen(&c, "int tw(int);\nint tw(int x) { return 2 * x; }", 1);
  ASSERT_CONTAINS(u4.source, "int tw(int) __asm__(\"tw__c");
  ex_cell_unit_free(&u1);
  ex_cell_unit_free(&u2);
  ex_cell_unit_free(&u3);
  ex_cell_unit_free(&u4);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_tag_is_the_compile_cache_key) {
  cells_t a = cells_new(), b = cells_new();
  b.count = 6; /* the same cell as cell[7] */
  ex_cell_unit_t ua = gen(&a, "int x = 1;", 0), ub = gen(&b, "int x = 1;", 0);
  ASSERT_NE_STR(ua.label, ub.label);
  ASSERT_EQ_STR(ua.tag, ub.tag); /* the label does not enter the hash */
  ex_cell_unit_t uc = gen(&a, "int x = 2;", 0);
  ASSERT_NE_STR(ua.tag, uc.tag);
  /* flags (the salt) enter the hash */
  ex_cell_unit_t ud;
  char err[64];
  ASSERT_EQ(
      ex_cell_generate(a.st, "int x = 1;", 0, "cell[9]", NULL, NULL, "-O3", &ud, err, sizeof err),
      0);
  ASSERT_NE_STR(ua.tag, ud.tag);
  /* what earlier cells defined enters the hash (the prelude) */
  ex_cell_unit_t ue = gen(&a, "int other = 5;", 1);
  ex_cell_unit_t uf = gen(&a, "int x = 1;", 0);
  ASSERT_NE_STR(ua.tag, uf.tag);
  ex_cell_unit_free(&ua);
  ex_cell_unit_free(&ub);
  ex_cell_unit_free(&uc);
  ex_cell_unit_free(&ud);
  ex_cell_unit_free(&ue);
  ex_cell_unit_free(&uf);
  ex_cell_state_destroy(&a.st);
  ex_cell_state_destroy(&b.st);
}

NBF_TEST(cell_tag_follows_local_headers) {
  /* editing a header included with quotes is editing the cell */
  char dir[] = "/tmp/nbfork-exec-hdr-XXXXXX", path[64], code[128];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/mylib.h", dir);
  snprintf(code, sizeof code, "#include \"%s\"\nint v = MYLIB_V;", path);
  FILE *f = fopen(path, "w");
  ASSERT_TRUE(f != NULL);
  fputs("#define MYLIB_V 1\n", f);
  fclose(f);
  cells_t c = cells_new();
  ex_cell_unit_t a = gen(&c, code, 0), b = gen(&c, code, 0);
  ASSERT_EQ_STR(a.tag, b.tag);
  f = fopen(path, "w");
  fputs("#define MYLIB_V 22\n", f); /* another size, whatever the clock says */
  fclose(f);
  ex_cell_unit_t d = gen(&c, code, 0);
  ASSERT_NE_STR(a.tag, d.tag);
  unlink(path);
  rmdir(dir);
  ex_cell_unit_free(&a);
  ex_cell_unit_free(&b);
  ex_cell_unit_free(&d);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_initializers) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c,
                         "float *w = malloc(4 * sizeof(float));\nint a[2] = {1, 2};\nint n;\n"
                         "const int k = 3;\nconst char *msg = \"hi\";\nchar *const fixed = \"x\";",
                         0);
  char want[256];
  /* non-constant initializer: assigned when the cell runs */
  snprintf(want, sizeof want, "float *w __asm__(\"w__c%s\");", u.tag);
  ASSERT_CONTAINS(u.source, want);
  /* initializers stand at their cell line and column (diagnostics) */
  ASSERT_CONTAINS(u.source, "{ __typeof__(w) __nbf_init =\n#line 1 \"cell[1]\"\n"
                            "           malloc(4 * sizeof(float)); w = __nbf_init; }");
  /* braced list: static, and reset when the cached object runs again */
  snprintf(want, sizeof want,
           "int a[2] __asm__(\"a__c%s\") =\n#line 2 \"cell[1]\"\n"
           "           {1, 2};",
           u.tag);
  ASSERT_CONTAINS(u.source, want);
  ASSERT_CONTAINS(u.source, "static const __typeof__(a) __nbf_i =\n#line 2 \"cell[1]\"\n"
                            "           {1, 2}; __builtin_memcpy");
  ASSERT_CONTAINS(u.source, "__builtin_memset((void *)&n, 0, sizeof n);");
  ASSERT_CONTAINS(u.source, "if (__nbf_ran++) {");
  /* const objects: static initializers, never reset */
  snprintf(want, sizeof want,
           "const int k __asm__(\"k__c%s\") =\n#line 4 \"cell[1]\"\n"
           "              3;",
           u.tag);
  ASSERT_CONTAINS(u.source, want);
  ASSERT_NOT_CONTAINS(u.source, "&k");
  snprintf(want, sizeof want,
           "char *const fixed __asm__(\"fixed__c%s\") =\n#line 6 \"cell[1]\"\n"
           "                    \"x\";",
           u.tag);
  ASSERT_CONTAINS(u.source, want);
  /* a pointer to const is assignable: assigned at run time */
  ASSERT_CONTAINS(u.source, "msg = __nbf_init;");
  ex_cell_unit_free(&u);
  ex_cell_state_destroy(&c.st);
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* The unit of `%launch CALL` at line 2, column 9 of the next cell (after a
 * comment line), or the refusal (*r, err). */
static ex_result_t gen_launch_at(cells_t *c, const char *call, int cxx, ex_cell_unit_t *u,
                                 char *err, size_t errlen) {
  char label[32];
  snprintf(label, sizeof label, "cell[%d]", ++c->count);
  ex_launch_site_t site = {call, label, 2, 9};
  return ex_cell_generate_at(c->st, "// launch it\n", cxx, label, &site, NULL, "salt", 0, u, err,
                             errlen);
}

/* issue 14: `%launch g(42, "no")` for `void g(const char *, int)` was
 * three copies of the call in a __builtin_choose_expr (each diagnostic
 * three times, `%launch:7:72`), whose int-conversion warnings the cell
 * compiled through, and the worker died of SIGSEGV. Now the call of a
 * function an earlier cell declared is written once, at the cell's
 * %launch line and column, with those warnings made errors. */
NBF_TEST(cell_launch_thunk) {
  cells_t c = cells_new();
  /* a function of the same cell: its declaration there */
  ex_cell_unit_t u = gen_launch(&c, "int train(int n) { return n; }", "train(3)");
  ASSERT_EQ(u.has_launch, 1);
  ASSERT_CONTAINS(u.source, u.launch_symbol);
  ASSERT_CONTAINS(u.source, "return\n#line 1 \"%launch\"\ntrain(3)\n");
  ASSERT_EQ(ex_cell_commit(c.st, &u), EX_OK);
  ex_cell_unit_free(&u);
  /* no declaration (a macro): the call's type decides, the call thrice */
  u = gen_launch(&c, "#define RUN(n) train(n)", "RUN(3)");
  ASSERT_CONTAINS(u.source, "__builtin_types_compatible_p(__typeof__(");
  ASSERT_EQ(count_of(u.source, "RUN(3)"), 3);
  ex_cell_unit_free(&u);
  ex_cell_unit_t gu = gen(&c, "void g(const char *s, int n) { (void)s; (void)n; }", 1);
  ex_cell_unit_free(&gu);
  char err[512] = "";
  ASSERT_EQ(gen_launch_at(&c, "train(3)", 0, &u, err, sizeof err), EX_OK);
  ASSERT_CONTAINS(u.source,
                  "return\n#line 2 \"cell[4]\"\n        train(3)\n#line 1 \"<nbfork>\"\n;");
  ASSERT_EQ(count_of(u.source, "train(3)"), 1);
  ASSERT_CONTAINS(u.source, "#pragma GCC diagnostic error \"-Wint-conversion\"");
  ASSERT_CONTAINS(u.source, "#pragma GCC diagnostic error \"-Wincompatible-pointer-types\"");
  ASSERT_CONTAINS(u.source, "#ifndef __TINYC__"); /* TinyCC runs with -Werror instead */
  ex_cell_unit_free(&u);
  ASSERT_EQ(gen_launch_at(&c, "g(42, \"no\")", 0, &u, err, sizeof err), EX_OK);
  ASSERT_CONTAINS(u.source, "(void)(\n#line 2 \"cell[5]\"\n        g(42, \"no\")\n");
  ASSERT_EQ(count_of(u.source, "g(42, \"no\")"), 1);
  ex_cell_unit_free(&u);
  /* C++ (a %%cuda cell) */
  ASSERT_EQ(gen_launch_at(&c, "train(3)", 1, &u, err, sizeof err), EX_OK);
  ASSERT_CONTAINS(u.source, "extern \"C\" int __nbf_launch_");
  ASSERT_EQ(count_of(u.source, "train(3)"), 1);
  ex_cell_unit_free(&u);
  ex_cell_state_destroy(&c.st);
}

/* issue 14: a launched function returning double 1.5 ended as `exited
 * with code 1` (converted to int by the thunk) without saying why. void
 * and integer types are accepted; double, pointers and structs are a
 * CompileError naming the type; a typedef the compiler checks. */
NBF_TEST(cell_launch_return_types) {
  cells_t c = cells_new();
  ex_cell_unit_t defs =
      gen(&c,
          "struct s { int a; };\ntypedef float real_t;\ntypedef int code_t;\n"
          "double d(void) { return 1.5; }\nchar *p(void) { return 0; }\n"
          "struct s st(void) { struct s v = {1}; return v; }\n"
          "static inline unsigned long ul(void) { return 0; }\n"
          "__attribute__((noinline)) _Bool b(void) { return 0; }\nvoid v(int n) { (void)n; }\n"
          "real_t r(void) { return 1.5f; }\ncode_t k(void) { return 0; }\nfloat *fp(int n);\n"
          "typedef enum { LOW, HIGH } level_t;\nlevel_t lv(void) { return LOW; }\n"
          "int old() { return 0; }",
          1);
  ex_cell_unit_free(&defs);
  static const struct {
    const char *call, *refusal;
  } refused[] = {
      {"d()", "line 2: %launch d(): 'd' returns double; a launched function returns int (the "
              "worker's exit code: 0 = success, as from main) or void"},
      {"p()", "'p' returns char *;"},
      {"st()", "'st' returns struct s;"},
      {"fp(1)", "'fp' returns float *;"},
      {"r()", "'r' returns real_t (float);"},
      {"old(42)", "line 2: %launch old(42): too many arguments: 'old' is declared with an empty "
                  "parameter list (`int old()`), which C does not check; it takes none."},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    ex_cell_unit_t u;
    char err[512] = "";
    ASSERT_EQ(gen_launch_at(&c, refused[i].call, 0, &u, err, sizeof err), EX_ERR_COMPILE);
    ASSERT_CONTAINS(err, refused[i].refusal);
  }
  /* a function the %launch cell itself defines */
  ex_cell_unit_t own;
  char err[512] = "";
  ASSERT_EQ(ex_cell_generate(c.st, "float twice(float x) { return 2 * x; }", 0, "cell[9]",
                             "twice(1)", NULL, "", &own, err, sizeof err),
            EX_ERR_COMPILE);
  ASSERT_CONTAINS(err, "'twice' returns float;");
  static const struct {
    const char *call, *thunk;
  } accepted[] = {
      {"ul()", "return\n#line 2"},
      {"b()", "return\n#line 2"},
      {"v(1)", "(void)(\n#line 2"},
      {"old( )", "return\n#line 2"},
      {"k()", "return\n#line 2"},             /* typedef int code_t */
      {"lv()", "level_t __nbf_r =\n#line 2"}, /* an enum: the compiler checks */
  };
  for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
    ex_cell_unit_t u;
    char err[512] = "";
    ASSERT_EQ(gen_launch_at(&c, accepted[i].call, 0, &u, err, sizeof err), EX_OK);
    ASSERT_CONTAINS(u.source, accepted[i].thunk);
    ex_cell_unit_free(&u);
  }
  ex_cell_state_destroy(&c.st);
}

/* ex_magic_run on src: its result, the message in err[512]. */
static ex_result_t magics(const char *src, ex_magic_result_t *m, char *err) {
  ex_flags_t flags = {0};
  const char *ename = NULL;
  err[0] = 0;
  return ex_magic_run(src, &flags, NULL, m, &ename, err, 512);
}

/* issue 14: a comment or #include above `%launch` was a CompileError
 * (`expected expression before '%' token`); code after it ran before the
 * launch. Now %launch may follow code as the cell's last line (comments
 * and blank lines may follow it); code after it, a second %launch and
 * other magics after code are refused. Magic lines are blanked in the
 * code, so its line numbers are the cell's. */
NBF_TEST(magic_launch_position) {
  ex_magic_result_t m;
  char err[512];
  const char *cell = "// train\n#include <stdio.h>\nint n = 2;\n  %launch f(n, \"a\\\"b\")  "
                     "num_processes=2\n/* done */\n";
  ASSERT_EQ(magics(cell, &m, err), EX_OK);
  ASSERT_EQ_STR(m.launch_call, "f(n, \"a\\\"b\")");
  ASSERT_EQ_STR(m.launch_opts, "  num_processes=2");
  ASSERT_EQ(m.launch_line, 4);
  ASSERT_EQ(m.launch_col, 11);
  ASSERT_EQ(strlen(m.code), strlen(cell));
  ASSERT_CONTAINS(m.code, "#include <stdio.h>\nint n = 2;\n");
  ASSERT_NOT_CONTAINS(m.code, "%launch");
  ex_magic_result_free(&m);
  /* at the top, as before; the code's line numbers stay the cell's */
  ASSERT_EQ(magics("%lsmagic\n%launch g() num_processes=1\n", &m, err), EX_OK);
  ex_magic_result_free(&m);
  ASSERT_EQ(magics("%%cuda\nint x;", &m, err), EX_OK);
  ASSERT_EQ_STR(m.code, "      \nint x;");
  ex_magic_result_free(&m);
  /* a comment after the options is not an option */
  ASSERT_EQ(magics("%launch f() num_processes=2 // two GPUs\n", &m, err), EX_OK);
  ASSERT_EQ_STR(m.launch_opts, " num_processes=2 ");
  ex_magic_result_free(&m);
  ASSERT_EQ(magics("%launch f() num_processes=2 log_line_prefix_template='// ' /* a */", &m, err),
            EX_OK);
  ASSERT_EQ_STR(m.launch_opts, " num_processes=2 log_line_prefix_template='// ' ");
  ex_magic_result_free(&m);
  /* a %launch inside a comment or a string is C */
  ASSERT_EQ(magics("/*\n%launch f() num_processes=1\n*/ int x;", &m, err), EX_OK);
  ASSERT_NULL(m.launch_call);
  ex_magic_result_free(&m);
  static const struct {
    const char *cell, *refusal;
  } refused[] = {
      {"%launch f() num_processes=1\nprintf(\"after\\n\");", "code after %launch (line 2)"},
      {"int x;\n%launch f() num_processes=1\n\n// c\nx = 2;", "code after %launch (line 5)"},
      {"%launch f() num_processes=1\n%launch g() num_processes=1", "only one %launch per cell"},
      {"int x;\n%launch f() num_processes=1\n%launch f() num_processes=1",
       "only one %launch per cell (a second one on line 3)"},
      {"int x;\n%timeit x++", "%timeit (line 2) must come before the cell's code"},
      {"int x;\n%launch f num_processes=1", "must be called with its arguments"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    if (magics(refused[i].cell, &m, err) != EX_ERR_USAGE)
      NBF_TEST_FAIL("accepted:\n%s", refused[i].cell);
    ASSERT_CONTAINS(err, refused[i].refusal);
    ex_magic_result_free(&m);
  }
}

NBF_TEST(cell_cxx_cell_leaves_c_cells_alone) {
  cells_t c = cells_new();
  ex_cell_unit_t u;
  char err[64];
  ASSERT_EQ(ex_cell_generate(c.st,
                             "#include <cstdio>\n#define K 2\n"
                             "template <typename T> T twice(T v) { return v + v; }\n"
                             "__global__ void kern(int *p) { *p = 1; }\n"
                             "int answer(void) { return twice(21); }",
                             1, "cell[1]", NULL, NULL, "", &u, err, sizeof err),
            0);
  ASSERT_EQ(u.cxx, 1);
  ASSERT_CONTAINS(u.source, "template <typename T> T twice(T v) { return v + v; }");
  ASSERT_CONTAINS(u.source, "__global__ void kern(int *p) { *p = 1; }");
  ASSERT_CONTAINS(u.source, label_of("answer", u.tag));
  ASSERT_EQ(ex_cell_commit(c.st, &u), EX_OK);
  ex_cell_unit_t v = gen(&c, "answer() * K", 0);
  /* the C++ header only under __cplusplus, the macro and host function
   * for everyone, the template and the kernel for nobody */
  ASSERT_CONTAINS(v.source, "#ifdef __cplusplus\n#line 1 \"cell[1]\"\n#include <cstdio>\n#endif");
  ASSERT_CONTAINS(v.source, "#define K 2");
  ASSERT_CONTAINS(v.source, label_of("answer", u.tag));
  ASSERT_NOT_CONTAINS(v.source, "twice");
  ASSERT_NOT_CONTAINS(v.source, "kern");
  ex_cell_unit_free(&u);
  ex_cell_unit_free(&v);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_split_error) {
  cells_t c = cells_new();
  ex_cell_unit_t u;
  char err[128] = "";
  ASSERT_EQ(ex_cell_generate(c.st, "int f() {", 0, "cell[1]", NULL, NULL, "", &u, err, sizeof err),
            EX_ERR_SPLIT);
  ASSERT_CONTAINS(err, "not closed");
  ex_cell_state_destroy(&c.st);
}

/* ---------------------------------------------------- ex_compile cases */

NBF_TEST(compile_clean_diagnostics) {
  const char *raw = "cell[2]: In function '__nbf_run_0123456789abcdef':\n"
                    "cell[2]:1:9: error: expected expression before ';' token\n"
                    "cell[2]:1:13: error: 'foo' undeclared (first use in this function)\n"
                    "<nbfork>:12:33: note: in definition of macro '__nbf_show'\n"
                    "cell[2]:1:13: error: 'foo' undeclared (first use in this function)\n"
                    "cell[2]:3:1: warning: call to sq__c0123456789abcdef here\n"
                    "cc1: some warnings being treated as errors\n";
  char *c = ex_diag_clean(raw);
  ASSERT_EQ_STR(c, "cell[2]:1:9: error: expected expression before ';' token\n"
                   "cell[2]:1:13: error: 'foo' undeclared (first use in this function)\n"
                   "cell[2]:3:1: warning: call to sq here\n");
  free(c);
  c = ex_diag_clean("");
  ASSERT_EQ_STR(c, "");
  free(c);
}

NBF_TEST(compile_summary) {
  char *s = ex_diag_summary("cell[1]: In function 'f':\ncell[1]:2:3: error: boom  \nmore\n");
  ASSERT_EQ_STR(s, "cell[1]:2:3: error: boom");
  free(s);
  s = ex_diag_summary("/usr/bin/ld: cannot find -lnope: No such file or directory\n"
                      "collect2: error: ld returned 1 exit status\n");
  ASSERT_EQ_STR(s, "/usr/bin/ld: cannot find -lnope: No such file or directory");
  free(s);
  s = ex_diag_summary("");
  ASSERT_EQ_STR(s, "compilation failed");
  free(s);
}

NBF_TEST(compile_find_nvcc) {
  setenv("NBFORK_NVCC", "/nonexistent/nvcc", 1);
  ASSERT_TRUE(ex_compile_find_nvcc() == NULL);
  setenv("NBFORK_NVCC", "/bin/true", 1);
  char *p = ex_compile_find_nvcc();
  ASSERT_EQ_STR(p, "/bin/true");
  free(p);
  unsetenv("NBFORK_NVCC");
  /* without the variable: PATH first, then /usr/local/cuda/bin */
  setenv("PATH", "/nonexistent", 1);
  unsetenv("CUDA_HOME");
  p = ex_compile_find_nvcc();
  if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0)
    ASSERT_EQ_STR(p, "/usr/local/cuda/bin/nvcc");
  else
    ASSERT_TRUE(p == NULL);
  free(p);
}

/* ---------------------------- the whole path, with the system compiler */

typedef struct {
  cells_t cells;
  ex_toolchain_t tc;
  char workdir[64];
} engine_t;

static void engine_init(engine_t *e) {
  memset(e, 0, sizeof *e);
  e->cells = cells_new();
  snprintf(e->workdir, sizeof e->workdir, "/tmp/nbfork-exec-test-XXXXXX");
  ASSERT_TRUE(mkdtemp(e->workdir) != NULL);
  e->tc.cc = getenv("NBFORK_CC") ? getenv("NBFORK_CC") : "cc";
  e->tc.incdir = EX_TEST_INCDIR;
  e->tc.libdir = EX_TEST_LIBDIR;
  e->tc.workdir = e->workdir;
  e->tc.cflags = "-O1 -Werror=implicit-function-declaration";
  e->tc.nvccflags = "-O2";
}

static void engine_destroy(engine_t *e) {
  nbf_rmtree(e->workdir);
  ex_cell_state_destroy(&e->cells.st);
}

static size_t count_objects(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ls %s/*.so 2>/dev/null | wc -l", dir);
  FILE *p = popen(cmd, "r");
  size_t n = 0;
  if (p) {
    if (fscanf(p, "%zu", &n) != 1)
      n = 0;
    pclose(p);
  }
  return n;
}

/* Compile, load, commit and run `code` as the next cell; returns the
 * handle. Fails the test on a compile error. */
static void *run_cell(engine_t *e, const char *code, char tag_out[17]) {
  ex_cell_unit_t u = gen(&e->cells, code, 0);
  char *so = NULL, *diag = NULL;
  ex_result_t rc = ex_compile(&e->tc, u.source, u.tag, 0, &so, &diag);
  if (rc != EX_OK)
    NBF_TEST_FAIL("cell did not compile (%s):\n%s\n--- diagnostics:\n%s\n--- unit:\n%s",
                  ex_result_name(rc), code, diag ? diag : "", u.source);
  free(diag);
  void *h = dlopen(so, RTLD_NOW | RTLD_GLOBAL);
  if (!h)
    NBF_TEST_FAIL("dlopen: %s", dlerror());
  free(so);
  ASSERT_EQ(ex_cell_commit(e->cells.st, &u), EX_OK);
  void (*run)(void) = (void (*)(void))dlsym(h, u.run_symbol);
  ASSERT_TRUE(run != NULL);
  run();
  if (tag_out)
    memcpy(tag_out, u.tag, 17);
  ex_cell_unit_free(&u);
  return h;
}

static void *sym(void *h, const char *name, const char *tag) {
  char s[128];
  snprintf(s, sizeof s, "%s__c%s", name, tag);
  void *p = dlsym(h, s);
  if (!p)
    NBF_TEST_FAIL("symbol %s not found: %s", s, dlerror());
  return p;
}

NBF_TEST(compile_run_redefinition) {
  engine_t e;
  engine_init(&e);
  char t1[17], t2[17], t3[17], t4[17];
  void *h1 = run_cell(&e, "int sq(int x) { return x * x; }", t1);
  void *h2 = run_cell(&e, "int call_sq(void) { return sq(3); }", t2);
  void *h3 = run_cell(&e, "int sq(int x) { return x + 1; }", t3);
  void *h4 = run_cell(&e, "int now = sq(3);\nint later = 0;", t4);
  int (*call_sq)(void) = (int (*)(void))sym(h2, "call_sq", t2);
  /* call_sq was compiled against the first sq and keeps calling it */
  ASSERT_EQ(call_sq(), 9);
  /* a cell compiled after the redefinition gets the new one */
  ASSERT_EQ(*(int *)sym(h4, "now", t4), 4);
  (void)h1;
  (void)h3;
  engine_destroy(&e);
}

NBF_TEST(compile_cache_and_reset) {
  engine_t e;
  engine_init(&e);
  char t1[17], t2[17];
  void *h1 = run_cell(&e, "int arr[3] = {1, 2, 3};\nint n;\nint *p = arr + 1;", t1);
  size_t objects = count_objects(e.workdir);
  ASSERT_EQ(objects, 1);
  int *arr = sym(h1, "arr", t1), *n = sym(h1, "n", t1);
  arr[0] = 9;
  *n = 7;
  /* the identical cell again: no compiler (there is none now), same
   * object, and its globals start over */
  e.tc.cc = "/nonexistent/cc";
  e.cells.count = 41;
  void *h2 = run_cell(&e, "int arr[3] = {1, 2, 3};\nint n;\nint *p = arr + 1;", t2);
  ASSERT_EQ_STR(t1, t2);
  ASSERT_TRUE(h1 == h2);
  ASSERT_EQ(count_objects(e.workdir), objects);
  ASSERT_EQ(arr[0], 1);
  ASSERT_EQ(*n, 0);
  ASSERT_TRUE(*(int **)sym(h2, "p", t2) == arr + 1);
  engine_destroy(&e);
}

NBF_TEST(compile_local_header_next_to_the_notebook) {
  /* the executor runs in the notebook's directory: `#include "x.h"` finds
   * x.h there, and editing it recompiles the cell */
  engine_t e;
  engine_init(&e);
  char cwd[4096];
  ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
  ASSERT_EQ(chdir(e.workdir), 0);
  ASSERT_EQ(mkdir("nb", 0700), 0);
  ASSERT_EQ(chdir("nb"), 0);
  FILE *f = fopen("local_lib.h", "w");
  fputs("#define LOCAL_V 5\n", f);
  fclose(f);
  char t1[17], t2[17];
  void *h = run_cell(&e, "#include \"local_lib.h\"\nint lv = LOCAL_V;", t1);
  ASSERT_EQ(*(int *)sym(h, "lv", t1), 5);
  f = fopen("local_lib.h", "w");
  fputs("#define LOCAL_V 50\n", f);
  fclose(f);
  h = run_cell(&e, "#include \"local_lib.h\"\nint lv = LOCAL_V;", t2);
  ASSERT_NE_STR(t1, t2);
  ASSERT_EQ(*(int *)sym(h, "lv", t2), 50);
  ASSERT_EQ(chdir(cwd), 0);
  engine_destroy(&e);
}

/* Hundreds of flag words all reach the compiler: the argument vector
 * grows (it once stopped at 128 words and dropped the rest silently). */
NBF_TEST(compile_many_flags_reach_the_compiler) {
  engine_t e;
  engine_init(&e);
  nbf_buf_t flags = {0};
  ASSERT_EQ(nbf_buf_puts(&flags, "-O0"), 0);
  for (int i = 0; i < 300; i++)
    ASSERT_EQ(nbf_buf_printf(&flags, " -DNBF_FLAG_%d=%d", i, i), 0);
  e.tc.cflags = flags.data;
  char tag[17];
  void *h = run_cell(&e, "int first = NBF_FLAG_0, last = NBF_FLAG_299;", tag);
  ASSERT_EQ(*(int *)sym(h, "first", tag), 0);
  ASSERT_EQ(*(int *)sym(h, "last", tag), 299);
  /* and as many %ldflags words */
  e.tc.ldflags = "-lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm "
                 "-lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm -lm";
  h = run_cell(&e, "int also = NBF_FLAG_150;", tag);
  ASSERT_EQ(*(int *)sym(h, "also", tag), 150);
  nbf_buf_free(&flags);
  engine_destroy(&e);
}

NBF_TEST(compile_error_has_cell_lines) {
  engine_t e;
  engine_init(&e);
  ex_cell_unit_t u = gen(&e.cells, "int ok = 1;\nint bad = ;\nundefined_thing", 0);
  char *so = NULL, *diag = NULL;
  ASSERT_EQ(ex_compile(&e.tc, u.source, u.tag, 0, &so, &diag), EX_ERR_COMPILE);
  ASSERT_TRUE(so == NULL);
  char *clean = ex_diag_clean(diag);
  ASSERT_CONTAINS(clean, "cell[1]:2:");
  ASSERT_CONTAINS(clean, "cell[1]:3:");
  ASSERT_NOT_CONTAINS(clean, "__nbf_");
  ASSERT_NOT_CONTAINS(clean, "<nbfork>");
  char *sum = ex_diag_summary(clean);
  ASSERT_CONTAINS(sum, "cell[1]:2:");
  ASSERT_CONTAINS(sum, "error:");
  ASSERT_TRUE(!strchr(sum, '\n'));
  ASSERT_EQ(count_objects(e.workdir), 0);
  free(sum);
  free(clean);
  free(diag);
  ex_cell_unit_free(&u);
  engine_destroy(&e);
}

NBF_TEST(compile_links_libc_libm_libgcc) {
  /* cells bind libc/libm at load time and carry libgcc's and glibc's
   * static parts: each kind of symbol must resolve */
  engine_t e;
  engine_init(&e);
  char t[17];
  void *h = run_cell(
      &e,
      "#include <errno.h>\n#include <math.h>\n#include <pthread.h>\n"
      "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
      "static void bye(void) {}\n"
      "static int cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }\n"
      "static void *thr(void *p) { *(int *)p = 5; return p; }\n"
      "double root = sqrt(2.0) * cbrt(27.0);\n"
      "int sorted[3] = {3, 1, 2};\n"
      "long long q = 0;\n"
      "int from_thread = 0;\n"
      "int at = 0;\n"
      "int err = 0;\n"
      "qsort(sorted, 3, sizeof(int), cmp);\n"
      "{ volatile unsigned __int128 big = ((unsigned __int128)1 << 100) + 7; q = (long long)(big % "
      "1000003); }\n"
      "{ pthread_t th; pthread_create(&th, NULL, thr, &from_thread); pthread_join(th, NULL); }\n"
      "at = atexit(bye);\n"
      "errno = 0; strtol(\"99999999999999999999999\", NULL, 10); err = errno;\n"
      "fprintf(stdout, \"%s\", \"\");",
      t);
  ASSERT_TRUE(*(double *)sym(h, "root", t) > 4.24 && *(double *)sym(h, "root", t) < 4.25);
  int *sorted = sym(h, "sorted", t);
  ASSERT_EQ(sorted[0], 1);
  ASSERT_EQ(sorted[2], 3);
  unsigned __int128 big = ((unsigned __int128)1 << 100) + 7;
  ASSERT_EQ(*(long long *)sym(h, "q", t), (long long)(big % 1000003));
  ASSERT_EQ(*(int *)sym(h, "from_thread", t), 5);
  ASSERT_EQ(*(int *)sym(h, "at", t), 0);
  ASSERT_EQ(*(int *)sym(h, "err", t), 34 /* ERANGE */);
  engine_destroy(&e);
}

/* Run `code` with stdout captured; returns what it printed (static). */
static const char *shown(engine_t *e, const char *code) {
  static char out[4096];
  fflush(stdout);
  int saved = dup(1);
  char path[] = "/tmp/nbfork-exec-out-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  dup2(fd, 1);
  run_cell(e, code, NULL);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  ssize_t n = pread(fd, out, sizeof out - 1, 0);
  out[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  return out;
}

NBF_TEST(compile_show_values) {
  unsetenv("NBFORK_DISPLAY_FD"); /* nbf__execute_result prints to stdout */
  engine_t e;
  engine_init(&e);
  /* cell -> what it shows */
  static const char *const cases[][2] = {
      {"int j = 5;\nj", "5\n"},
      {"2.5", "2.5\n"},
      {"1.0 / 3", "0.3333333333333333\n"},
      {"0.1f", "0.1\n"},
      {"\"a\\\"b\\n\"", "\"a\\\"b\\n\"\n"},
      {"(char)65", "'A' (65)\n"},
      {"(_Bool)1", "true\n"},
      {"-3000000000LL", "-3000000000\n"},
      {"18446744073709551615ULL", "18446744073709551615\n"},
      {"(__int128)-5", "-5\n"},
      {"(void *)0", "NULL\n"},
      {"(char *)0", "NULL\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ASSERT_EQ_STR(shown(&e, cases[i][0]), cases[i][1]);
  const char *p = shown(&e, "&j");
  ASSERT_TRUE(!strncmp(p, "0x", 2));
  ASSERT_EQ_STR(shown(&e, "struct P { int a, b; };\nstruct P pt = {1, 2};\npt"),
                "<8-byte value>\n");
  /* a void expression shows nothing */
  ASSERT_EQ_STR(shown(&e, "void nothing(void) {}\nnothing()"), "");
  engine_destroy(&e);
}

/* Compile unit `u` with the host C++ compiler into WORKDIR/so_name
 * (`link`: extra words for the link) and load it; fails the test when
 * either fails. */
static void *cxx_load(const engine_t *e, const ex_cell_unit_t *u, const char *so_name,
                      const char *link) {
  char src[128], so[128], cmd[1024];
  snprintf(src, sizeof src, "%s/unit.cc", e->workdir);
  snprintf(so, sizeof so, "%s/%s", e->workdir, so_name);
  FILE *f = fopen(src, "w");
  ASSERT_TRUE(f != NULL);
  fputs(u->source, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "c++ -fPIC -shared -I%s -o %s %s %s 2>&1", EX_TEST_INCDIR, so, src,
           link);
  if (system(cmd) != 0)
    NBF_TEST_FAIL("the C++ unit did not compile:\n%s", u->source);
  void *h = dlopen(so, RTLD_NOW | RTLD_GLOBAL);
  if (!h)
    NBF_TEST_FAIL("dlopen: %s", dlerror());
  return h;
}

NBF_TEST(compile_cxx_unit_with_host_compiler) {
  /* %%cuda units are C++: check the generated code with the host C++
   * compiler (no nvcc needed): extern "C" entry points, shown values */
  if (system("c++ --version >/dev/null 2>&1") != 0) {
    printf("SKIP: no C++ compiler\n");
    exit(77);
  }
  engine_t e;
  engine_init(&e);
  ex_cell_unit_t u = gen(&e.cells, "int h(void) { return 7; }\nvoid v(void) {}\nv();\nh()", 0);
  void *h =
      cxx_load(&e, &u, "unit.so", "-L" EX_TEST_LIBDIR " -Wl,-rpath," EX_TEST_LIBDIR " -lnbfork");
  ASSERT_TRUE(dlsym(h, u.run_symbol) != NULL); /* extern "C": unmangled */
  ASSERT_TRUE(sym(h, "h", u.tag) != NULL);
  ex_cell_unit_free(&u);

  ex_cell_unit_t l;
  char err[64];
  ASSERT_EQ(ex_cell_generate(e.cells.st, "void go(void) {}", 1, "cell[2]", "go()", NULL, "", &l,
                             err, sizeof err),
            0);
  void *h2 = cxx_load(&e, &l, "unit2.so", "");
  int (*launch)(void) = (int (*)(void))dlsym(h2, l.launch_symbol);
  ASSERT_TRUE(launch != NULL);
  ASSERT_EQ(launch(), 0);
  ex_cell_unit_free(&l);
  engine_destroy(&e);
}

/* Who initialized CUDA: the line of the cell's call of the function that
 * led to cuInit (ex_cuda_hook.h), declarations skipped. */
NBF_TEST(cuda_hook_call_line_skips_declarations) {
  const char *cell = "int gpu_setup(void);\n"
                     "extern int *gpu_setup_ptr(void);\n"
                     "int my_gpu_setup(void) { return 0; }\n"
                     "int rc = gpu_setup ();\n"
                     "gpu_setup();\n";
  ASSERT_EQ(ex_cuda_hook_call_line(cell, "gpu_setup"), 4);
  ASSERT_EQ(ex_cuda_hook_call_line("if (gpu_setup())\n  return 1;", "gpu_setup"), 1);
  ASSERT_EQ(ex_cuda_hook_call_line("int f(void) {\n  return gpu_setup();\n}", "gpu_setup"), 2);
  ASSERT_EQ(ex_cuda_hook_call_line("static int *gpu_setup(void);\n", "gpu_setup"), 0);
  ASSERT_EQ(ex_cuda_hook_call_line("x = my_gpu_setup();", "gpu_setup"), 0);
  ASSERT_EQ(ex_cuda_hook_call_line("", "gpu_setup"), 0);
}

NBF_TEST_MAIN()

/* ------------------------------------------- launch thunks in memory */

/* The unit of a cell holding only `%launch CALL` (the executor's case),
 * and its thunk through the fast path (NULL: declined). */
static ex_jit_launch_fn jit(engine_t *e, const char *call, const char *cflags) {
  ex_cell_unit_t u = gen_launch(&e->cells, "", call);
  ex_jit_launch_fn fn = ex_jit_launch(e->cells.st, call, u.source, u.tag, u.launch_symbol,
                                      e->tc.incdir, cflags ? cflags : e->tc.cflags);
  ex_cell_unit_free(&u);
  return fn;
}

/* exit 77 (ctest: skipped) where the fast path is not built */
static void need_jit(void) {
  if (!ex_jit_enabled()) {
    printf("SKIP: built without libtcc (Debian libtcc-dev) or NBFORK_JIT=0\n");
    exit(77);
  }
}

/* The thunk of a launch-only cell compiles in memory, calls the function
 * an earlier (system-compiled) cell defined with the argument values of
 * the call (integers, floating point, pointers, enums and scalar
 * typedefs mixed, as the ABI assigns them to registers), and reports its
 * int result; a void function gives 0. The same call again is the same
 * thunk. */
NBF_TEST(jit_launch_thunk_calls_the_cell_function) {
  need_jit();
  engine_t e;
  engine_init(&e);
  run_cell(&e,
           "#include <stdio.h>\n"
           "typedef double real;\n"
           "typedef enum { LOW, HIGH } level_t;\n"
           "int seen_n; double seen_x; char seen_s[16]; long seen_k;\n"
           "int work(const char *s, int n, real x, float f, size_t k, level_t lv, int *out) {\n"
           "  seen_n = n; seen_x = x + f; seen_k = (long)k * (lv == HIGH ? 10 : 1);\n"
           "  snprintf(seen_s, sizeof seen_s, \"%s\", s); *out = n + 2;\n"
           "  return n + 2;\n}\n"
           "int slot;\n"
           "void nothing(int n) { seen_n = n; }",
           NULL);
  ex_jit_launch_fn fn = jit(&e, "work(\"bf16\", 40, 0.5, 0.25f, 7, HIGH, &slot)", NULL);
  ASSERT_TRUE(fn != NULL);
  ASSERT_EQ(fn(), 42);
  ASSERT_TRUE(jit(&e, "work(\"bf16\", 40, 0.5, 0.25f, 7, HIGH, &slot)", NULL) == fn);
  fn = jit(&e, "nothing(7)", NULL);
  ASSERT_TRUE(fn != NULL);
  ASSERT_EQ(fn(), 0);
  /* what the calls did, read through a cell compiled by the system compiler */
  char t[17];
  void *h = run_cell(&e,
                     "int probe(void) { return seen_n * 100000 + (int)(seen_x * 100) * 1000 + "
                     "(int)seen_k * 10 + (seen_s[0] == 'b') + (slot == 42) * 1000000; }",
                     t);
  int (*probe)(void) = (int (*)(void))sym(h, "probe", t);
  ASSERT_EQ(probe(), 1000000 + 7 * 100000 + 75 * 1000 + 70 * 10 + 1);
  engine_destroy(&e);
}

/* Whatever TinyCC would judge differently from the system compiler goes
 * there instead: errors, warnings, structs passed by value (TinyCC 0.9.27
 * gets `{int; double}` wrong), long double, functions the cells did not
 * define, calls that are not NAME(ARGS), quoted includes, flags it cannot
 * mirror, and NBFORK_JIT=0. */
NBF_TEST(jit_declines_to_the_system_compiler) {
  need_jit();
  engine_t e;
  engine_init(&e);
  run_cell(&e,
           "#include <time.h>\n"
           "typedef struct { int a; double b; } pair_t;\n"
           "int take(int *p) { return p ? *p : -1; }\n"
           "int two(int a, int b) { return a + b; }\n"
           "int by_value(pair_t p) { return p.a; }\n"
           "int by_struct(struct tm t) { return t.tm_sec; }\n"
           "int wide(long double x) { return (int)x; }\n"
           "int (*fp)(int, int) = two;",
           NULL);
  const char *declined[] = {
      "two(1)",                     /* too few arguments: an error */
      "missing(1)",                 /* undeclared */
      "take(3)",                    /* int to pointer: a warning, -Werror */
      "by_value((pair_t){1, 2.0})", /* a struct by value */
      "wide(2.0L)",                 /* long double */
      "abs(-3)",                    /* not a cell's function */
      "fp(1, 2)",                   /* a pointer, not a function */
      "(two)(1, 2)",                /* not NAME(ARGS) */
  };
  for (size_t i = 0; i < sizeof declined / sizeof *declined; i++)
    if (jit(&e, declined[i], NULL))
      NBF_TEST_FAIL("the fast path took %%launch %s", declined[i]);
  ASSERT_TRUE(jit(&e, "two(1, 2)", "-O0 -fopenmp") == NULL);
  ASSERT_TRUE(jit(&e, "two(1, 2)", "-O2 '-DX=a b'") == NULL);
  setenv("NBFORK_JIT", "0", 1);
  ASSERT_TRUE(jit(&e, "two(1, 2)", NULL) == NULL);
  unsetenv("NBFORK_JIT");
  ex_jit_launch_fn fn = jit(&e, "two(1, THREE)", "-O2 -g -DTHREE=3 -I/tmp");
  ASSERT_TRUE(fn != NULL);
  ASSERT_EQ(fn(), 4);
  /* a quoted include in the prelude: the system compiler's search order */
  run_cell(&e, "#include \"nbfork.h\"\nint three(void) { return 3; }", NULL);
  ASSERT_TRUE(jit(&e, "three()", NULL) == NULL);
  engine_destroy(&e);
}

/* Which calls count as simple (scalar and pointer parameters of a
 * cell-defined function): the rule itself, without TinyCC. */
NBF_TEST(jit_simple_call_rule) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c,
                         "typedef float real;\ntypedef struct { int a; } box_t;\n"
                         "typedef box_t *box_p;\ntypedef enum { A, B } ab_t;\n"
                         "int f(const char *s, unsigned long n, real r, ab_t e, box_p b, "
                         "void (*cb)(int), float v[], ...) { return 0; }\n"
                         "int g(box_t b) { return b.a; }\n"
                         "int h(void) { return 0; }\n"
                         "int k(struct box *b, int n) { return n; }\n"
                         "int m(unknown_t x) { return 0; }",
                         1);
  ex_cell_unit_free(&u);
  ASSERT_EQ(ex_jit_simple_call(c.st, "f(\"x\", 1, 2, A, 0, 0, 0)"), 1);
  ASSERT_EQ(ex_jit_simple_call(c.st, "  h ( )"), 1);
  ASSERT_EQ(ex_jit_simple_call(c.st, "k(0, 1)"), 1);
  ASSERT_EQ(ex_jit_simple_call(c.st, "g(b)"), 0);
  ASSERT_EQ(ex_jit_simple_call(c.st, "m(1)"), 0);
  ASSERT_EQ(ex_jit_simple_call(c.st, "nope(1)"), 0);
  ASSERT_EQ(ex_jit_simple_call(c.st, "f"), 0);
  ASSERT_EQ(ex_jit_simple_call(c.st, NULL), 0);
  ex_cell_state_destroy(&c.st);
}

/* ------------------------------------- straight-line cells via TinyCC */

/* What a straight-line cell may name to go through TinyCC: library and
 * libc calls, variables, scalar typedefs, functions with scalar and
 * pointer parameters, macros expanding to those; never an aggregate
 * passed or returned by value (through a function, a typedef or a
 * macro), long double, attributes, asm, atomics, quoted includes. */
NBF_TEST(jit_cell_safe_rule) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c,
                         "typedef float real;\ntypedef struct { int a; double b; } pair_t;\n"
                         "typedef pair_t *pair_p;\n"
                         "int sq(int v) { return v * v; }\n"
                         "double norm(const double *v, int n) { return v[0] * n; }\n"
                         "pair_t mk(int a) { pair_t p = {a, 1.0}; return p; }\n"
                         "int first(pair_t p) { return p.a; }\n"
                         "int ptr_ok(pair_p p) { return p->a; }\n"
                         "#define TWICE(x) (2 * sq(x))\n"
                         "#define MK(a) first(mk(a))\n"
                         "int counter = 0;\ndouble rate = 0.1;\n"
                         "pair_t (*mkp)(int) = mk;\npair_t gp;\nenum color { RED, GREEN };\n"
                         "long double ldv;",
                         1);
  ex_cell_unit_free(&u);
  /* issue 20: judged by the declared types of what the cell names */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "double lr = rate * 2;"), 1);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int z = mkp(1).a;"), 0); /* a function pointer variable */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "gp.a = 3;"), 0);         /* an aggregate variable */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "__typeof__(counter) t = 1;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int k = GREEN;"), 0); /* an earlier cell's enumerator */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "double x = ldv;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "div_t q = div(7, 2);"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int y = sq(3) + counter;"), 1);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "real r = 2.5f; double d = norm(&d, 1);"), 1);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "#include <stdio.h>\nprintf(\"%d\\n\", TWICE(4));"), 1);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "pair_p q = 0;"), 0); /* a pointer to an aggregate */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int z = first(mk(1));"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "pair_t p = {1, 2.0};"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int z = MK(2);"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int z = ptr_ok(0);"), 0); /* its type names an aggregate */
  ASSERT_EQ(ex_jit_cell_safe(c.st, "struct S { int a; } s;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "long  double ld = 1;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "int a __attribute__((aligned(64)));"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "_Atomic int a;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(c.st, "#include \"mine.h\"\nint a;"), 0);
  ASSERT_EQ(ex_jit_cell_safe(NULL, "int long_doubled = 1;"), 1);
  ex_cell_state_destroy(&c.st);
}

/* A straight-line cell compiled by TinyCC is a shared object like GCC's:
 * its variable, exported under its versioned name, is read and written
 * by a later cell the system compiler built (a function, not straight),
 * and the object carries no GCC .comment (so the fast path was taken).
 * A cell TinyCC would only warn about (an implicit declaration) is
 * refused by the fast path, for GCC to report. */
NBF_TEST(jit_cell_object_links_with_system_compiled_cells) {
  need_jit();
  engine_t e;
  engine_init(&e);
  e.tc.tinycc = 1;
  char tag[17];
  void *h1 = run_cell(&e, "int answer = 6 * 7;", tag);
  char path[160], cmd[300];
  snprintf(path, sizeof path, "%s/cell_%s.so", e.workdir, tag);
  snprintf(cmd, sizeof cmd, "grep -q 'GCC: (' %s", path);
  ASSERT_TRUE(system(cmd) != 0);
  e.tc.tinycc = 0;
  void *h2 = run_cell(&e, "int bump(void) { answer += 1; return answer; }", tag);
  int (*bump)(void) = (int (*)(void))sym(h2, "bump", tag);
  ASSERT_TRUE(bump != NULL);
  ASSERT_EQ(bump(), 43);
  snprintf(path, sizeof path, "%s/cell_%s.so", e.workdir, tag);
  snprintf(cmd, sizeof cmd, "grep -q 'GCC: (' %s", path);
  ASSERT_EQ(system(cmd), 0);
  ex_cell_unit_t u = gen(&e.cells, "int w = undeclared_fn(1);", 0);
  snprintf(path, sizeof path, "%s/tcc_declined.so", e.workdir);
  ASSERT_EQ(ex_jit_cell_so(u.source, e.tc.incdir, path, NULL), -1);
  ASSERT_TRUE(access(path, F_OK) != 0);
  ex_cell_unit_free(&u);
  dlclose(h2);
  dlclose(h1);
  engine_destroy(&e);
}

/* Issue 20, class a, item 1: a TinyCC unit names an earlier cell's double
 * `A` as an SSE operand. Declared directly (the system compiler's unit),
 * TinyCC's object reaches it through a PLT slot: the relocation check
 * refuses it. Generated for TinyCC, the unit reaches A through a pointer
 * (__nbf_p_A), TinyCC's object passes the check and computes 3.75. The
 * compiler is part of the tag: a cell with no earlier global gets another
 * tag for TinyCC than for the system compiler (item 3). */
NBF_TEST(jit_cell_reaches_earlier_doubles_through_pointers) {
  need_jit();
  engine_t e;
  engine_init(&e);
  char tag[17];
  void *h1 = run_cell(&e, "double A = 1.5, B = 2.25; double V[2] = {0.5, 4.0};", tag);
  const char *code = "double C = A + B * V[1]; V[0] = -B; C += sizeof V;";
  ex_cell_unit_t direct = gen(&e.cells, code, 0);
  char err[256], path[200];
  ex_cell_unit_t via = {0};
  ASSERT_EQ(ex_cell_generate_for(e.cells.st, code, 0, "cell[2]", NULL, NULL, "salt", 1, &via, err,
                                 sizeof err),
            EX_OK);
  ASSERT_TRUE(!direct.tinycc && via.tinycc);
  ASSERT_TRUE(strstr(via.source, "#define A (*(0, __nbf_p_A))") != NULL);
  ASSERT_TRUE(strstr(via.source, "#define V (*(0, __nbf_p_V))") != NULL);
  ASSERT_TRUE(strstr(via.source, "__nbf_p_C") == NULL); /* its own global: no pointer */
  snprintf(path, sizeof path, "%s/direct.so", e.workdir);
  ASSERT_EQ(ex_jit_cell_so(direct.source, e.tc.incdir, path, NULL), -1); /* the safety net */
  snprintf(path, sizeof path, "%s/via.so", e.workdir);
  ASSERT_EQ(ex_jit_cell_so(via.source, e.tc.incdir, path, NULL), 0);
  void *h2 = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_TRUE(h2 != NULL);
  void (*run)(void) = (void (*)(void))dlsym(h2, via.run_symbol);
  ASSERT_TRUE(run != NULL);
  run();
  char cs[64];
  snprintf(cs, sizeof cs, "C__c%s", via.tag);
  double *c = dlsym(h2, cs), *v = sym(h1, "V", tag);
  ASSERT_TRUE(c && v);
  ASSERT_TRUE(*c == 1.5 + 2.25 * 4.0 + 16 && v[0] == -2.25);
  ex_cell_unit_t plain = gen(&e.cells, "int z = 1;", 0), fast = {0};
  ASSERT_EQ(ex_cell_generate_for(e.cells.st, "int z = 1;", 0, "cell[3]", NULL, NULL, "salt", 1,
                                 &fast, err, sizeof err),
            EX_OK);
  ASSERT_TRUE(strcmp(plain.tag, fast.tag) != 0);
  ex_cell_unit_free(&plain);
  ex_cell_unit_free(&fast);
  ex_cell_unit_free(&direct);
  ex_cell_unit_free(&via);
  dlclose(h2);
  dlclose(h1);
  engine_destroy(&e);
}

/* ------------------------------------------------------------- %timeit */

NBF_TEST(timeit_format_as_ipython) {
  char b[200];
  ex_timeit_result_t r = {1.234e-6, 45.6e-9, 1000000, 7};
  ex_timeit_format(&r, b, sizeof b);
  ASSERT_EQ_STR(b, "1.23 \xc2\xb5s \xc2\xb1 45.6 ns per loop (mean \xc2\xb1 std. dev. of 7 runs, "
                   "1,000,000 loops each)");
  ex_timeit_result_t one = {2.5, 0, 1, 1};
  ex_timeit_format(&one, b, sizeof b);
  /* IPython's _format_time(0) is "0 ns" */
  ASSERT_EQ_STR(b, "2.5 s \xc2\xb1 0 ns per loop (mean \xc2\xb1 std. dev. of 1 run, 1 loop each)");
  ex_timeit_result_t edge = {0.9997, 0.0123, 10, 3};
  ex_timeit_format(&edge, b, sizeof b);
  ASSERT_EQ_STR(b,
                "1 s \xc2\xb1 12.3 ms per loop (mean \xc2\xb1 std. dev. of 3 runs, 10 loops each)");
}

NBF_TEST(time_format_as_ipython) {
  char b[200];
  ex_time_result_t r = {1.2e-3, 0, 1.5e-3};
  ex_time_format(&r, b, sizeof b);
  ASSERT_EQ_STR(b, "CPU times: user 1.2 ms, sys: 0 ns, total: 1.2 ms\nWall time: 1.5 ms");
  ex_time_result_t long_run = {61.5, 0.25, 3725};
  ex_time_format(&long_run, b, sizeof b);
  ASSERT_EQ_STR(b, "CPU times: user 1min 1s, sys: 250 ms, total: 1min 1s\nWall time: 1h 2min 5s");
}

/* Bad magic arguments are UsageErrors (issue 20): unknown options, a
 * malformed %env, arguments to %who; -n5 is -n 5 as IPython's getopt. */
NBF_TEST(magic_usage_errors) {
  ex_magic_result_t m;
  char err[512];
  static const struct {
    const char *src, *why;
  } bad[] = {{"%timeit -q f()", "unknown option -q"}, {"%env =x", "is not NAME"},
             {"%who x", "takes no arguments"},        {"%lsmagic all", "takes no arguments"},
             {"%time -p f()", "takes no options"},    {"%%timeit -z\nf();", "unknown option -z"},
             {"%%writefile\nx", "needs a file name"}, {"%%file -b f\nx", "unknown option -b"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ASSERT_EQ(magics(bad[i].src, &m, err), EX_ERR_USAGE);
    ASSERT_CONTAINS(err, bad[i].why);
    ex_magic_result_free(&m);
  }
  ASSERT_EQ(magics("%timeit -n5 -r 2 -x;", &m, err), EX_OK);
  ASSERT_EQ(m.timeit_loops, 5);
  ASSERT_EQ(m.timeit_repeat, 2);
  ASSERT_EQ_STR(m.timeit_stmt, "-x;");
  ex_magic_result_free(&m);
  ASSERT_EQ(magics("%time f(1)", &m, err), EX_OK);
  ASSERT_EQ_STR(m.timeit_stmt, "f(1)");
  ASSERT_EQ(m.time_once, 1);
  ex_magic_result_free(&m);
}

/* %%timeit: SETUP stays the cell's code at its columns, the body is the
 * timed block; %%writefile writes the body and compiles nothing. */
NBF_TEST(cell_magics_timeit_and_writefile) {
  ex_magic_result_t m;
  char err[512];
  ASSERT_EQ(magics("%%timeit -n 3 int s = 0;\ns++;\nf(s);", &m, err), EX_OK);
  ASSERT_EQ(m.timeit_loops, 3);
  ASSERT_EQ_STR(m.timeit_stmt, "{s++;\nf(s);\n}");
  ASSERT_EQ_STR(m.code, "              int s = 0;\n");
  ex_magic_result_free(&m);
  char path[] = "/tmp/nbf_writefile_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  char src[128];
  snprintf(src, sizeof src, "%%%%writefile -a %s\nline 1\nline 2", path);
  ASSERT_EQ(magics(src, &m, err), EX_OK);
  ASSERT_EQ_STR(m.code, "");
  ex_magic_result_free(&m);
  FILE *f = fopen(path, "r");
  char got[64] = "";
  ASSERT_TRUE(f != NULL);
  size_t n = fread(got, 1, sizeof got - 1, f);
  fclose(f);
  got[n] = 0;
  ASSERT_EQ_STR(got, "line 1\nline 2\n");
  unlink(path);
}

static long g_timed;
static void sleep_loop(long n) {
  for (long i = 0; i < n; i++) {
    struct timespec ts = {0, 1000000}; /* 1 ms */
    nanosleep(&ts, NULL);
  }
  g_timed += n;
}

/* Without -n, loops grow 1, 2, 5, 10, ... until one run takes 0.2 s; then
 * -r runs of that many loops; the mean is the time per loop. */
NBF_TEST(timeit_autorange_and_runs) {
  ex_timeit_result_t r;
  g_timed = 0;
  ASSERT_EQ(ex_timeit_run(sleep_loop, 0, 3, NULL, &r), EX_OK);
  ASSERT_EQ(r.runs, 3);
  ASSERT_TRUE(r.loops == 100 || r.loops == 200); /* 1 ms sleeps: ~0.2 s at 200 */
  ASSERT_TRUE(r.mean_s >= 0.001 && r.mean_s < 0.005);
  ASSERT_TRUE(r.stdev_s >= 0 && r.stdev_s < r.mean_s);
  /* -n 4 -r 2: exactly 8 loops, no calibration */
  g_timed = 0;
  ASSERT_EQ(ex_timeit_run(sleep_loop, 4, 2, NULL, &r), EX_OK);
  ASSERT_EQ(g_timed, 8);
  ASSERT_EQ(r.loops, 4);
  ASSERT_EQ(r.runs, 2);
  /* an interrupt already pending: no run, -1 */
  volatile sig_atomic_t stop = 1;
  ASSERT_EQ(ex_timeit_run(sleep_loop, 4, 2, &stop, &r), EX_ERR_INTERRUPTED);
  ASSERT_EQ(r.runs, 0);
}

/* ------------------------------------------------------ issue 13 cases */

NBF_TEST(split_sizeof_without_parentheses_is_an_expression) {
  ex_split_t sp;
  char err[128];
  ASSERT_EQ(ex_split("sizeof x", 0, NULL, NULL, &sp, err, sizeof err), EX_OK);
  ASSERT_EQ(sp.count, 1);
  ASSERT_EQ(sp.chunks[0].kind, EX_CHUNK_EXPRESSION);
  ex_split_free(&sp);
}

NBF_TEST(split_columns_of_chunks_and_initializers) {
  ex_split_t sp;
  char err[128];
  ASSERT_EQ(ex_split("int a = 1; int b =\n  a + 2;", 0, NULL, NULL, &sp, err, sizeof err), EX_OK);
  ASSERT_EQ(sp.count, 2);
  ASSERT_EQ(sp.chunks[1].col, 12);
  ASSERT_EQ(sp.chunks[1].decls[0].init_line, 2);
  ASSERT_EQ(sp.chunks[1].decls[0].init_col, 3);
  ex_split_free(&sp);
}

NBF_TEST(split_pragma_heads_its_statement) {
  ex_split_t sp;
  char err[128];
  ASSERT_EQ(ex_split("int v[4];\n#pragma omp parallel for\nfor (int i = 0; i < 4; i++) v[i] = i;\n"
                     "#pragma GCC optimize(\"O3\")\nint w;",
                     0, NULL, NULL, &sp, err, sizeof err),
            EX_OK);
  ASSERT_EQ(sp.count, 4);
  ASSERT_EQ(sp.chunks[1].kind, EX_CHUNK_STATEMENT);
  ASSERT_CONTAINS(sp.chunks[1].text, "#pragma omp parallel for\nfor");
  ASSERT_EQ(sp.chunks[2].kind, EX_CHUNK_PREPROC);
  ASSERT_EQ(ex_split_is_pragma(sp.chunks[2].text), 1);
  ASSERT_EQ(ex_split_is_pragma("#include <omp.h>"), 0);
  ex_split_free(&sp);
}

NBF_TEST(cell_pragma_stays_in_its_cell) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c, "#pragma GCC diagnostic error \"-Wconversion\"\nint z;", 1);
  ex_cell_unit_t v = gen(&c, "z", 0);
  ASSERT_NOT_CONTAINS(v.source, "#pragma");
  ex_cell_unit_free(&u);
  ex_cell_unit_free(&v);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_type_redefinition_refused_naming_users) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c, "struct S { int a; }; struct S gs = {42}; int neighbor = 7;", 1);
  ex_cell_unit_t f = gen(&c, "int get_a(struct S *p) { return p->a; }", 1);
  ex_cell_unit_t v;
  char err[1024] = "";
  ASSERT_EQ(ex_cell_generate(c.st, "struct S { char name[64]; int a; };", 0, "cell[3]", NULL, NULL,
                             "", &v, err, sizeof err),
            EX_ERR_REDEFINED);
  ASSERT_CONTAINS(err, "'struct S' (defined by cell[1])");
  ASSERT_CONTAINS(err, "gs (variable, cell[1])");
  ASSERT_CONTAINS(err, "get_a (function, cell[2])");
  ASSERT_NOT_CONTAINS(err, "neighbor");
  /* the same text, or the users redefined with it, is fine */
  ex_cell_unit_t w = gen(&c, "struct S {  int a;  };", 0);
  ex_cell_unit_t x =
      gen(&c, "struct S { long a; };\nstruct S gs;\nlong get_a(struct S *p) { return p->a; }", 0);
  ex_cell_unit_free(&u);
  ex_cell_unit_free(&f);
  ex_cell_unit_free(&w);
  ex_cell_unit_free(&x);
  ex_cell_state_destroy(&c.st);
}

/* The refusal for `code` as the next cell (EX_ERR_REDEFINED), in err. */
static void refused(cells_t *c, const char *code, char *err, size_t errlen) {
  ex_cell_unit_t v;
  ASSERT_EQ(ex_cell_generate(c->st, code, 0, "cell[9]", NULL, NULL, "", &v, err, errlen),
            EX_ERR_REDEFINED);
}

NBF_TEST(cell_enum_value_redefinition_refused_naming_users) {
  cells_t c = cells_new();
  ex_cell_unit_t u[5];
  u[0] = gen(&c, "enum color { RED, GREEN };", 1);
  u[1] = gen(&c, "int green(void) { return GREEN; }\nint red_only = 0;", 1);
  char err[1024] = "";
  /* GREEN moves: green() was compiled with GREEN == 1 */
  refused(&c, "enum color { GREEN, RED };", err, sizeof err);
  ASSERT_CONTAINS(err, "'enum color' (defined by cell[1])");
  ASSERT_CONTAINS(err, "through 'GREEN'");
  ASSERT_CONTAINS(err, "green (function, cell[2])");
  ASSERT_NOT_CONTAINS(err, "red_only");
  refused(&c, "enum color { RED, GREEN = 5 };", err, sizeof err);
  ASSERT_CONTAINS(err, "green (function, cell[2])");
  /* a value added at the end, or a renamed unused one, changes no user */
  u[2] = gen(&c, "enum color { RED, GREEN, BLUE };", 1);
  u[3] = gen(&c, "enum color { CRIMSON, GREEN, BLUE };", 1);
  /* the users redefined with it */
  u[4] = gen(&c, "enum color { GREEN, RED };\nint green(void) { return GREEN; }", 0);
  for (int i = 0; i < 5; i++)
    ex_cell_unit_free(&u[i]);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(cell_macro_redefinition_refused_naming_users) {
  cells_t c = cells_new();
  ex_cell_unit_t u[7];
  u[0] = gen(&c, "#define N 4\n#define TWICE_N (N * 2)\n#define UNUSED 1", 1);
  u[1] = gen(&c, "int arr[N];\nint total(void) { return TWICE_N; }", 1);
  u[2] = gen(&c, "struct P { int c[N]; };\nenum { SLOTS = N };", 1);
  char err[1024] = "";
  refused(&c, "#define N 8", err, sizeof err);
  ASSERT_CONTAINS(err, "the macro 'N' (defined by cell[1])");
  ASSERT_CONTAINS(err, "arr (variable, cell[2])");
  ASSERT_CONTAINS(err, "total (function, cell[2])"); /* through TWICE_N */
  ASSERT_CONTAINS(err, "struct P (type, cell[3])");  /* its array size */
  ASSERT_CONTAINS(err, "restart the kernel");
  /* the same text again (a re-run) keeps its place before struct P */
  u[3] = gen(&c, "#define N  4", 1);
  ASSERT_CONTAINS(u[3].source, "#define N 4\n");
  ASSERT_TRUE(strstr(u[3].source, "#define N 4\n") < strstr(u[3].source, "struct P"));
  /* a macro nothing uses changes freely */
  u[4] = gen(&c, "#define UNUSED 2", 1);
  /* a struct's users are refused whatever the struct's own dependency */
  u[5] = gen(&c, "#define M 3\ntypedef struct { int w[M]; } M_t;", 1);
  u[6] = gen(&c, "M_t m_user;", 1);
  refused(&c, "#define M 5", err, sizeof err);
  ASSERT_CONTAINS(err, "M_t (type, cell[");
  ASSERT_CONTAINS(err, "m_user (variable, cell[");
  for (int i = 0; i < 7; i++)
    ex_cell_unit_free(&u[i]);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(diag_columns_count_characters) {
  /* "é" is 2 bytes: byte column 9 on line 2 is character column 8 */
  char *d = ex_diag_columns("cell[4]:2:9: error: x\nother:2:9: note\n", "cell[4]",
                            "int a;\nx = \"\xc3\xa9\" +;");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ_STR(d, "cell[4]:2:8: error: x\nother:2:9: note\n");
  free(d);
}

NBF_TEST(objects_may_unload_rules) {
  cells_t c = cells_new();
  ex_cell_unit_t m = gen(&c, "#define GREETING 1", 1);
  static const struct {
    const char *code;
    int may;
  } cases[] = {{"int x = 5;", 1},
               {"x + 1;", 1},
               {"const char *s = \"lit\";", 0},
               {"int *p = &x;", 0},
               {"int arr[3];", 0},
               {"{ static int n; n++; }", 0},
               {"int f(void) { return 1; }", 0},
               {"int g = GREETING;", 0},
               {"int h = MY_MACRO;", 0},
               {"void *q = NULL;", 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ex_cell_unit_t u = gen(&c, cases[i].code, 0);
    if (ex_objects_may_unload(c.st, &u, cases[i].code, 0, 0) != cases[i].may)
      NBF_TEST_FAIL("may_unload(%s) != %d", cases[i].code, cases[i].may);
    /* %launch and %timeit cells stay */
    ASSERT_EQ(ex_objects_may_unload(c.st, &u, cases[i].code, 1, 0), 0);
    ASSERT_EQ(ex_objects_may_unload(c.st, &u, cases[i].code, 0, 1), 0);
    ex_cell_unit_free(&u);
  }
  ex_cell_unit_free(&m);
  ex_cell_state_destroy(&c.st);
}

NBF_TEST(decl_find_top_level_only) {
  const char *h = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
                  "/* Like printf(3), on rank 0. */\nint acc_print(const char *fmt, ...);\n"
                  "/* Copies n bytes. */\nvoid copy(void *dst, size_t n);\n"
                  "typedef struct {\n  int size;\n} box_t;\n"
                  "// Two lines\n// of doc.\n#define LIMIT 10\n"
                  "extern int printf (const char *__restrict __format, ...);\n";
  char *d = ex_decl_find(h, "acc_print");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ_STR(d, "/* Like printf(3), on rank 0. */\nint acc_print(const char *fmt, ...);");
  free(d);
  /* the word in a comment is not printf's declaration; the real one is */
  d = ex_decl_find(h, "printf");
  ASSERT_NOT_NULL(d);
  ASSERT_CONTAINS(d, "extern int printf (const char");
  ASSERT_NOT_CONTAINS(d, "acc_print");
  free(d);
  /* a parameter and a member are no declarations */
  ASSERT_NULL(ex_decl_find(h, "n"));
  ASSERT_NULL(ex_decl_find(h, "size"));
  d = ex_decl_find(h, "box_t");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ_STR(d, "typedef struct {\n  int size;\n} box_t;");
  free(d);
  d = ex_decl_find(h, "LIMIT");
  ASSERT_NOT_NULL(d);
  ASSERT_EQ_STR(d, "// Two lines\n// of doc.\n#define LIMIT 10");
  free(d);
}

NBF_TEST(objects_sweep_closes_what_nothing_names) {
  cells_t c = cells_new();
  ex_cell_unit_t u = gen(&c, "int x = 1;", 1);
  ex_objects_t *o = ex_objects_new();
  ASSERT_NOT_NULL(o);
  /* the main program's handle: dlclose on it unmaps nothing */
  ASSERT_EQ(ex_objects_add(o, dlopen(NULL, RTLD_NOW), u.tag, 1), 0); /* named by x */
  ASSERT_EQ(ex_objects_add(o, dlopen(NULL, RTLD_NOW), "0123456789abcdef", 1), 0);
  ASSERT_EQ(ex_objects_add(o, dlopen(NULL, RTLD_NOW), "fedcba9876543210", 0), 0);
  ASSERT_EQ(ex_objects_sweep(o, c.st), 1);
  ASSERT_EQ(ex_objects_count(o), 2);
  /* x redefined by another cell: its first object goes too */
  ex_cell_unit_t v = gen(&c, "int x = 2;", 1);
  ASSERT_EQ(ex_objects_sweep(o, c.st), 1);
  ASSERT_EQ(ex_objects_count(o), 1);
  ex_objects_destroy(&o);
  ASSERT_NULL(o);
  ex_cell_unit_free(&u);
  ex_cell_unit_free(&v);
  ex_cell_state_destroy(&c.st);
}
