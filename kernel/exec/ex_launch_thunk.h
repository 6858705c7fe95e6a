/*
 * ex_launch_thunk — the `%launch` thunk of a cell: the function
 * `int __nbf_launch_<TAG>(void)` each worker calls, which makes the
 * launched call once and turns its result into the worker's exit code.
 *
 * The call is compiled against its function's real declaration (earlier
 * cells' prelude), at the cell's %launch line and column, so a wrong
 * argument is a CompileError there, before anything is forked; argument
 * type mismatches that C only warns about (-Wint-conversion,
 * -Wincompatible-pointer-types, -Wimplicit-function-declaration) are
 * errors in the thunk. The call appears once in the thunk, so each
 * diagnostic appears once.
 *
 * What a launched function may return: `void` (the worker exits 0) or an
 * integer type, enum or bool (0 = success; non-zero is the worker's
 * exit code, as from main). Any other return type (double, a pointer, a
 * struct) is a CompileError naming the type, not a silent conversion.
 */
#ifndef EX_LAUNCH_THUNK_H
#define EX_LAUNCH_THUNK_H

#include <stddef.h>

#include "ex_split.h"
#include "nbf_buf.h"

typedef struct ex_cell_state ex_cell_state_t;

/* Where the %launch call stands: its text (`f(a, b)`), the cell's label
 * (`cell[3]`), the line (1-based; 0 = unknown: diagnostics then say
 * `%launch:1`) and column (bytes, 1-based) of the call in the cell. */
typedef struct {
  const char *call;
  const char *label;
  int line, col;
} ex_launch_site_t;

/* Append the thunk to src; `tag` is the text standing for the unit's tag
 * in symbol names. The function's declaration is looked up in `cell`
 * (the %launch cell's own code, split) first, then in earlier cells. 0; or -1 with the reason in
 * err (the launched function's return type is neither void nor an integer type, known from its
 * declaration in an earlier cell), nothing appended; or -2 when memory ran out. */
int ex_launch_thunk(const ex_cell_state_t *st, const ex_split_t *cell, const ex_launch_site_t *site,
                    int cxx, const char *tag, nbf_buf_t *src, char *err, size_t errlen);

#endif
