/*
 * ln_launch.c — checks, fork of the worker group, output forwarding,
 * failure propagation, restarts and interrupts.
 *
 * Behaviour follows torch elastic's local agent as Accelerate's
 * notebook_launcher uses it (static rendezvous, start_method="fork"): one
 * worker group per node; any worker failure stops the whole group, which
 * restarts while max_restarts allows. Unlike it, a failure is reported with
 * the rank, pid, signal or exit code and the last lines of the worker's
 * stderr, and stopping never waits on a worker blocked in a collective
 * (SIGTERM to its process group, SIGKILL after LN_GRACE_MS).
 */
#define _GNU_SOURCE
#include "ln_launch.h"

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ln_cuda.h"
#include "ln_debug.h"
#include "ln_group.h"
#include "nbf_cluster.h"
#include "nbf_param.h"
#include "nbf_util.h"

static void set_error(ln_error_t *err, const char *ename, char *evalue, char *traceback) {
  snprintf(err->ename, sizeof err->ename, "%s", ename);
  err->evalue = evalue ? evalue : strdup("(out of memory)");
  err->traceback = traceback;
}

void ln_error_free(ln_error_t *err) {
  free(err->evalue);
  free(err->traceback);
  err->evalue = err->traceback = NULL;
}

int ln_debug_mode(void) {
  int on = 0;
  return nbf_param_bool_strict(NBF_P_ACCELERATE_DEBUG_MODE, &on) != 0 ? -1 : on;
}

/* Binding the port ourselves is the only answer that holds (connect()
 * would miss a port bound but not listening). */
int ln_port_check(const char *addr, int port) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(addr, ps, &hints, &res) != 0 || !res)
    return EADDRNOTAVAIL;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = 0;
  if (fd < 0)
    rc = errno;
  else {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0)
      rc = errno;
    close(fd);
  }
  freeaddrinfo(res);
  return rc;
}

int ln_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

/* CUDA initialized in this process: forked workers could not use it. */
static int check_cuda(const ln_context_t *ctx, ln_error_t *err) {
  int cell = ctx->cuda_initialized_by_cell;
  if (cell <= 0)
    return 0;
  char cellname[32];
  snprintf(cellname, sizeof cellname, "cell [%d]", cell);
  const char *by = ctx->cuda_initialized_by ? ctx->cuda_initialized_by : cellname;
  set_error(err, "LaunchError",
            nbf_xprintf("CUDA was initialized in the kernel process by %s; workers forked "
                        "now could not use the GPU (every CUDA call would fail with "
                        "'initialization error').",
                        by),
            nbf_xprintf("To fix it: restart the kernel, move the CUDA calls of cell [%d] into the "
                        "launched function (or a function it calls), and run the cells again.",
                        cell));
  return -1;
}

/* The fork guard: fork() copies only the calling thread, so a lock that
 * another thread holds at that moment (malloc's, stdio's, OpenMP's or
 * BLAS's pool) stays locked forever in every worker, which then hangs. */
static int check_threads(ln_error_t *err) {
  int n = ln_thread_count();
  if (n <= 1)
    return 0; /* single-threaded (or /proc unreadable: nothing to say) */
  set_error(err, "LaunchError",
            nbf_xprintf("the kernel process runs %d threads (a cell started OpenMP, BLAS or its "
                        "own threads); forking workers from a multi-threaded process can "
                        "deadlock them.",
                        n),
            nbf_xprintf("To fix it: end the threads the earlier cells started (pthread_join them; "
                        "keep OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1 in the kernel, or "
                        "start threaded work inside the launched function), or restart the "
                        "kernel; then run %%launch again."));
  return -1;
}

/* num_processes must not exceed the visible GPUs (NCCL: one rank, one GPU). */
static int check_gpus(const ln_options_t *o, int gpus, ln_error_t *err) {
  if (gpus <= 0 || o->num_processes <= gpus)
    return 0;
  set_error(err, "LaunchError",
            nbf_xprintf("num_processes=%d but only %d GPU%s visible: NCCL refuses two ranks on "
                        "one GPU.",
                        o->num_processes, gpus, gpus == 1 ? " is" : "s are"),
            nbf_xprintf("Use num_processes=%d or fewer, or make more GPUs visible "
                        "(CUDA_VISIBLE_DEVICES).",
                        gpus));
  return -1;
}

/* node_rank 0 hosts the store on use_port: say now when it cannot. A
 * master_addr that does not resolve is named as such, on every node (it
 * would show as a port that cannot be bound, or a store that never answers). */
static int check_port(const ln_options_t *o, ln_error_t *err) {
  int gai = nbf_resolve(o->master_addr);
  if (gai) {
    set_error(err, "LaunchError",
              nbf_xprintf("master_addr=%s does not resolve: %s.", o->master_addr,
                          gai_strerror(gai)),
              nbf_xprintf("Give node 0's IP address as master_addr, or a name this machine "
                          "resolves."));
    return -1;
  }
  int e = o->node_rank == 0 ? ln_port_check(o->master_addr, o->use_port) : 0;
  if (!e)
    return 0;
  set_error(err, "LaunchError",
            nbf_xprintf("use_port=%d on %s cannot be used for the rendezvous store: %s.",
                        o->use_port, o->master_addr, NBF_STRERROR(e)),
            e == EADDRINUSE
                ? nbf_xprintf("Another process holds port %d; pass another port, e.g. "
                              "use_port=%d, or stop that process.",
                              o->use_port, o->use_port == 65535 ? 29501 : o->use_port + 1)
                : nbf_xprintf("Check master_addr: on node_rank 0 it must be an "
                              "address of this machine."));
  return -1;
}

