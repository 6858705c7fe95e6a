/*
 * ex_compile — run the system C compiler (or nvcc) on a generated unit
 * (ex_run.c loads the result; ex_diag.h turns the diagnostics into what
 * the user sees).
 *
 * The compiler runs as a child process (fork + exec; the executor is
 * single-threaded so this is safe) with its diagnostics captured, never
 * shown on the executor's stderr. Shared objects are named by the unit's
 * tag in the work directory, written to a temporary name and renamed, so
 * an unchanged cell reuses its object without compiling (compile cache).
 */
#ifndef EX_COMPILE_H
#define EX_COMPILE_H

#include <signal.h>

#include "ex_result.h"

typedef struct {
  const char *cc;                     /* C compiler: NBFORK_CC or "cc"                    */
  const char *nvcc;                   /* CUDA compiler: see ex_compile_find_nvcc; NULL =
                                         none found                                       */
  const char *incdir;                 /* directory holding nbfork.h                       */
  const char *libdir;                 /* directory holding libnbfork.so                   */
  const char *workdir;                /* where sources and objects go                     */
  const char *cflags;                 /* C cells: NBFORK_CFLAGS/default, then %cflags     */
  const char *nvccflags;              /* %%cuda cells: NBFORK_NVCCFLAGS or "-O2"        */
  const char *ldflags;                /* %ldflags (words), both kinds of cells            */
  const char *memsyms;                /* linker script giving the addresses of variables of
                                         cells in memory (ex_memcells.h), or NULL        */
  volatile sig_atomic_t *interrupted; /* set by SIGINT: stop the compiler  */
  int tinycc;                         /* 1: try TinyCC first (ex_jit_cell_so), a
                                         straight-line C cell, default flags;
                                         2: TinyCC only (a unit generated for
                                         it): EX_ERR_COMPILE, no diagnostics,
                                         when it declines */
  int in_memory;                      /* TinyCC's object will be bound by ex_memcells
                                         (dlsym), not dlopen(): no libc in its link */
} ex_toolchain_t;

/* Compile `source` (C, or CUDA when cuda != 0) into WORKDIR/cell_TAG.so.
 * Quoted includes are searched in the current directory (the notebook's)
 * too, then in incdir (nbfork.h). Blocks until the compiler exits.
 * An object that already exists for `tag` is reused without compiling
 * (the compile cache), and the warnings its compile gave are given again
 * (kept beside it as cell_TAG.warnings). With tc->tinycc, TinyCC compiles the unit in this
 * process when it accepts it without a diagnostic (ex_jit.h); else, and
 * always for CUDA, the system compiler does. Results:
 *   EX_OK              *so_path set (caller frees); *diag may hold warnings
 *   EX_ERR_COMPILE     the compiler rejected the code; *diag = its output
 *   EX_ERR_INTERRUPTED *tc->interrupted became set while the compiler ran
 *                      (its process group is killed; nothing is kept)
 *   EX_ERR_USAGE       %cflags/%ldflags/NBFORK_NVCCFLAGS do not parse
 *   EX_ERR_SYSTEM      a system failure (write, pipe, fork; the compiler
 *                      could not be run; no nvcc for a CUDA cell)
 *   EX_ERR_NOMEM       out of memory
 * On every failure but EX_ERR_INTERRUPTED *diag (caller frees) says what
 * failed, unless memory ran out before it could. There is no limit on the
 * number of flag words. */
ex_result_t ex_compile(const ex_toolchain_t *tc, const char *source, const char *tag, int cuda,
                       char **so_path, char **diag);

/* The CUDA compiler to use (caller frees), or NULL: NBFORK_NVCC if set,
 * else `nvcc` on PATH, else $CUDA_HOME/bin/nvcc, else
 * /usr/local/cuda/bin/nvcc (where the toolkit installs it without putting
 * it on PATH). */
char *ex_compile_find_nvcc(void);

#endif
