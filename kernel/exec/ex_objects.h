/*
 * ex_objects — the cells' shared objects the executor keeps loaded, and
 * the unloading of those nothing can refer to any more, so a long
 * notebook neither slows down nor runs out of memory maps (issue 13):
 * every object loaded RTLD_GLOBAL is searched by each later cell's
 * symbol lookups, and each one costs several memory maps
 * (vm.max_map_count, 65530 by default).
 *
 * An object is unloaded (dlclose) when both hold:
 *  - no definition of the registry (ex_cell_state) names it any more:
 *    every function and global it defined was redefined by a later cell
 *    (or it defined none);
 *  - nothing can point into it except through its symbols: it is a C
 *    cell without %launch or %timeit, without function definitions, and
 *    its text has no string literal, no `&`, no `[`, no `static`, no
 *    `__func__` and no macro (a registry macro, or an all-capitals name
 *    other than NULL) that could hide one (ex_objects_may_unload).
 * References through symbols are safe without more: when a later cell's
 * object binds to a symbol of an earlier one, glibc records the
 * dependency and keeps the earlier object mapped until the later one is
 * closed (its "relocation dependencies"), so a function compiled earlier
 * keeps calling the version it was compiled against.
 */
#ifndef EX_OBJECTS_H
#define EX_OBJECTS_H

#include <stddef.h>

#include "ex_cell.h"

typedef struct ex_objects ex_objects_t;

/* NULL when out of memory. */
ex_objects_t *ex_objects_new(void);

/* dlclose nothing (the process ends); free the table. NULL-safe; clears
 * the caller's pointer. */
void ex_objects_destroy(ex_objects_t **o_p);

/* May the object of unit `u` (cell text `code`, `launch`/`timeit`: the
 * cell has a %launch call or a %timeit loop) be unloaded once nothing
 * names it? See the rules above. */
int ex_objects_may_unload(const ex_cell_state_t *st, const ex_cell_unit_t *u, const char *code,
                          int launch, int timeit);

/* Keep `handle` (from dlopen; one reference) of the unit tagged `tag`.
 * 0, or -1 when out of memory (the object then stays loaded for good). */
int ex_objects_add(ex_objects_t *o, void *handle, const char *tag, int may_unload);

/* dlclose each kept object marked may_unload whose tag no definition of
 * `st` names. Returns how many were closed. Call between cells only:
 * never while a cell's code runs. */
size_t ex_objects_sweep(ex_objects_t *o, const ex_cell_state_t *st);

/* Objects kept loaded now. */
size_t ex_objects_count(const ex_objects_t *o);

#endif
