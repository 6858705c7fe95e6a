/*
 * ln_group.c — one run of a node's worker group: fork, host the
 * rendezvous store (node_rank 0), forward output, reap, stop on failure.
 */
#define _GNU_SOURCE
#include "ln_group.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_store.h"
#include "ln_rdzv.h"
#include "ln_worker.h"
#include "nbf_util.h"

/* Time a worker gets between SIGTERM and SIGKILL when the group stops. */
#define LN_GRACE_MS 1000
/* After every worker exited, how long to wait for output still in pipes. */
#define LN_DRAIN_MS 1000

/* One run of the group, as the monitor loop sees it. */
typedef struct {
  const ln_options_t *o;
  ln_context_t *ctx;
  ln_worker_t *w;     /* o->num_processes slots                        */
  int started;        /* workers forked                                */
  struct pollfd *pfd; /* per poll: 3 pipes + the pidfd of each worker  */
  ln_worker_t **owner;
  int *which; /* stream of pfd[k], or -1 for the pidfd         */
  ln_run_result_t result;
  int stopping;       /* SIGTERM was sent to the group                 */
  int64_t stop_at_ms; /* when; -1 once SIGKILL followed                */
  int64_t drain_until_ms;
} ln_group_t;

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

/* A worker stopped by a signal (SIGSTOP, SIGTSTP, a debugger's) when
 * the group fails is why its peers timed out: mark it as a cause, with
 * the stop signal, before the stop kills it. WNOWAIT leaves the stop to
 * be seen again; nothing else waits for stops. */
static void mark_stopped(ln_group_t *g) {
  for (int i = 0; i < g->started; i++) {
    ln_worker_t *w = &g->w[i];
    siginfo_t si = {0};
    if (w->exited || waitid(P_PID, (id_t)w->pid, &si, WSTOPPED | WNOHANG | WNOWAIT) != 0)
      continue;
    if (si.si_pid == w->pid && si.si_code == CLD_STOPPED) {
      w->stopped_by = si.si_status;
      w->failed = 1;
    }
  }
}

/* The first cause of a stop wins; the workers get SIGTERM once, and
 * SIGCONT after it: a stopped worker would hold a TERM pending (and its
 * port, memory, GPU) until the KILL after the grace time. */
static void group_stop(ln_group_t *g, ln_run_result_t why) {
  if (g->stopping)
    return;
  g->result = why;
  g->stopping = 1;
  g->stop_at_ms = nbf_now_ms();
  if (why == LN_RUN_FAILED)
    mark_stopped(g);
  signal_group(g->w, g->started, SIGTERM);
  signal_group(g->w, g->started, SIGCONT);
}

static int group_alloc(ln_group_t *g, const ln_options_t *o, ln_context_t *ctx) {
  memset(g, 0, sizeof *g);
  g->o = o;
  g->ctx = ctx;
  g->result = LN_RUN_OK;
  g->stop_at_ms = g->drain_until_ms = -1;
  size_t n = (size_t)o->num_processes, npoll = n * 4 + 1;
  g->w = calloc(n, sizeof *g->w);
  g->pfd = calloc(npoll, sizeof *g->pfd);
  g->owner = calloc(npoll, sizeof *g->owner);
  g->which = calloc(npoll, sizeof *g->which);
  if (!g->w || !g->pfd || !g->owner || !g->which)
    return -1;
  for (int i = 0; i < o->num_processes; i++)
    ln_worker_init(&g->w[i], i);
  return 0;
}

static void group_free(ln_group_t *g) {
  if (g->w)
    for (int i = 0; i < g->o->num_processes; i++)
      ln_worker_free(&g->w[i]);
  free(g->w);
  free(g->pfd);
  free(g->owner);
  free(g->which);
}

/* Fork the workers, then (node_rank 0) host the store. A failure stops
 * the workers already started. */
static void group_start(ln_group_t *g, ln_entry_fn fn, int restart, int use_gpu, char **setup_error,
                        acc_store_server_t **srv) {
  const ln_options_t *o = g->o;
  ln_worker_env_t env = {o, restart, use_gpu, g->ctx->private_fds, g->ctx->nprivate};
  for (int i = 0; i < o->num_processes; i++) {
    if (ln_worker_start(&g->w[i], i, &env, fn, g->w, i) != 0) {
      *setup_error = nbf_xprintf("cannot start worker %d: %s", i, NBF_STRERROR(errno));
      group_stop(g, LN_RUN_SETUP_FAILED);
      return;
    }
    g->started++;
  }
  if (o->node_rank != 0)
    return;
  char serr[256] = "";
  *srv = acc_store_server_start_secure(store_bind_addr(o->master_addr), o->use_port, o->rdzv_secret,
                                       serr, sizeof serr);
  if (!*srv) {
    *setup_error = nbf_xprintf("cannot host the rendezvous store at %s:%d: %s", o->master_addr,
                               o->use_port, serr);
    group_stop(g, LN_RUN_SETUP_FAILED);
  }
}

