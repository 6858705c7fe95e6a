/*
 * ex_split — split a C cell into top-level chunks and classify them.
 *
 * A cell is C at file scope, except that statements are allowed too (they
 * run in order, like a REPL). This module finds where each top-level
 * construct starts and ends (comments, strings, character literals,
 * preprocessor lines and bracket nesting respected) and says what it is:
 * preprocessor line, type declaration, function definition, variable
 * declaration, prototype, or statement. It also extracts the declared
 * names so the cell engine can version them (see ex_cell.h).
 *
 * Classification is lexical, with the known typedef names of earlier cells
 * as context (C's `a * b;` is a declaration only when `a` is a type). It
 * never compiles anything; the compiler has the last word and reports.
 */
#ifndef EX_SPLIT_H
#define EX_SPLIT_H

#include <stddef.h>

#include "ex_result.h"

typedef enum {
  EX_CHUNK_PREPROC,    /* #include, #define, ... (one logical line)        */
  EX_CHUNK_TYPE,       /* typedef, struct/union/enum definition            */
  EX_CHUNK_FUNCTION,   /* function definition with a body                  */
  EX_CHUNK_PROTOTYPE,  /* function declaration without body, or extern     */
  EX_CHUNK_VARIABLE,   /* object declaration(s) at file scope              */
  EX_CHUNK_STATEMENT,  /* anything else: runs in order                     */
  EX_CHUNK_EXPRESSION, /* the last chunk, an expression without ';'       */
  EX_CHUNK_VERBATIM    /* EX_SPLIT_CXX only: a C++/CUDA declaration kept as
                          written at file scope and local to its cell:
                          template, class, namespace, using, extern "C",
                          static_assert, and anything declared __global__,
                          __device__, __host__, __constant__, __shared__ or
                          __managed__                                      */
} ex_chunk_kind_t;

/* One declarator of a variable declaration: `*p = &x` in `int a, *p = &x;`. */
typedef struct {
  char *name;       /* declared identifier                                  */
  char *declarator; /* declarator text without initializer (`*p`)          */
  char *init;       /* initializer text without `=` (NULL when none)        */
  int init_braced;  /* initializer starts with `{` (kept as a static init)  */
  int init_line;    /* cell line (1-based) where the initializer starts     */
  int init_col;     /* its byte column (1-based) on that line               */
} ex_declarator_t;

typedef struct {
  ex_chunk_kind_t kind;
  char *text;             /* exact source text of the chunk                      */
  int line;               /* 1-based cell line where it starts                   */
  int col;                /* 1-based byte column of its first token on that line
                             (diagnostics keep the cell's columns: ex_cell.c)    */
  char *name;             /* FUNCTION/PROTOTYPE: function name; TYPE: key (the
                             typedef name or "struct tag"); PREPROC #define: the
                             macro name; else NULL                               */
  char *specifiers;       /* VARIABLE/FUNCTION: declaration specifiers, with
                             `static`/`inline` removed (`const float`)          */
  char *signature;        /* FUNCTION: text before the body (`int sq(int x)`), */
                          /* `static`/`inline` removed                           */
  char *body;             /* FUNCTION: the body including braces                 */
  ex_declarator_t *decls; /* VARIABLE: declarators                          */
  size_t ndecls;
  int is_extern; /* VARIABLE/PROTOTYPE written with `extern`            */
  char *doc;     /* the comment right above the chunk (its doc comment,
                    as written: a block comment or `//` lines), or NULL */
} ex_chunk_t;

typedef struct {
  ex_chunk_t *chunks;
  size_t count;
} ex_split_t;

/* Known type names, so `T *x;` is read as a declaration. `is_type` is
 * asked about identifiers not known to C itself; NULL = only the built-in
 * list (size_t, FILE, names ending in _t, ...). Typedef names defined
 * earlier in the same cell are known without asking. */
typedef int (*ex_is_type_fn)(const char *name, void *ctx);

/* Flags of ex_split. */
#define EX_SPLIT_CXX 1 /* the cell is C++ (a %%cuda cell): see EX_CHUNK_VERBATIM */

/* Split `src`. EX_OK (caller frees with ex_split_free); EX_ERR_SPLIT with
 * a message in err (unbalanced brackets, unterminated comment/string;
 * line numbers 1-based); EX_ERR_NOMEM ("out of memory" in err). `out`
 * holds nothing after a failure. */
ex_result_t ex_split(const char *src, int flags, ex_is_type_fn is_type, void *ctx, ex_split_t *out,
                     char *err, size_t errlen);
void ex_split_free(ex_split_t *s);

/* Is `text` a `#pragma` line (or starts with one)? A pragma right before
 * a statement (`#pragma omp parallel for` before a `for`) is part of that
 * statement's chunk; any other top-level pragma is a PREPROC chunk that
 * acts on its own cell only (ex_cell_commit does not keep it). */
int ex_split_is_pragma(const char *text);

/* Is function `name` defined (with a body) in this split? */
int ex_split_defines_function(const ex_split_t *sp, const char *name);

/* "complete", "incomplete" or "invalid" for Jupyter's is_complete_request:
 * incomplete while a bracket, comment or string is open. */
const char *ex_split_is_complete(const char *src);

#endif
