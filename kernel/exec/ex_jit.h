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
 * cells that hold nothing but the %launch line (a cell that also defines
 * things must become a shared object later cells link against), for C
 * (not %%cuda), and for compiler flags it can mirror: -I -D -U are passed
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

typedef int (*ex_jit_launch_fn)(void);

/* The launch thunk `launch_symbol` of `source` (the unit ex_cell_generate
 * made, tag `tag`) compiled in memory, or NULL when the fast path does not
 * apply or TinyCC declined: then compile with ex_compile as usual.
 * `incdir` holds nbfork.h; `cflags` are the words the system compiler
 * would get. A thunk stays loaded for the executor's lifetime (the same
 * tag is found again without compiling; workers forked later inherit
 * it). */
ex_jit_launch_fn ex_jit_launch(const char *source, const char *tag, const char *launch_symbol,
                               const char *incdir, const char *cflags);

/* 1 when this executor was built with libtcc and NBFORK_JIT is not 0. */
int ex_jit_enabled(void);

#endif
