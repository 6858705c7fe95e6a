/*
 * ex_timeit — the timing of `%timeit [-n N] [-r R] STATEMENT`, as
 * IPython's %timeit does it (IPython/core/magics/execution.py): R runs
 * (default 7) of N loops each; N, when not given, is the first of 1, 2,
 * 5, 10, 20, 50, ... whose run takes at least 0.2 s. Reported: the mean
 * and standard deviation over the runs of the time per loop.
 */
#ifndef EX_TIMEIT_H
#define EX_TIMEIT_H

#include <signal.h>
#include <stddef.h>

#include "ex_result.h"

typedef struct {
  double mean_s;  /* mean over the runs of (run time / loops), seconds */
  double stdev_s; /* their standard deviation (population, as numpy's std) */
  long loops;     /* loops per run */
  int runs;       /* runs made */
} ex_timeit_result_t;

/* `loop(n)` runs the statement n times. `loops` <= 0: choose as above.
 * Blocks for the whole measurement. EX_OK, or EX_ERR_INTERRUPTED when
 * *interrupted became set (it stopped early; r holds the runs made so
 * far). `interrupted` may be NULL. */
ex_result_t ex_timeit_run(void (*loop)(long), long loops, int repeat,
                          volatile sig_atomic_t *interrupted, ex_timeit_result_t *r);

/* "1.23 µs ± 45.6 ns per loop (mean ± std. dev. of 7 runs, 100,000 loops
 * each)" into buf (IPython's wording and 3 significant digits). */
void ex_timeit_format(const ex_timeit_result_t *r, char *buf, size_t n);

/* %time: the times of one call of `loop(1)`, seconds. */
typedef struct {
  double user_s, sys_s; /* CPU time of this process (getrusage RUSAGE_SELF) */
  double wall_s;
} ex_time_result_t;

/* Run loop(1) once, timed. Blocks while it runs. */
void ex_time_once(void (*loop)(long), ex_time_result_t *r);

/* IPython's %time lines (IPython/core/magics/execution.py, Linux):
 * "CPU times: user 1.2 ms, sys: 0 ns, total: 1.2 ms\nWall time: 1.5 ms". */
void ex_time_format(const ex_time_result_t *r, char *buf, size_t n);

#endif
