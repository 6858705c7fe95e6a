/*
 * ex_compile — run the system C compiler (or nvcc) on a generated unit and
 * load the result.
 *
 * The compiler runs as a child process (fork + exec; the executor is
 * single-threaded so this is safe) with its diagnostics captured, never
 * shown on the executor's stderr. Shared objects are named by the unit's
 * tag in the work directory, written to a temporary name and renamed, so
 * an unchanged cell reuses its object without compiling (compile cache).
 */
#ifndef EX_COMPILE_H
#define EX_COMPILE_H

typedef struct {
  const char *cc;      /* C compiler: NBFORK_CC or "cc"                    */
  const char *nvcc;    /* CUDA compiler: NBFORK_NVCC or nvcc on PATH/NULL   */
  const char *incdir;  /* directory holding nbfork.h                       */
  const char *libdir;  /* directory holding libnbfork.so                   */
  const char *workdir; /* where sources and objects go                     */
  const char *cflags;  /* NBFORK_CFLAGS/default, then %cflags (words)       */
  const char *ldflags; /* %ldflags (words)                                 */
} ex_toolchain_t;

/* Compile `source` (C, or CUDA when cuda != 0) into WORKDIR/cell_TAG.so.
 * Returns 0 with *so_path set (caller frees), 1 when the compiler rejected
 * the code (*diag = its diagnostics, caller frees), or -1 on a system
 * failure (*diag says which call failed and why). *diag may also be set
 * on success (warnings). */
int ex_compile(const ex_toolchain_t *tc, const char *source, const char *tag, int cuda,
               char **so_path, char **diag);

/* The first "error:" line of compiler diagnostics, trimmed, for a
 * one-line summary (caller frees). */
char *ex_compile_summary(const char *diag);

#endif
