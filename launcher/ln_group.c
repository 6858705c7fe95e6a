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
#include "ln_leftover.h"
#include "ln_probe.h"
#include "ln_rdzv.h"
#include "ln_report.h"
#include "ln_worker.h"
#include "nbf_cluster.h"
#include "nbf_param.h"
#include "nbf_proc.h"
#include "nbf_util.h"

/* Time a worker gets between SIGTERM and SIGKILL when the group stops. */
#define LN_GRACE_MS 1000
/* How often ctx->status_file is rewritten while a group runs. */
#define LN_STATUS_EVERY_MS 1000
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
  ln_leftovers_t left; /* what the workers started (ln_leftover.h)     */
  int64_t started_ms; /* for "left N s into the run"                   */
  int64_t seen_ms;    /* when the records were read into w[i].seen      */
  int leaving;        /* local rank whose early leave stopped the group, or -1 */
  int64_t status_ms;  /* when ctx->status_file was last written            */
} ln_group_t;

/* Stop the group: TERM now (nbf_proc_term), KILL (nbf_proc_kill) those
 * still alive after the grace. The workers are many and the monitor must
 * keep forwarding their output, so the grace is timed by group_monitor
 * rather than by a blocking nbf_proc_stop. */
void ln_group_signal(ln_worker_t *w, int n, void (*send)(pid_t)) {
  for (int i = 0; i < n; i++)
    if (w[i].pid > 0 && !w[i].exited)
      send(w[i].pid);
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
/* Read every worker's state record into w[i].seen: where each rank was
 * at this moment (the report's positions). */
static void group_read_states(ln_group_t *g) {
  g->seen_ms = nbf_now_ms();
  for (int i = 0; i < g->started; i++)
    g->w[i].seen_ok = nbf_rankstate_read(g->w[i].rs, &g->w[i].seen) == 0;
}

static void group_stop(ln_group_t *g, ln_run_result_t why) {
  if (g->stopping)
    return;
  group_read_states(g); /* before the stop changes anything */
  g->result = why;
  g->stopping = 1;
  g->stop_at_ms = nbf_now_ms();
  if (why == LN_RUN_FAILED)
    mark_stopped(g);
  ln_group_signal(g->w, g->started, nbf_proc_term);
}

static int group_alloc(ln_group_t *g, const ln_options_t *o, ln_context_t *ctx) {
  memset(g, 0, sizeof *g);
  g->o = o;
  g->ctx = ctx;
  g->result = LN_RUN_OK;
  g->stop_at_ms = g->drain_until_ms = -1;
  g->leaving = -1;
  g->started_ms = nbf_now_ms();
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
  if (o->node_rank == 0 && ln_group_host_store(o, srv, setup_error) != 0)
    group_stop(g, LN_RUN_SETUP_FAILED);
}

int ln_group_host_store(const ln_options_t *o, acc_store_server_t **srv, char **setup_error) {
  char serr[256] = "";
  /* loopback only when every rank is here; other nodes must reach it */
  const char *bind = nbf_loopback_name(o->master_addr) ? "127.0.0.1" : "*";
  *srv = acc_store_server_start_secure(bind, o->use_port, o->rdzv_secret,
                                       serr, sizeof serr);
  if (*srv)
    return 0;
  *setup_error = nbf_xprintf("cannot host the rendezvous store at %s:%d: %s", o->master_addr,
                             o->use_port, serr);
  return -1;
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

/* Reap the workers that exited. Every exit of one pass is collected
 * before anything is stopped, so that a worker reaped in the pass is
 * never taken for a victim of a SIGTERM the pass itself sent. Failures:
 * every non-zero exit and signal of the first failing pass, and every
 * non-zero exit code after it (a worker the stop's SIGTERM or SIGKILL
 * ended dies of that signal: an exit code is the worker's own end, e.g.
 * a collective that failed at the same time). The report orders them by
 * what their records say (group_failures). A worker that exits 0 is no
 * failure, but its exit time is kept for the report. */
static void group_reap(ln_group_t *g) {
  int failing = 0, was_stopping = g->stopping;
  int64_t now = nbf_now_ms();
  for (int i = 0; i < g->started; i++) {
    ln_worker_t *w = &g->w[i];
    int st;
    if (w->exited || waitpid(w->pid, &st, WNOHANG) != w->pid)
      continue;
    w->exited = 1;
    w->status = st;
    w->exited_ms = now;
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && was_stopping)
      w->failed = 1; /* its own end, not the stop's signal */
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !was_stopping) {
      w->failed = 1; /* a cause (or a peer's first consequence), not a victim of the stop */
      failing = 1;
    }
  }
  if (failing)
    group_stop(g, LN_RUN_FAILED);
}

