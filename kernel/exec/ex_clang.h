/*
 * ex_clang — semantic completion and inspection through libclang, as
 * xeus-cpp does (ex_query.c asks it first and falls back to its lexical
 * answers where it has none).
 *
 * The cell is compiled for clang as one translation unit: a context
 * header (`#include <nbfork.h>` plus the prelude of earlier cells' types,
 * macros and declarations, ex_cell_state_prelude) and a main file with the
 * cell's declarations at file scope and its statements in a function body,
 * the cell cut at the cursor and its open brackets closed. The context
 * header is the unit's precompiled preamble (libclang reuses it while the
 * earlier cells do not change), so a completion parses only the cell.
 *
 * Built only with NBFORK_HAVE_LIBCLANG (kernel/exec/CMakeLists.txt); without
 * it, or with NBFORK_LIBCLANG=0, ex_clang_new returns NULL and every query
 * answers 0.
 */
#ifndef EX_CLANG_H
#define EX_CLANG_H

#include <stddef.h>

#include "ex_cell.h"

typedef struct ex_clang ex_clang_t;

/* A libclang index for cells that see INCDIR (the runtime's headers).
 * NULL when built without libclang, disabled (NBFORK_LIBCLANG=0) or out of
 * memory. Caller destroys. */
ex_clang_t *ex_clang_new(const char *incdir);
void ex_clang_destroy(ex_clang_t **c_p);

/* Completion at byte `start` of `code` (the start of the identifier being
 * typed; the cell is cut there). Calls fn(name, priority, ctx) for each of
 * clang's results (priority: clang's, lower = likelier; locals and
 * parameters below 50); *member: the cursor follows `.` or `->`. 1 when
 * clang answered, 0 when it could not (NULL `c`, cursor in a comment or
 * string, a cell ex_split refuses). Blocks for one parse of the cell. */
int ex_clang_complete(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t start,
                      void (*fn)(const char *name, unsigned priority, void *ctx), void *ctx,
                      int *member);

/* Where the declaration of the identifier code[s, e) comes from. */
typedef enum {
  EX_CLANG_NONE,  /* clang resolved nothing (or an implicit builtin)      */
  EX_CLANG_USER,  /* an earlier cell's (a member: `parent` is its type):
                     look it up in the cell registry                      */
  EX_CLANG_CELL,  /* this cell's own: `text`                              */
  EX_CLANG_HEADER /* a header: `path`                                      */
} ex_clang_origin_t;

typedef struct {
  ex_clang_origin_t origin;
  char name[256];   /* the declaration's own name (`x` for `p.x`)          */
  char path[4096];  /* EX_CLANG_HEADER: the header's path                   */
  char *text;       /* EX_CLANG_CELL: the declaration's text (caller frees) */
  char parent[256]; /* a member's struct/union (`struct P`), else ""        */
} ex_clang_decl_t;

/* The declaration the identifier code[s, e) refers to, as the compiler
 * sees it in the cell's context (a parameter name of another function is
 * no reference; `printf` after the user's own `printf` is the user's).
 * 1 with *out filled, 0 when clang resolved nothing. */
int ex_clang_inspect(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t s,
                     size_t e, ex_clang_decl_t *out);

#endif
