/*
 * ex_run — the cell runner of nbfork-executor: compile one cell's unit,
 * load it, run its statements with SIGINT able to cut them short, then
 * its %timeit loop or its %launch call. Process setup and the request
 * loop are in ex_main.c.
 *
 * Every ex_run_* that answers a request sends exactly one terminating
 * event (ex_events.h: execute_reply ok or error, with an ename such as
 * CompileError, LinkError, SystemError, KeyboardInterrupt) and returns
 * what sending it returned (0, or -1 when the kernel's pipe is gone).
 */
#ifndef EX_RUN_H
#define EX_RUN_H

#include <limits.h>
#include <signal.h>

#include "ex_cell.h"
#include "ex_compile.h"
#include "ex_magic.h"
#include "ex_objects.h"

/* Flags every C cell gets by default: calling an undeclared function is
 * an error (C99 dropped implicit declarations; the link would otherwise
 * fail later, or call it with the wrong types). */
#define EX_CFLAGS_ALWAYS "-Werror=implicit-function-declaration"

/* A function (or the cell's run function: its top-level statements)
 * with more statements than this compiles at -O1 instead of the default
 * -O2: GCC's optimizer grows faster than linearly with a function's size
 * (the 20,000 generated statements: 224 s at -O2; 20,000 lines
 * `a[i] = a[i-1] * 1.0001 + k;` on the 2-core reference machine: 38 s at
 * -O2, 23 s at -O1, 4 s at -O0). The user's -O in %cflags, or
 * NBFORK_CFLAGS, wins. */
#define EX_LARGE_FUNCTION_STATEMENTS 2000

/* The executor: everything that lives from one cell to the next. */
typedef struct {
  ex_cell_state_t *cells;
  ex_objects_t *objects; /* the cells' loaded shared objects (ex_objects.h) */
  ex_toolchain_t tc;
  ex_flags_t flags;
  char *base_cflags;  /* NBFORK_CFLAGS, or the default (ex_main.c setup) */
  int default_cflags; /* NBFORK_CFLAGS is not set */
  char workdir[PATH_MAX];
  int workdir_lock; /* flock()ed fd of workdir while this process lives (nbf_workdir.h) */
  char incdir[PATH_MAX];
  char libdir[PATH_MAX];
  int cuda_cell; /* execution count of the cell that initialized CUDA */
  char *cuda_by; /* who called cuInit (ex_cuda_hook_describe), or NULL; kept */
  char *nvcc;    /* CUDA compiler found at start, or NULL */
  struct ex_ranks *ranks; /* %ranks' workers and %%ranks cells (ex_ranks.h); NULL until used */
  const struct ex_run_ranks *ranks_hooks; /* set with `ranks` (ex_ranks.c); NULL: no ranks */
  struct ex_memcells *memcells; /* cells TinyCC compiled into memory (ex_memcells.h) */
} ex_t;

/* What the runner asks of the interactive ranks. ex_ranks.c stands above
 * this file (a %%ranks cell goes through ex_run_code) and registers these
 * in ex_t.ranks_hooks when it first keeps state; the runner calls them
 * only through that pointer, so it never names the layer above it.
 * (Each one is the ex_ranks_* function of that name, ex_ranks.h.) */
struct ex_run_ranks {
  int (*running)(const ex_t *ex);     /* rank workers are running */
  int (*cell_active)(const ex_t *ex); /* the cell being compiled is a %%ranks cell */
  /* run the loaded %%ranks cell on its ranks; sends the reply */
  int (*run_loaded)(ex_t *ex, int count, void (*run)(void));
  void (*loaded)(ex_t *ex, void (*run)(void)); /* an ordinary cell was loaded */
};

/* Install the SIGINT handler (see ex_run.c for what an interrupt does,
 * and its caveat). 0, or -1 with errno set. */
int ex_run_install_sigint(void);

/* The flag SIGINT sets: the compiler wait, %timeit and the launcher poll
 * it. Cleared at the start of each request (ex_run_clear_interrupt). */
volatile sig_atomic_t *ex_run_interrupt_flag(void);
void ex_run_clear_interrupt(void);

/* Compile, load and run one cell whose magic lines ex_magic_run already
 * handled (`m`); `count` is its execution count. Blocks until the cell's
 * statements (and %timeit or %launch) are done or interrupted. Sends the
 * reply; returns what sending it returned. */
int ex_run_code(ex_t *ex, const ex_magic_result_t *m, int count);

/* ex_flags_t.check for %cflags/%ldflags (ctx: the ex_t): compile and link
 * a trivial unit with the default flags plus these, through the system
 * compiler (blocks for that compile, ~50 ms). 0 when accepted, else -1
 * with the compiler's cleaned diagnostics in err. */
int ex_run_check_flags(void *ctx, const char *cflags, const char *ldflags, char *err,
                       size_t errlen);

#endif
