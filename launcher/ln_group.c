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
#include "ln_worker.h"
#include "nbf_cluster.h"
#include "nbf_proc.h"
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
  ln_leftovers_t left; /* what the workers started (ln_leftover.h)     */
  int64_t started_ms; /* for "left N s into the run"                   */
} ln_group_t;

/* Stop the group: TERM now (nbf_proc_term), KILL (nbf_proc_kill) those
 * still alive after the grace. The workers are many and the monitor must
 * keep forwarding their output, so the grace is timed by group_monitor
 * rather than by a blocking nbf_proc_stop. */
static void signal_group(ln_worker_t *w, int n, void (*send)(pid_t)) {
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
static void group_stop(ln_group_t *g, ln_run_result_t why) {
  if (g->stopping)
    return;
  g->result = why;
  g->stopping = 1;
  g->stop_at_ms = nbf_now_ms();
  if (why == LN_RUN_FAILED)
    mark_stopped(g);
  signal_group(g->w, g->started, nbf_proc_term);
}

static int group_alloc(ln_group_t *g, const ln_options_t *o, ln_context_t *ctx) {
  memset(g, 0, sizeof *g);
  g->o = o;
  g->ctx = ctx;
  g->result = LN_RUN_OK;
  g->stop_at_ms = g->drain_until_ms = -1;
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
  if (o->node_rank != 0)
    return;
  char serr[256] = "";
  /* loopback only when every rank is here; other nodes must reach it */
  const char *bind = nbf_loopback_name(o->master_addr) ? "127.0.0.1" : "*";
  *srv = acc_store_server_start_secure(bind, o->use_port, o->rdzv_secret,
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

/* Reap the workers that exited. Every exit of one pass is collected
 * before anything is stopped, so that a worker reaped in the pass is
 * never taken for a victim of a SIGTERM the pass itself sent: all the
 * non-zero exits and signals of the first failing pass are failures (the
 * report orders them: group_failures); later ones are victims of the
 * stop. A worker that exits 0 is no failure, but its exit time is kept:
 * a rank that returned while its peers were still in collectives is
 * what made them fail, and the report leads with it. */
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
    if (g->stopping && g->stop_at_ms >= 0 && nbf_now_ms() - g->stop_at_ms > LN_GRACE_MS) {
      signal_group(g->w, g->started, nbf_proc_kill);
      g->stop_at_ms = -1; /* KILL sent once; reaping follows */
    }
  }
  ln_rdzv_end(&rdzv); /* its client's threads go before any re-fork */
}

/* Which failed worker the report names first: one found stopped (the
 * others failed waiting for it), then the earlier; at the same time a
 * signal (a crash, a kill from outside), which is a cause, before an exit
 * code, often a peer's consequence; then the lower rank. */
static int failure_before(const ln_worker_t *a, const ln_worker_t *b) {
  if ((a->stopped_by != 0) != (b->stopped_by != 0))
    return a->stopped_by != 0;
  int sa = WIFSIGNALED(a->status), sb = WIFSIGNALED(b->status);
  if (a->exited_ms != b->exited_ms)
    return a->exited_ms < b->exited_ms;
  if (sa != sb)
    return sa;
  return a->local_rank < b->local_rank;
}

/* Whether a failed worker's stderr tail says it lost its connection to
 * global rank `rank` (the runtime's words, acc_gloo.cc). */
static int peer_blames(const ln_group_t *g, int rank) {
  char needle[64];
  snprintf(needle, sizeof needle, "the connection to rank %d was lost", rank);
  for (int i = 0; i < g->started; i++)
    for (int l = 0; g->w[i].failed && l < LN_TAIL_LINES; l++)
      if (g->w[i].tail[l] && strstr(g->w[i].tail[l], needle))
        return 1;
  return 0;
}

/* Whether every failed worker's stderr tail has the runtime's line of a
 * collective that lost a peer (acc_gloo.cc): then every failure is a
 * consequence, and the cause is a rank that did not fail. */
static int all_lost_a_peer(const ln_group_t *g) {
  int any = 0;
  for (int i = 0; i < g->started; i++) {
    if (!g->w[i].failed)
      continue;
    int lost = 0;
    for (int l = 0; l < LN_TAIL_LINES && !lost; l++)
      lost = g->w[i].tail[l] && !strncmp(g->w[i].tail[l], "nbfork: rank ", 13) &&
             (strstr(g->w[i].tail[l], "lost its connection to a peer") ||
              strstr(g->w[i].tail[l], "was lost (rank "));
    if (!lost)
      return 0;
    any = 1;
  }
  return any;
}

/* The rank that left its peers in the middle of their collectives: a
 * worker that exited 0 while the group ran and that a failed peer's
 * error names as the connection it lost; or, when every failed worker
 * lost a peer without naming it (more than two ranks), the first that
 * exited 0 no later than the first failure. Exit order alone cannot
 * tell: a peer that ignores its failed final barrier exits 0 too, often
 * before the rank whose failure broke it is reaped. NULL when none. */
static const ln_worker_t *first_leaver(const ln_group_t *g, const ln_worker_t *first_failed) {
  const ln_worker_t *leaver = NULL;
  int base = g->o->node_rank * g->o->num_processes;
  int consequences = first_failed && all_lost_a_peer(g);
  for (int i = 0; i < g->started; i++) {
    const ln_worker_t *w = &g->w[i];
    if (!w->exited || w->failed || !WIFEXITED(w->status) || WEXITSTATUS(w->status) != 0)
      continue;
    if (!peer_blames(g, base + w->local_rank) &&
        !(consequences && w->exited_ms <= first_failed->exited_ms))
      continue;
    if (!leaver || w->exited_ms < leaver->exited_ms)
      leaver = w;
  }
  return leaver;
}

/* A worker that exited 0 before the first failure (or in its reap pass)
 * without a peer naming it: said after the failures, as a possible cause. */
static const ln_worker_t *early_exit(const ln_group_t *g, const ln_worker_t *first_failed) {
  const ln_worker_t *early = NULL;
  for (int i = 0; first_failed && i < g->started; i++) {
    const ln_worker_t *w = &g->w[i];
    if (w->exited && !w->failed && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0 &&
        w->exited_ms <= first_failed->exited_ms && (!early || w->exited_ms < early->exited_ms))
      early = w;
  }
  return early;
}

/* A failed worker lost its connection to a rank of another node: that
 * rank's node reports why it left. -1 when none. */
static int remote_loss(const ln_group_t *g) {
  int base = g->o->node_rank * g->o->num_processes;
  int world = g->o->num_nodes * g->o->num_processes;
  for (int r = 0; r < world; r++)
    if ((r < base || r >= base + g->o->num_processes) && peer_blames(g, r))
      return r;
  return -1;
}

/* The failure report: the nodes this one cannot reach (`lost`, from
 * ln_probe_lost_nodes, or NULL), the rank that left first (when one did),
 * then one ln_worker_describe per failed worker, the first cause first.
 * Its first line is the WorkerFailed summary (ln_launch.c). */
static char *group_failures(const ln_group_t *g, const char *lost) {
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  if (lost)
    fputs(lost, f);
  int base = g->o->node_rank * g->o->num_processes;
  const ln_worker_t **order = calloc((size_t)g->started + 1, sizeof *order);
  int n = 0;
  for (int i = 0; order && i < g->started; i++)
    if (g->w[i].failed) {
      int j = n++;
      for (; j > 0 && failure_before(&g->w[i], order[j - 1]); j--)
        order[j] = order[j - 1];
      order[j] = &g->w[i];
    }
  const ln_worker_t *leaver = first_leaver(g, n ? order[0] : NULL);
  int remote = leaver ? -1 : remote_loss(g);
  if (remote >= 0)
    fprintf(f,
            "rank %d (node %d) was lost first: the failure%s below lost the connection to it (it "
            "exited or failed on node %d: see that node's error)\n",
            remote, remote / g->o->num_processes, n > 1 ? "s" : "", remote / g->o->num_processes);
  if (leaver)
    fprintf(f,
            "rank %d (local rank %d, pid %d) left first: it exited with code 0 (it returned or "
            "called exit(0)) %.2f s into the run, while its peers were still in collectives: "
            "the failure%s below lost %s connection to %s (see why rank %d returned early)\n",
            base + leaver->local_rank, leaver->local_rank, (int)leaver->pid,
            (leaver->exited_ms - g->started_ms) / 1000.0, n > 1 ? "s" : "",
            n > 1 ? "their" : "its",
            peer_blames(g, base + leaver->local_rank) ? "it" : "a peer, and no other rank had left",
            base + leaver->local_rank);
  for (int k = 0; k < n; k++)
    ln_worker_describe(order[k], base + order[k]->local_rank, f);
  const ln_worker_t *early = leaver ? NULL : early_exit(g, n ? order[0] : NULL);
  if (early)
    fprintf(f,
            "rank %d (local rank %d, pid %d) had exited with code 0 %.2f s into the run, before "
            "or with the failure above: if it returned while its peers were still in "
            "collectives, their collectives failed because of it\n",
            base + early->local_rank, early->local_rank, (int)early->pid,
            (early->exited_ms - g->started_ms) / 1000.0);
  free(order);
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
  free(lost);
  ln_run_result_t result = g.result;
  group_free(&g);
  return result;
}