/* Wait up to ms on the np descriptors group_pollset set and forward the
 * output of those that are ready. */
static void group_forward(ln_group_t *g, int np, int ms) {
  if (poll(g->pfd, (nfds_t)np, ms) <= 0)
    return;
  for (int k = 0; k < np; k++)
    if (g->which[k] >= 0 && (g->pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
      ln_worker_read(g->owner[k], g->which[k], g->ctx->send_event);
}

/* Wait up to ms for worker output and forward it (ln_leftovers_stop's
 * pump: leftovers may still write into the workers' pipes). */
static void group_pump(void *arg, int ms) {
  ln_group_t *g = arg;
  int alive, np = group_pollset(g, &alive);
  if (np == 0) {
    usleep((useconds_t)ms * 1000); /* no pipe left to wait on: just wait */
    return;
  }
  group_forward(g, np, ms);
}

/* Every worker is reaped: stop and reap what they left running (each
 * worker's process group, then the orphans reparented to us), forwarding
 * their last output, and say how many there were. Once per run. */
static void group_end_leftovers(ln_group_t *g) {
  if (g->left.done)
    return;
  pid_t groups[g->started + 1];
  for (int i = 0; i < g->started; i++)
    groups[i] = g->w[i].pid;
  int n = ln_leftovers_stop(&g->left, groups, g->started, LN_GRACE_MS, 2000, group_pump, g);
  if (n > 0) {
    printf("nbfork: stopped %d process%s that the workers had started and left running "
           "(SIGTERM, then SIGKILL after %d ms).\n",
           n, n == 1 ? "" : "es", LN_GRACE_MS);
    fflush(stdout);
  }
}

/* Where every rank is (ln_report_positions of the records last read),
 * as a string the caller frees; NULL when no record says anything. */
static char *group_positions(const ln_group_t *g, const char *title) {
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  ln_report_positions(g->w, g->started, g->o->node_rank * g->o->num_processes, g->seen_ms, title,
                      f);
  fclose(f);
  if (text && !*text) {
    free(text);
    text = NULL;
  }
  return text;
}

/* Replace ctx->status_file with `text` (write a sibling, then rename:
 * a reader never sees half a view). */
static void group_write_status(const ln_group_t *g, const char *text) {
  char *tmp = nbf_xprintf("%s.tmp", g->ctx->status_file);
  FILE *f = tmp ? fopen(tmp, "w") : NULL;
  if (f) {
    fputs(text, f);
    if (fclose(f) == 0)
      rename(tmp, g->ctx->status_file);
    else
      unlink(tmp);
  }
  free(tmp);
}

/* SIGQUIT (ctx->status_requested): print where every rank is now on
 * stderr, and go on; every LN_STATUS_EVERY_MS and at SIGQUIT, the same
 * view into ctx->status_file. */
static void group_status(ln_group_t *g) {
  int asked = g->ctx->status_requested && *g->ctx->status_requested;
  int64_t now = nbf_now_ms();
  int file_due = g->ctx->status_file && (asked || now - g->status_ms >= LN_STATUS_EVERY_MS);
  if (!asked && !file_due)
    return;
  if (asked)
    *g->ctx->status_requested = 0;
  group_read_states(g);
  char title[160];
  snprintf(title, sizeof title,
           "nbfork: where each rank is, %.1f s into the run (%s; their "
           "state records):",
           (double)(now - g->started_ms) / 1000.0,
           asked         ? "SIGQUIT"
           : g->stopping ? "stopping"
                         : "running");
  char *text = group_positions(g, title);
  if (!text)
    text = nbf_xprintf("%s\n  no rank has a state record yet (starting, or a program without "
                       "libnbfork)\n",
                       title);
  if (asked) {
    fprintf(stderr, "%s", text ? text : "");
    fflush(stderr);
  }
  if (file_due && text) {
    group_write_status(g, text);
    g->status_ms = now;
  }
  free(text);
}

/* A rank leaving its group while a peer waits in another collective
 * (ln_report_leaving) would hang them all until NBFORK_TIMEOUT_S: stop
 * the group as soon as the records show it (one monitor tick). */
static void group_watch_leaving(ln_group_t *g) {
  group_read_states(g);
  int waiter, i = ln_report_leaving(g->w, g->started, &waiter);
  if (i < 0)
    return;
  g->leaving = i;
  group_stop(g, LN_RUN_FAILED);
}

/* Forward output, reap, watch the rendezvous and the interrupt flag
 * until every worker is reaped and its pipes drained (or the drain time
 * ran out). */
static void group_monitor(ln_group_t *g, int restart, const acc_store_server_t *srv,
                          char **setup_error) {
  ln_rdzv_t rdzv;
  ln_rdzv_begin(&rdzv, g->o, restart, srv);
  int monitor_ms = (int)(g->o->monitor_interval_s * 1000);
  if (monitor_ms < 1)
    monitor_ms = 1;
  for (;;) {
    int alive, np = group_pollset(g, &alive);
    if (!alive && (np == 0 || (g->drain_until_ms >= 0 && nbf_now_ms() > g->drain_until_ms)))
      break;
    if (!alive && g->drain_until_ms < 0) {
      group_end_leftovers(g); /* they may hold the pipes open: before the drain */
      g->drain_until_ms = nbf_now_ms() + LN_DRAIN_MS;
    }
    group_forward(g, np, monitor_ms);
    for (int i = 0; i < g->started; i++)
      ln_worker_flush_stale(&g->w[i]);
    group_reap(g);
    if (!g->stopping && ln_rdzv_poll(&rdzv, setup_error) != 0)
      group_stop(g, LN_RUN_SETUP_FAILED); /* a node did not join in time */
    if (g->ctx->interrupted && *g->ctx->interrupted)
      group_stop(g, LN_RUN_INTERRUPTED);
    if (!g->stopping)
      group_watch_leaving(g);
    group_status(g);
    if (g->stopping && g->stop_at_ms >= 0 && nbf_now_ms() - g->stop_at_ms > LN_GRACE_MS) {
      ln_group_signal(g->w, g->started, nbf_proc_kill);
      g->stop_at_ms = -1; /* KILL sent once; reaping follows */
    }
  }
  ln_rdzv_end(&rdzv); /* its client's threads go before any re-fork */
  if (g->ctx->status_file) /* no group runs: no view that could be taken for current */
    unlink(g->ctx->status_file);
}

/* A worker exited 0 before the first failure (or in its reap pass),
 * for workers without a state record (a program that does not use
 * libnbfork): said after the failures, as a possible cause. */
static const ln_worker_t *early_exit(const ln_group_t *g, int64_t first_failed_ms) {
  const ln_worker_t *early = NULL;
  for (int i = 0; i < g->started; i++) {
    const ln_worker_t *w = &g->w[i];
    if (!w->rs && w->exited && !w->failed && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0 &&
        w->exited_ms <= first_failed_ms && (!early || w->exited_ms < early->exited_ms))
      early = w;
  }
  return early;
}

/* The first rank of another node that a failed rank's record says it
 * lost, or -1. */
static int remote_loss(const ln_group_t *g, const nbf_rankstate_t *const *fin) {
  int base = g->o->node_rank * g->o->num_processes;
  for (int i = 0; i < g->started; i++) {
    int p = fin[i] && g->w[i].failed && fin[i]->err_code ? fin[i]->err_peer : -1;
    if (p >= 0 && (p < base || p >= base + g->o->num_processes))
      return p;
  }
  return -1;
}

/* One cause of the report, as its class says. */
static void describe_cause(const ln_group_t *g, const ln_worker_t *w, ln_cause_t c, int first_left,
                           const nbf_rankstate_t *rec, FILE *f) {
  int base = g->o->node_rank * g->o->num_processes;
  if (c != LN_CAUSE_LEFT) {
    ln_worker_describe(w, base + w->local_rank, f);
    ln_report_record_line(rec, f);
    return;
  }
  char when[96];
  if (w->exited && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0)
    snprintf(when, sizeof when, "it exited with code 0 (it returned or called exit(0)) %.2f s",
             (double)(w->exited_ms - g->started_ms) / 1000.0);
  else /* still in acc_destroy's barrier when the group was stopped */
    snprintf(when, sizeof when, "it was leaving the group (acc_destroy) %.2f s",
             (double)(rec->phase_ms - g->started_ms) / 1000.0);
  fprintf(f,
          "rank %d (local rank %d, pid %d) %s: %s into the run, after %s #%llu, while its peers "
          "were still in collectives (see why rank %d returned early)\n",
          base + w->local_rank, w->local_rank, (int)w->pid,
          first_left ? "left first" : "also left early", when,
          nbf_rs_op_name(rec ? rec->done_op : 0), (unsigned long long)(rec ? rec->done_seq : 0),
          base + w->local_rank);
}

/* The failure report: the nodes this one cannot reach (`lost`, from
 * ln_probe_lost_nodes, or NULL); then every failed rank and every rank
 * that left early, each with its cause, in the order of ln_cause_t
 * (stopped, killed by a signal, its own failure, left early, lost a
 * peer), by global rank within a class; then where every rank was when
 * the group failed, naming the odd one. Its first line is the
 * WorkerFailed summary (ln_launch.c). The classes come from the exit
 * statuses and the ranks' state records, never from their output. */
static char *group_failures(const ln_group_t *g, const char *lost) {
  int n = g->started, base = g->o->node_rank * g->o->num_processes;
  nbf_rankstate_t fin_buf[n + 1];
  const nbf_rankstate_t *fin[n + 1];
  for (int i = 0; i < n; i++)
    fin[i] = nbf_rankstate_read(g->w[i].rs, &fin_buf[i]) == 0 ? &fin_buf[i] : NULL;
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  if (lost)
    fputs(lost, f);
  int remote = remote_loss(g, fin);
  if (remote >= 0)
    fprintf(f,
            "rank %d (node %d) was lost first: the failures below lost the connection to it (it "
            "exited or failed on node %d: see that node's error)\n",
            remote, remote / g->o->num_processes, remote / g->o->num_processes);
  int64_t first_failed_ms = INT64_MAX, first_left = 1;
  for (int c = LN_CAUSE_STOPPED; c < LN_CAUSE_NONE; c++)
    for (int i = 0; i < n; i++) {
      const ln_worker_t *w = &g->w[i];
      if (ln_report_cause(w, fin[i], fin, n, g->seen_ms) != (ln_cause_t)c)
        continue;
      describe_cause(g, w, (ln_cause_t)c, (int)first_left, fin[i], f);
      if (c == LN_CAUSE_LEFT)
        first_left = 0;
      if (w->failed && w->exited_ms < first_failed_ms)
        first_failed_ms = w->exited_ms;
    }
  if (g->leaving >= 0) {
    long t = 0;
    nbf_param_NBFORK_TIMEOUT_S(&t);
    fprintf(f,
            "nbfork stopped the group when rank %d's record showed it leaving: its peers would "
            "have waited in their collectives until NBFORK_TIMEOUT_S (%ld s)\n",
            base + g->leaving, t);
  }
  const ln_worker_t *early = first_left ? early_exit(g, first_failed_ms) : NULL;
  if (early)
    fprintf(f,
            "rank %d (local rank %d, pid %d) had exited with code 0 %.2f s into the run, before "
            "or with the failure above: if it returned while its peers were still in "
            "collectives, their collectives failed because of it\n",
            base + early->local_rank, early->local_rank, (int)early->pid,
            (early->exited_ms - g->started_ms) / 1000.0);
  ln_report_positions(g->w, n, base, g->seen_ms,
                      "Where each rank was when the group failed (their state records):", f);
  if (g->o->num_nodes > 1) /* records are per host: the others' are in their nodes' reports */
    fprintf(f,
            "  ranks of the other %d node%s: their records are on those nodes (see their "
            "reports); the probe: %s\n",
            g->o->num_nodes - 1, g->o->num_nodes == 2 ? "" : "s",
            lost ? "a node does not answer (first line)" : "every node answered");
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
  ln_leftovers_begin(&g.left);
  group_start(&g, fn, restart, use_gpu, setup_error, &srv);
  group_monitor(&g, restart, srv, setup_error);
  group_end_leftovers(&g); /* no-op unless the monitor ended before it */
  /* every worker is reaped here; close what the drain left open */
  for (int i = 0; i < g.started; i++)
    ln_worker_close(&g.w[i]);
  /* a node across a cut link or gone: said first, while node 0's store
   * still knows where its clients came from (ln_probe.h) */
  char *lost = g.result == LN_RUN_FAILED ? ln_probe_lost_nodes(o, srv) : NULL;
  acc_store_server_stop(&srv);
  if (g.result == LN_RUN_FAILED)
    *failures = group_failures(&g, lost);
  else if (g.result == LN_RUN_INTERRUPTED)
    *failures = group_positions(&g, "Where each rank was when interrupted (their state records):");
  free(lost);
  ln_run_result_t result = g.result;
  group_free(&g);
  return result;
}
