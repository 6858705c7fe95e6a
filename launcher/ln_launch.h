/*
 * ln_launch — fork training workers from the executor and watch them:
 * the C counterpart of Accelerate's `notebook_launcher` (which starts
 * torch elastic's `start_processes` with start_method="fork").
 *
 * The calling process must be single-threaded (the executor is): fork()
 * copies only the calling thread, and a lock held by another thread would
 * stay locked forever in the workers. ln_launch checks it (the fork guard:
 * /proc/self/task) and refuses with a LaunchError. The rendezvous store
 * thread is started after the fork and stopped before any re-fork.
 *
 * Error discipline of the launcher (how errors travel):
 * - What the user sees leaves through ONE place: ln_launch's ln_error_t,
 *   which the executor turns into the cell's `error` message. Its ename
 *   says who is to blame: LaunchError (a check before forking or the
 *   group's setup failed: evalue says what, traceback what to do),
 *   WorkerFailed (a worker's exit code or signal, with its stderr tail),
 *   KeyboardInterrupt. Option errors come from ln_options_parse as text
 *   in the caller's buffer (jansson style) and become a LaunchError too.
 * - Inside the launcher, functions return 0 / -1 with errno set (system
 *   calls: ln_worker_start) or a result enum (ln_run_group's
 *   ln_run_result_t), and hand any text up as a malloc'd string
 *   (`char **setup_error`, `char **failures`) that the level above puts
 *   into the ln_error_t; nothing below ln_launch prints an error itself.
 * - Workers report on their own stderr; the launcher keeps its last
 *   LN_TAIL_LINES lines for the WorkerFailed traceback.
 * - errno text comes from NBF_STRERROR (strerror_r), never strerror.
 */
#ifndef LN_LAUNCH_H
#define LN_LAUNCH_H

#include <signal.h>
#include <stddef.h>

#include "ln_options.h"

/* The worker's body: what the launch cell's call expression compiles to.
 * A non-zero return is that worker's failure. */
typedef int (*ln_entry_fn)(void);

typedef struct {
  /* Forward one event line from a worker's display channel (a JSON
   * object, no newline) to the kernel. NULL = drop. */
  int (*send_event)(const char *line, size_t len);
  /* Set to non-zero by the caller's SIGINT handler: stop the workers. */
  volatile sig_atomic_t *interrupted;
  /* Execution count of the cell that first initialized CUDA in this
   * process, or 0 when none did (checked by the caller after each cell). */
  int cuda_initialized_by_cell;
  /* Descriptors of the caller that workers must not keep (the kernel's
   * request pipe): replaced by /dev/null in each worker. */
  const int *private_fds;
  int nprivate;
  /* Set to non-zero by the caller's SIGQUIT handler (`nbfork launch`):
   * print where every rank is on stderr, then clear it. NULL = never. */
  volatile sig_atomic_t *status_requested;
  /* A file kept current with where every rank is (the SIGQUIT view):
   * rewritten (write, then rename) every LN_STATUS_EVERY_MS while a
   * group runs and at each SIGQUIT, removed when the group ends. NULL =
   * none. %launch: <work directory>/ranks-status. */
  const char *status_file;
  /* Who initialized CUDA in this process, when known ("cell [3], line
   * 2: it called gpu_setup() of libgpuinit.so, whose ... called
   * cuInit"): the refusal names it instead of the cell alone. NULL =
   * cuda_initialized_by_cell only. */
  const char *cuda_initialized_by;
} ln_context_t;

typedef struct {
  char ename[32];  /* "LaunchError", "WorkerFailed", "KeyboardInterrupt" */
  char *evalue;    /* one line; caller frees                              */
  char *traceback; /* lines separated by '\n'; caller frees (may be NULL) */
} ln_error_t;

/* Run `fn` in o->num_processes forked workers and wait for them.
 * Prints "Launching training on N GPUs." / "... N CPU processes." first.
 * Returns 0 when every worker exited 0; otherwise -1 with `err` filled:
 * LaunchError (a check before forking failed: what and what to do),
 * WorkerFailed (rank, pid, exit code or signal, last stderr lines, after
 * restarts ran out), KeyboardInterrupt (interrupted; workers stopped and
 * reaped). Never returns with a worker alive or unreaped. */
int ln_launch(const ln_options_t *o, ln_entry_fn fn, ln_context_t *ctx, ln_error_t *err);

/* The checks ln_launch makes before it forks (CUDA initialized here,
 * threads, GPUs, the store's port, ACCELERATE_DEBUG_MODE's test launch),
 * and the open-store warning: 0 with *use_gpu set (GPUs visible), or -1
 * with `err` filled (LaunchError). `%ranks start` forks after the same
 * checks (ln_ranks.h). */
int ln_launch_check(const ln_options_t *o, ln_context_t *ctx, int *use_gpu, ln_error_t *err);

void ln_error_free(ln_error_t *err);

/* Is TCP `port` free to bind on `addr` (the store's check, node_rank 0)?
 * Returns 0 when free, else the errno of the failed bind (EADDRINUSE),
 * or EADDRNOTAVAIL when addr does not resolve. */
int ln_port_check(const char *addr, int port);

/* The number of threads of the calling process (entries of
 * /proc/self/task), or -1 when /proc cannot be read. */
int ln_thread_count(void);

/* 1 when ACCELERATE_DEBUG_MODE is true (1, true, yes, on, y, any case),
 * 0 when unset or false (0, false, no, off, n), -1 for anything else. */
int ln_debug_mode(void);

#endif
