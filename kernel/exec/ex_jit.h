/*
 * ex_jit — compile a launch cell's thunk in memory with libtcc (TinyCC)
 * instead of running the system compiler.
 *
 * Why: for any unit that defines a function, GCC 12 spends ~10 ms just
 * initializing its RTL back end, and the driver, `as` and `ld` add as
 * much again: ~25-30 ms for the one-line thunk of `%launch f(...)`,
 * which was most of a first launch's cost (bench/launch_overhead.py;
 * torch's elastic_launch takes ~125 ms and the goal is a third of it).
 * libtcc compiles the same unit (nbfork.h, the prelude of earlier cells'
 * declarations, the thunk) in ~1.5 ms, in this process.
 *
 * The system compiler stays the judge. The fast path is taken only for
 * calls of a cell-defined function with scalar and pointer parameters
 * (ex_jit_simple_call), in cells that hold nothing but the %launch line
 * (a cell that also defines things must become a shared object later
 * cells link against), for C (not %%cuda), and for compiler flags it
 * can mirror: -I -D -U are passed
 * on, flags that only tune code generation or diagnostics (-O, -g, -W,
 * -march, -std=c../gnu..) are ignored, anything else sends the unit to
 * the system compiler. TinyCC runs with -Werror: any warning or error,
 * and any construct it lacks (_Complex, __int128, vector types), also
 * sends the unit to the system compiler, whose diagnostics and decisions
 * the user then sees, exactly as without the fast path.
 *
 * NBFORK_JIT=0 turns the fast path off. Built only where libtcc was found
 * (Debian: libtcc-dev and tcc); otherwise ex_jit_launch always declines.
 */
#ifndef EX_JIT_H
#define EX_JIT_H

#include "ex_cell.h"

typedef int (*ex_jit_launch_fn)(void);

/* Whether `call` (the text of `%launch CALL`) is NAME(ARGS) with NAME a
 * function earlier cells defined whose every parameter is a scalar, a
 * pointer or an enum. Only such calls take the fast path: TinyCC 0.9.27
 * passes a struct whose members need two register classes (say
 * `{int; double}`) differently from the x86-64 ABI GCC follows, and
 * `long double` is left to GCC too. Unknown type names count as structs. */
int ex_jit_simple_call(const ex_cell_state_t *st, const char *call);

/* The launch thunk `launch_symbol` of `source` (the unit ex_cell_generate
 * made for `%launch CALL` with the cells of `st`, tag `tag`) compiled in
 * memory, or NULL when the fast path does not apply (ex_jit_simple_call)
 * or TinyCC declined: then compile with ex_compile as usual.
 * `incdir` holds nbfork.h; `cflags` are the words the system compiler
 * would get. A thunk stays loaded for the executor's lifetime (the same
 * tag is found again without compiling; workers forked later inherit
 * it). */
ex_jit_launch_fn ex_jit_launch(const ex_cell_state_t *st, const char *call, const char *source,
                               const char *tag, const char *launch_symbol, const char *incdir,
                               const char *cflags);

/* 1 when this executor was built with libtcc and NBFORK_JIT is not 0. */
int ex_jit_enabled(void);

/*
 * Straight-line cells (ex_jit_cell.c). A cell with no function and no
 * loop is compiled at -O0 and run once; GCC spends ~25 ms on it (driver,
 * cc1's start, as, ld), TinyCC ~3 ms in this process. TinyCC writes the
 * same kind of shared object (TCC_OUTPUT_DLL: its variables exported
 * under their versioned names, later cells' GCC objects link against
 * them), which ex_run loads as any cell's. GCC stays the judge: any
 * TinyCC warning or error sends the cell to GCC; so does a cell whose
 * text could meet a difference between the two compilers' ABIs or
 * layouts (ex_jit_cell_safe). Used only with the default flags (no
 * NBFORK_CC, NBFORK_CFLAGS, %cflags, %ldflags); NBFORK_JIT=0 turns it
 * off with the launch thunks' fast path.
 */

/* Whether `code` (a cell's text) may be compiled by TinyCC, judged by
 * the declared types of what it names: no word of k_declined in
 * ex_jit_cell.c (struct, union, enum, attributes, _Alignas, complex,
 * atomic, thread-local, asm, __typeof__, _Generic, va_arg, libc's div
 * family), no `long double`, no quoted include or pragma; every variable
 * or typedef an earlier cell (`st`) defined that it names has a scalar
 * type (integers, float, double, pointers to them, arrays of them), every
 * such function takes and returns only those, every macro's body passes
 * the same test (three levels deep), and no enumerator of an earlier cell
 * appears; every unary minus (in the cell or such a macro) negates a
 * number or an earlier integer variable (TinyCC computes a floating `-x`
 * as `-0.0 - x`, which keeps a NaN's sign). Aggregates, function
 * pointers and types only an expression carries thus never reach TinyCC, whose psABI classes and
 * attributes differ from GCC's. */
int ex_jit_cell_safe(const ex_cell_state_t *st, const char *code);

/* Compile the unit `source` with TinyCC into the shared object `path`
 * (`incdir` holds nbfork.h). 0, or -1 when TinyCC is absent or off, gave
 * any diagnostic, could not write `path`, or wrote an object with a
 * dynamic relocation GCC's code would not have: a PLT slot for a symbol
 * that is not a function (TinyCC reaches an external object used as an
 * SSE/x87 operand, or whose address it takes, through one: issue 20's
 * class a) or any relocation type but GLOB_DAT, JUMP_SLOT, RELATIVE and
 * 64 (`path` is removed then): compile with the system compiler instead.
 * `dsos` (NULL-terminated, or NULL): shared objects to link, the
 * executor's libc.so.6 and libm.so.6 when the object will be dlopen()ed,
 * so that its references record their default symbol versions (without
 * one the loader binds the oldest: exec.difftest.g_versioned_libc_symbols);
 * NULL when ex_jit_dll_load binds it (dlsym gives the default versions). */
int ex_jit_cell_so(const char *source, const char *incdir, const char *path,
                   const char *const *dsos);

/* Load the shared object TinyCC wrote at `path` (which ex_jit_cell_so
 * accepted: its dynamic relocations are RELATIVE, GLOB_DAT, JUMP_SLOT of
 * functions and 64 only) into memory from alloc, without dlopen: its
 * segments copied at their offsets, the relocations applied as ld.so
 * would (the process's symbols through dlsym), DT_INIT run; addrs[i]
 * gets the address of symbol names[i] it defines (NULL names skipped).
 * One compile, no memory map of its own. 0, or -1 (an object it cannot
 * load this way: dlopen it instead). */
int ex_jit_dll_load(const char *path, void *(*alloc)(size_t, void *), void *ctx,
                    const char *const *names, void **addrs, size_t n);

/* The sizes (st_size) of the symbols names[0..n) that the shared object
 * at `path` defines, into sizes[]. 0, or -1 when one is missing. */
int ex_jit_dll_sizes(const char *path, const char *const *names, size_t *sizes, size_t n);

#endif
