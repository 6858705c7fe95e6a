/*
 * ex_memcells — straight-line cells TinyCC compiled into memory instead of
 * a shared object each (issue 20, item 7: 20,000 cells must not approach
 * vm.max_map_count; a dlopen()ed object costs ~3 maps, a cell here none:
 * its code and data go into one large RWX arena, 64 MiB per map).
 *
 * Such a cell goes through ex_jit_cell_so as every TinyCC cell does (its
 * shared object is written and passes the relocation check: the safety
 * net), then that object is copied into the arena and relocated there
 * (ex_jit_dll_load) instead of dlopen()ed; the file stays as the compile
 * cache's record. Nothing names its variables as dynamic symbols, so later cells
 * reach them by address:
 *  - TinyCC units through ex_cell_state_indirect's pointers, which hold
 *    the address as a constant (ex_cell_state_place puts it in the
 *    registry);
 *  - system-compiled units through the linker script this module keeps
 *    (`PROVIDE(v__cTAG = 0x...);` for every such variable, passed to each
 *    link: ld defines only the names the object uses, as absolute symbols).
 * The addresses are this process's: an identity of the process
 * (ex_memcells_hash, fixed once the first variable is published) enters
 * every unit's salt, so no object linked against them is reused by
 * another executor, while a re-run in this one finds its object again. Forked workers (%launch,
 * %ranks) inherit the arena at the same addresses; while %ranks workers run (they load each new
 * cell's object by path) cells keep to shared objects (ex_run.c).
 */
#ifndef EX_MEMCELLS_H
#define EX_MEMCELLS_H

#include <stddef.h>
#include <stdint.h>

#include "ex_cell.h"

typedef struct ex_memcells ex_memcells_t;

typedef struct {
  char tag[17];
  void (*run)(void);
  int (*launch)(void); /* NULL without %launch */
  size_t nvars;
  char **names; /* the C names of the variables it defined */
  void **addrs;
  size_t *sizes;
  int published; /* its variables are in the linker script */
} ex_memcell_t;

/* `workdir` holds the linker script. NULL when out of memory. */
ex_memcells_t *ex_memcells_new(const char *workdir);
void ex_memcells_destroy(ex_memcells_t **m_p);

/* The cell compiled into memory under `tag` (a re-run), or NULL. */
const ex_memcell_t *ex_memcells_find(const ex_memcells_t *m, const char *tag);

/* Compile unit `u` (TinyCC wrote and checked its object at `dll_path`)
 * into memory. The cell, or NULL when TinyCC declined or memory ran out
 * (then load `dll_path` instead). */
const ex_memcell_t *ex_memcells_load(ex_memcells_t *m, const ex_cell_unit_t *u,
                                     const char *dll_path);

/* After ex_cell_commit of the cell: its variables' addresses into the
 * registry and the linker script. 0, or -1 (a write failed: later cells
 * naming them cannot link). */
int ex_memcells_publish(ex_memcells_t *m, const ex_memcell_t *c, ex_cell_state_t *st);

/* The linker script's path, or NULL while no variable is in memory. */
const char *ex_memcells_script(const ex_memcells_t *m);

/* This process's identity once the script has a line (0 before). */
uint64_t ex_memcells_hash(const ex_memcells_t *m);

/* Cells in memory, and the bytes their arena holds (for tests, benches). */
size_t ex_memcells_count(const ex_memcells_t *m);
size_t ex_memcells_bytes(const ex_memcells_t *m);

#endif