/* Fill the poll set: every open pipe, and the pidfd of each live worker.
 * Returns the number of entries; *alive the workers not yet reaped. */
static int group_pollset(ln_group_t *g, int *alive) {
  int np = 0;
  *alive = 0;
  for (int i = 0; i < g->started; i++) {
    ln_worker_t *w = &g->w[i];
    if (!w->exited)
      (*alive)++;
    for (int s = 0; s < 3; s++)
      if (w->fd[s] >= 0) {
        g->pfd[np] = (struct pollfd){w->fd[s], POLLIN, 0};
        g->owner[np] = w;
        g->which[np++] = s;
      }
    if (!w->exited && w->pidfd >= 0) {
      g->pfd[np] = (struct pollfd){w->pidfd, POLLIN, 0};
      g->owner[np] = w;
      g->which[np++] = -1; /* exit: reaped below */
    }
  }
  return np;
}

/* Reap the workers that exited; the first failure (not a victim of a
 * stop already under way) stops the group. */
static void group_reap(ln_group_t *g) {
  for (int i = 0; i < g->started; i++) {
    ln_worker_t *w = &g->w[i];
    int st;
    if (w->exited || waitpid(w->pid, &st, WNOHANG) != w->pid)
      continue;
    w->exited = 1;
    w->status = st;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !g->stopping) {
      w->failed = 1; /* the cause, not a victim of the stop */
      group_stop(g, LN_RUN_FAILED);
    }
  }
}

/* Forward output, reap, watch the rendezvous and the interrupt flag
 * until every worker is reaped and its pipes drained (or the drain time
 * ran out). */
static void group_monitor(ln_group_t *g, int restart, char **setup_error) {
  ln_rdzv_t rdzv;
  ln_rdzv_begin(&rdzv, g->o, restart);
  int monitor_ms = (int)(g->o->monitor_interval_s * 1000);
  if (monitor_ms < 1)
    monitor_ms = 1;
  for (;;) {
    int alive, np = group_pollset(g, &alive);
    if (!alive && (np == 0 || (g->drain_until_ms >= 0 && nbf_now_ms() > g->drain_until_ms)))
      break;
    if (!alive && g->drain_until_ms < 0)
      g->drain_until_ms = nbf_now_ms() + LN_DRAIN_MS;
    if (poll(g->pfd, (nfds_t)np, monitor_ms) > 0)
      for (int k = 0; k < np; k++)
        if (g->which[k] >= 0 && (g->pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
          ln_worker_read(g->owner[k], g->which[k], g->ctx->send_event);
    for (int i = 0; i < g->started; i++)
      ln_worker_flush_stale(&g->w[i]);
    group_reap(g);
    if (!g->stopping && ln_rdzv_poll(&rdzv, setup_error) != 0)
      group_stop(g, LN_RUN_SETUP_FAILED); /* a node did not join in time */
    if (g->ctx->interrupted && *g->ctx->interrupted)
      group_stop(g, LN_RUN_INTERRUPTED);
    if (g->stopping && g->stop_at_ms >= 0 && nbf_now_ms() - g->stop_at_ms > LN_GRACE_MS) {
      signal_group(g->w, g->started, SIGKILL);
      g->stop_at_ms = -1; /* KILL sent once; reaping follows */
    }
  }
  ln_rdzv_end(&rdzv); /* its client's threads go before any re-fork */
}

/* The failure report: one ln_worker_describe per failed worker. */
static char *group_failures(const ln_group_t *g) {
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  /* a stopped worker first: the others failed waiting for it */
  for (int stopped = 1; stopped >= 0; stopped--)
    for (int i = 0; i < g->started; i++)
      if (g->w[i].failed && (g->w[i].stopped_by != 0) == stopped)
        ln_worker_describe(&g->w[i], g->o->node_rank * g->o->num_processes + i, f);
  fclose(f);
  return text;
}

ln_run_result_t ln_run_group(const ln_options_t *o, ln_entry_fn fn, ln_context_t *ctx, int restart,
                             int use_gpu, char **failures, char **setup_error) {
  ln_group_t g;
  if (group_alloc(&g, o, ctx) != 0) {
    group_free(&g);
    *setup_error = nbf_xprintf("out of memory for %d workers", o->num_processes);
    return LN_RUN_SETUP_FAILED;
  }
  acc_store_server_t *srv = NULL;
  group_start(&g, fn, restart, use_gpu, setup_error, &srv);
  group_monitor(&g, restart, setup_error);
  /* every worker is reaped here; close what the drain left open */
  for (int i = 0; i < g.started; i++)
    ln_worker_close(&g.w[i]);
  acc_store_server_stop(&srv);
  if (g.result == LN_RUN_FAILED)
    *failures = group_failures(&g);
  ln_run_result_t result = g.result;
  group_free(&g);
  return result;
}
