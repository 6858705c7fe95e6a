/*
 * ln_group.c — one run of a node's worker group: fork, host the
 * rendezvous store (node_rank 0), forward output, reap, stop on failure.
 */
#define _GNU_SOURCE
#include "ln_group.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acc_store.h"
#include "ln_rdzv.h"
#include "ln_worker.h"
#include "nbf_util.h"

/* Time a worker gets between SIGTERM and SIGKILL when the group stops. */
#define LN_GRACE_MS 1000
/* After every worker exited, how long to wait for output still in pipes. */
#define LN_DRAIN_MS 1000

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Where the store binds: the master address when it is a local loopback
 * name, every interface otherwise (other nodes must reach it). */
static const char *store_bind_addr(const char *master_addr) {
  if (!strcmp(master_addr, "127.0.0.1") || !strcmp(master_addr, "localhost"))
    return "127.0.0.1";
  return "*";
}

/* Stop the group: TERM now, KILL those still alive after the grace. */
static void signal_group(ln_worker_t *w, int n, int sig) {
  for (int i = 0; i < n; i++)
    if (w[i].pid > 0 && !w[i].exited) {
      kill(-w[i].pid, sig);
      kill(w[i].pid, sig);
    }
}

/* One run of the worker group: fork, host the store, monitor until all
 * exited. Fills `failures` (text) on LN_RUN_FAILED. */
ln_run_result_t ln_run_group(const ln_options_t *o, ln_entry_fn fn, ln_context_t *ctx, int restart,
                             int use_gpu, char **failures, char **setup_error) {
  int n = o->num_processes;
  ln_worker_t *w = calloc((size_t)n, sizeof *w);
  if (!w) {
    *setup_error = nbf_xprintf("out of memory");
    return LN_RUN_SETUP_FAILED;
  }
  ln_worker_env_t env = {o, restart, use_gpu, ctx->private_fds, ctx->nprivate};
  ln_run_result_t result = LN_RUN_OK;
  int started = 0;
  for (int i = 0; i < n; i++) {
    if (ln_worker_start(&w[i], i, &env, fn, w, i) != 0) {
      *setup_error = nbf_xprintf("cannot start worker %d: %s", i, strerror(errno));
      result = LN_RUN_SETUP_FAILED;
      break;
    }
    started++;
  }
  acc_store_server_t *srv = NULL;
  if (result == LN_RUN_OK && o->node_rank == 0) {
    char serr[256] = "";
    srv = acc_store_server_start_secure(store_bind_addr(o->master_addr), o->use_port,
                                        o->rdzv_secret, serr, sizeof serr);
    if (!srv) {
      *setup_error = nbf_xprintf("cannot host the rendezvous store at %s:%d: %s", o->master_addr,
                                o->use_port, serr);
      result = LN_RUN_SETUP_FAILED;
    }
  }
  double stop_at = -1, drain_until = -1;
  int stopping = result != LN_RUN_OK;
  if (stopping) {
    signal_group(w, started, SIGTERM);
    stop_at = now_ms();
  }
  struct pollfd *pfd = calloc((size_t)started * 4 + 1, sizeof *pfd);
  ln_worker_t **owner = calloc((size_t)started * 4 + 1, sizeof *owner);
  int *which = calloc((size_t)started * 4 + 1, sizeof *which);
  ln_rdzv_t rdzv;
  ln_rdzv_begin(&rdzv, o, restart);
  int monitor_ms = (int)(o->monitor_interval_s * 1000);
  if (monitor_ms < 1)
    monitor_ms = 1;
  for (;;) {
    int np = 0, alive = 0;
    for (int i = 0; i < started; i++) {
      if (!w[i].exited)
        alive++;
      for (int s = 0; s < 3; s++)
        if (w[i].fd[s] >= 0) {
          pfd[np] = (struct pollfd){w[i].fd[s], POLLIN, 0};
          owner[np] = &w[i];
          which[np++] = s;
        }
      if (!w[i].exited && w[i].pidfd >= 0) {
        pfd[np] = (struct pollfd){w[i].pidfd, POLLIN, 0};
        owner[np] = &w[i];
        which[np++] = -1; /* exit: reaped below */
      }
    }
    if (!alive && (np == 0 || (drain_until >= 0 && now_ms() > drain_until)))
      break;
    if (!alive && drain_until < 0)
      drain_until = now_ms() + LN_DRAIN_MS;
    int pr = poll(pfd, (nfds_t)np, monitor_ms);
    if (pr > 0) {
      for (int k = 0; k < np; k++)
        if (which[k] >= 0 && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
          ln_worker_read(owner[k], which[k], ctx->send_event);
    }
    for (int i = 0; i < started; i++)
      ln_worker_flush_stale(&w[i]);
    /* reap */
    for (int i = 0; i < started; i++) {
      if (w[i].exited)
        continue;
      int st;
      pid_t r = waitpid(w[i].pid, &st, WNOHANG);
      if (r != w[i].pid)
        continue;
      w[i].exited = 1;
      w[i].status = st;
      int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (bad && !stopping) {
        w[i].failed = 1; /* the cause, not a victim of the stop */
        result = LN_RUN_FAILED;
        stopping = 1;
        stop_at = now_ms();
        signal_group(w, started, SIGTERM);
      }
    }
    if (!stopping && result == LN_RUN_OK && ln_rdzv_poll(&rdzv, setup_error) != 0) {
      result = LN_RUN_SETUP_FAILED; /* a node did not join in time */
      stopping = 1;
      stop_at = now_ms();
      signal_group(w, started, SIGTERM);
    }
    if (ctx->interrupted && *ctx->interrupted && !stopping) {
      result = LN_RUN_INTERRUPTED;
      stopping = 1;
      stop_at = now_ms();
      signal_group(w, started, SIGTERM);
    }
    if (stopping && stop_at >= 0 && now_ms() - stop_at > LN_GRACE_MS) {
      signal_group(w, started, SIGKILL);
      stop_at = -1; /* KILL sent once; reaping follows */
    }
  }
  /* every worker is reaped here; close what the drain left open */
  for (int i = 0; i < started; i++)
    ln_worker_close(&w[i]);
  ln_rdzv_end(&rdzv); /* its client's threads go before any re-fork */
  acc_store_server_stop(&srv);
  if (result == LN_RUN_FAILED) {
    size_t cap = 0;
    FILE *f = open_memstream(failures, &cap);
    if (f) {
      for (int i = 0; i < started; i++)
        if (w[i].failed)
          ln_worker_describe(&w[i], o->node_rank * o->num_processes + i, f);
      fclose(f);
    }
  }
  for (int i = 0; i < n; i++)
    ln_worker_free(&w[i]);
  free(w);
  free(pfd);
  free(owner);
  free(which);
  return result;
}