/* ACCELERATE_DEBUG_MODE: a test launch before the real one. */
static int check_debug_launch(const ln_options_t *o, ln_context_t *ctx, int use_gpu,
                              ln_error_t *err) {
  int mode = ln_debug_mode();
  if (mode < 0) {
    set_error(err, "LaunchError",
              nbf_xprintf("ACCELERATE_DEBUG_MODE='%s' is not one of " NBF_BOOL_WORDS,
                          nbf_param_raw(NBF_P_ACCELERATE_DEBUG_MODE)),
              nbf_xprintf("Set it to one of these, or unset it (off)."));
    return -1;
  }
  if (!mode)
    return 0;
  char *diag = NULL;
  if (ln_debug_check(o, ctx, use_gpu, &diag) == 0) {
    free(diag);
    return 0;
  }
  set_error(err, "LaunchError",
            nbf_xprintf("ACCELERATE_DEBUG_MODE: the test launch of %d workers failed before "
                        "training started.",
                        o->num_processes),
            diag);
  return -1;
}

/* WorkerFailed: the first line of the failure report is the summary. */
static void set_worker_failed(const ln_options_t *o, char *failures, ln_error_t *err) {
  char *summary = NULL;
  if (failures) {
    char *nl = strchr(failures, '\n');
    summary = nl ? strndup(failures, (size_t)(nl - failures)) : strdup(failures);
  }
  char *tb = nbf_xprintf("%sThe other workers were stopped.%s", failures ? failures : "",
                         o->max_restarts ? " Restarts are used up." : "");
  free(failures);
  set_error(err, "WorkerFailed", summary ? summary : strdup("a worker failed"), tb);
}

/* Run the group, again after each failure while max_restarts allows. */
static int run_with_restarts(const ln_options_t *o, ln_entry_fn fn, ln_context_t *ctx, int use_gpu,
                             ln_error_t *err) {
  for (int restart = 0;; restart++) {
    if (restart > 0) {
      printf("restart %d/%d: starting the worker group again\n", restart, o->max_restarts);
      fflush(stdout);
    }
    char *failures = NULL, *setup_error = NULL;
    ln_run_result_t r = ln_run_group(o, fn, ctx, restart, use_gpu, &failures, &setup_error);
    if (r != LN_RUN_FAILED && r != LN_RUN_INTERRUPTED)
      free(failures);
    if (r != LN_RUN_SETUP_FAILED)
      free(setup_error);
    switch (r) {
    case LN_RUN_OK:
      return 0;
    case LN_RUN_INTERRUPTED:
      set_error(err, "KeyboardInterrupt",
                nbf_xprintf("the launch was interrupted: all %d workers were stopped and reaped",
                            o->num_processes),
                failures); /* where each rank was, or NULL */
      return -1;
    case LN_RUN_SETUP_FAILED:
      set_error(err, "LaunchError", setup_error, NULL);
      return -1;
    case LN_RUN_FAILED:
      break;
    }
    if (restart >= o->max_restarts) {
      set_worker_failed(o, failures, err);
      return -1;
    }
    fprintf(stderr, "%s", failures ? failures : "");
    fflush(stderr);
    free(failures);
  }
}

/* Node 0's store listens on every interface unless master_addr is
 * 127.0.0.1/localhost (ln_group.c): without a secret, anyone who can
 * reach the port can read and write the rendezvous. Said once per launch,
 * on stderr, before anything starts. */
static void warn_open_store(const ln_options_t *o) {
  if (o->node_rank != 0 || o->rdzv_secret[0] || nbf_loopback_name(o->master_addr))
    return;
  fprintf(stderr,
          "Warning: the rendezvous store listens on every interface (port %d, master_addr=%s) "
          "without a secret: any host that reaches it can join or disturb this launch. Pass "
          "rdzv_conf=secret=... (the same on every node) or set NBFORK_RDZV_SECRET.\n",
          o->use_port, o->master_addr);
  fflush(stderr);
}

int ln_launch_check(const ln_options_t *o, ln_context_t *ctx, int *use_gpu, ln_error_t *err) {
  memset(err, 0, sizeof *err);
  int gpus = ln_cuda_visible_gpus();
  *use_gpu = gpus > 0;
  if (check_cuda(ctx, err) || check_threads(err) || check_gpus(o, gpus, err) ||
      check_port(o, err) || check_debug_launch(o, ctx, *use_gpu, err))
    return -1;
  warn_open_store(o);
  return 0;
}

int ln_launch(const ln_options_t *o, ln_entry_fn fn, ln_context_t *ctx, ln_error_t *err) {
  int use_gpu = 0;
  if (ln_launch_check(o, ctx, &use_gpu, err))
    return -1;
  if (o->quiet)
    ; /* the command line's -q: the workers' output only */
  else if (use_gpu)
    printf("Launching training on %d GPU%s.\n", o->num_processes, o->num_processes == 1 ? "" : "s");
  else
    printf("Launching training on %d CPU process%s.\n", o->num_processes,
           o->num_processes == 1 ? "" : "es");
  fflush(stdout);
  return run_with_restarts(o, fn, ctx, use_gpu, err);
}
