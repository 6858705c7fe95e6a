/*
 * ln_ranks.c — persistent rank workers, the executor's side (ln_ranks.h):
 * start (ln_launch_check, ln_worker_start, the store of ln_group), one
 * exchange per command (send, then forward output and collect replies
 * until each rank answered or died), stop, status.
 */
#define _GNU_SOURCE
#include "ln_ranks.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_store.h"
#include "ln_group.h"
#include "ln_ranks_nodes.h"
#include "ln_ranks_wire.h"
#include "ln_rdzv.h"
#include "ln_report.h"
#include "ln_worker.h"
#include "nbf_proc.h"
#include "nbf_util.h"

/* A worker that has not answered an interrupt within this is killed. */
#define LN_RANKS_ANSWER_MS 1000
/* Between SIGTERM and SIGKILL when the ranks stop. */
#define LN_RANKS_GRACE_MS 1000

enum { RK_IDLE, RK_RUNNING, RK_DEAD };

struct ln_ranks {
  ln_options_t o;
  ln_context_t ctx;
  ln_ranks_hooks_t hooks;
  int n, first, restart, use_gpu;
  ln_worker_t *w;
  int *ctl;     /* the executor's end of each control channel, -1 closed */
  int *state;   /* RK_*                                                  */
  int *cell;    /* the cell it runs or ran last (0: none)               */
  int *died_in; /* the cell during which it died (0: between cells)     */
  acc_store_server_t *srv;
  /* the records as read when the last exchange was stopped (interrupt or
   * a rank's death), into w[i].seen: the failure report's positions */
  int64_t snap_ms;
  unsigned rebuild_epoch; /* the last acc_rebuild_process_groups epoch sent */
  int unmendable;         /* the last cut group could not be rebuilt        */
  /* several nodes (ln_ranks_nodes.h): the client of node 0's store, the
   * %%ranks cells sent so far (numbered alike on every node), the last
   * one that finished here, and why another node stopped the running one */
  ln_rk_nodes_t *nodes;
  int seq, seq_done, watch;
  char *remote;
};

/* One rank's answer to a command. */
typedef struct {
  int pending; /* sent, no reply yet           */
  int status;  /* LN_RK_*, or -1: the rank died */
  uint64_t arg;
  char *text;
} rk_answer_t;

/* For the worker's body (ln_worker_start takes no argument): set before
 * each fork, read in the child from its copy of memory. */
static ln_ranks_t *g_boot;
static int g_boot_fd, g_boot_n;

static int rank_main(void) {
  ln_ranks_worker_serve(g_boot_fd, g_boot->ctl, g_boot_n, &g_boot->hooks);
}

/* Display events: ln_worker_read calls back without the worker, so the
 * rank being read is noted here first. */
static ln_ranks_t *g_fwd;
static int g_fwd_rank;

static int forward_event(const char *line, size_t len) {
  if (!g_fwd || !g_fwd->hooks.send_event)
    return 0;
  return g_fwd->hooks.send_event(g_fwd_rank, line, len);
}

static void read_worker(ln_ranks_t *r, int i, int s) {
  g_fwd = r;
  g_fwd_rank = r->first + i;
  ln_worker_read(&r->w[i], s, forward_event);
  g_fwd = NULL;
}

static void set_error(ln_error_t *err, const char *ename, char *evalue, char *traceback) {
  snprintf(err->ename, sizeof err->ename, "%s", ename);
  err->evalue = evalue ? evalue : strdup("(out of memory)");
  err->traceback = traceback;
}

const ln_options_t *ln_ranks_options(const ln_ranks_t *r) {
  return &r->o;
}
int ln_ranks_restart_count(const ln_ranks_t *r) {
  return r->restart;
}
int ln_ranks_first(const ln_ranks_t *r) {
  return r->first;
}
int ln_ranks_count(const ln_ranks_t *r) {
  return r->n;
}
int ln_ranks_alive(const ln_ranks_t *r, int local) {
  return local >= 0 && local < r->n && r->state[local] != RK_DEAD;
}

/* Reap worker i if it exited: 1 when it is (now) dead. */
static int reap(ln_ranks_t *r, int i, int block) {
  ln_worker_t *w = &r->w[i];
  if (w->exited)
    return 1;
  int st;
  if (w->pid <= 0 || waitpid(w->pid, &st, block ? 0 : WNOHANG) != w->pid)
    return 0;
  w->exited = 1;
  w->status = st;
  w->exited_ms = nbf_now_ms();
  if (r->state[i] == RK_RUNNING)
    r->died_in[i] = r->cell[i];
  r->state[i] = RK_DEAD;
  if (r->ctl[i] >= 0) {
    close(r->ctl[i]);
    r->ctl[i] = -1;
  }
  return 1;
}

/* Wait up to ms for output, exits and (pending answers) replies; forward
 * the output. Fills pfd (3 pipes, pidfd and control per worker). */
static void pump(ln_ranks_t *r, rk_answer_t *ans, int ms, struct pollfd *pfd, int *who, int *what) {
  int np = 0;
  for (int i = 0; i < r->n; i++) {
    ln_worker_t *w = &r->w[i];
    for (int s = 0; s < 3; s++)
      if (w->fd[s] >= 0)
        pfd[np] = (struct pollfd){w->fd[s], POLLIN, 0}, who[np] = i, what[np++] = s;
    if (!w->exited && w->pidfd >= 0)
      pfd[np] = (struct pollfd){w->pidfd, POLLIN, 0}, who[np] = i, what[np++] = -1;
    if (ans && ans[i].pending && r->ctl[i] >= 0)
      pfd[np] = (struct pollfd){r->ctl[i], POLLIN, 0}, who[np] = i, what[np++] = -2;
  }
  if (np == 0 || poll(pfd, (nfds_t)np, ms) <= 0)
    return;
  for (int k = 0; k < np; k++) {
    if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    if (what[k] >= 0)
      read_worker(r, who[k], what[k]);
    else if (what[k] == -1)
      reap(r, who[k], 0);
  }
}

/* Read rank i's reply header and text (when `data` is NULL) or data. */
static int take_reply(ln_ranks_t *r, int i, rk_answer_t *a, void *(*dest)(void *, size_t),
                      void *dctx) {
  ln_rk_reply_t h;
  if (ln_rk_read_all(r->ctl[i], &h, sizeof h))
    return -1;
  a->pending = 0;
  a->status = (int)h.status;
  a->arg = h.len;
  void *to = NULL;
  if (h.status == LN_RK_OK && dest)
    to = dest(dctx, (size_t)h.len);
  else if (h.status != LN_RK_OK) {
    a->arg = h.arg;
    to = a->text = calloc(1, (size_t)h.len + 1);
  }
  if (to)
    return h.len ? ln_rk_read_all(r->ctl[i], to, (size_t)h.len) : 0;
  char buf[65536]; /* refused or out of memory: read and drop */
  for (uint64_t left = h.len; left;) {
    size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
    if (ln_rk_read_all(r->ctl[i], buf, k))
      return -1;
    left -= k;
  }
  if (h.status == LN_RK_OK && dest)
    a->status = LN_RK_MISMATCH; /* dest refused the bytes */
  return 0;
}

/* Flush every stream's complete lines and partial ones: one poll finds
 * the streams with output left (a worker wrote it before its reply), so
 * the empty ones cost no read. */
static void drain_output(ln_ranks_t *r) {
  struct pollfd pfd[3 * r->n + 1];
  int np = 0;
  for (int i = 0; i < r->n; i++)
    for (int s = 0; s < 3; s++)
      if (r->w[i].fd[s] >= 0)
        pfd[np++] = (struct pollfd){r->w[i].fd[s], POLLIN, 0};
  int ready = np ? poll(pfd, (nfds_t)np, 0) : 0;
  for (int i = 0, k = 0; i < r->n; i++) {
    for (int s = 0; s < 3; s++)
      if (r->w[i].fd[s] >= 0 && (ready < 0 || (pfd[k++].revents & (POLLIN | POLLHUP | POLLERR))))
        read_worker(r, i, s);
    ln_worker_flush_stale(&r->w[i]);
    ln_worker_flush_stale(&r->w[i]);
  }
}

/* Read every worker's record into w[i].seen (where each rank is now). */
static void snapshot(ln_ranks_t *r) {
  r->snap_ms = nbf_now_ms();
  for (int i = 0; i < r->n; i++)
    r->w[i].seen_ok = nbf_rankstate_read(r->w[i].rs, &r->w[i].seen) == 0;
}

/* SIGINT to the main thread of each pending rank (thread-directed: a
 * thread its cell started, Gloo's loop, must not take it). */
static void interrupt_pending(ln_ranks_t *r, rk_answer_t *ans) {
  for (int i = 0; i < r->n; i++)
    if (ans[i].pending && !r->w[i].exited)
      syscall(SYS_tgkill, r->w[i].pid, r->w[i].pid, SIGINT);
}

static int first_failure(const ln_ranks_t *r, const rk_answer_t *ans);

/* Several nodes: tell the others that this node stopped the cell (a
 * rank died, or an interrupt), so that they stop theirs. */
static void tell_nodes_stop(ln_ranks_t *r, const rk_answer_t *ans) {
  int i = first_failure(r, ans); /* the cause first: a crash before its echoes */
  if (i >= 0) {
    int st = r->w[i].status;
    char *why = WIFSIGNALED(st)
                    ? nbf_xprintf("rank %d (node %d, pid %d) was killed by signal %d (SIG%s)",
                                  r->first + i, r->o.node_rank, (int)r->w[i].pid, WTERMSIG(st),
                                  sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?")
                    : nbf_xprintf("rank %d (node %d, pid %d) exited with code %d", r->first + i,
                                  r->o.node_rank, (int)r->w[i].pid, WEXITSTATUS(st));
    ln_rk_nodes_stop(r->nodes, r->seq, 'F', why ? why : "a rank died");
    free(why);
    return;
  }
  char why[64];
  snprintf(why, sizeof why, "node %d was interrupted", r->o.node_rank);
  ln_rk_nodes_stop(r->nodes, r->seq, 'I', why);
}

/* Whether every rank of this node that died, died of a failed collective
 * (an echo: it lost a peer; its record cannot always say which, Gloo
 * does not always name it). The cause may then be on another node, whose
 * executor saw its rank die before this node's ranks lost the connection
 * but whose word may be on the way. */
static int echoes_only(const ln_ranks_t *r, const rk_answer_t *ans) {
  int echoes = 0, causes = 0;
  for (int i = 0; i < r->n; i++) {
    nbf_rankstate_t rec;
    if (ans[i].status != -1)
      continue;
    if (WIFEXITED(r->w[i].status) && nbf_rankstate_read(r->w[i].rs, &rec) == 0 && rec.err_code)
      echoes++;
    else
      causes++;
  }
  return echoes && !causes;
}

/* Several nodes, after a rank of this node died: when every death here
 * is such an echo, the stop of another node is waited for (up to the
 * ranks' answer time) and kept in r->remote as the cause; otherwise the
 * cause is here and r->remote is dropped. */
static void await_remote_cause(ln_ranks_t *r, const rk_answer_t *ans) {
  if (!echoes_only(r, ans)) {
    free(r->remote); /* the cause is here: another node's stop echoes it */
    r->remote = NULL;
    return;
  }
  for (int64_t until = nbf_now_ms() + LN_RANKS_ANSWER_MS;
       (!r->remote || r->remote[0] != 'F') && nbf_now_ms() < until;) {
    free(r->remote);
    r->remote = ln_rk_nodes_stopped(r->nodes, r->seq);
    if (!r->remote || r->remote[0] != 'F')
      usleep(50 * 1000);
  }
}

/* Collect the answers of the pending ranks: a death or an interrupt
 * sends SIGINT to the others; who has not answered LN_RANKS_ANSWER_MS
 * later is killed. Output is forwarded all along. */
static void collect(ln_ranks_t *r, rk_answer_t *ans, void *(*dest)(void *, size_t), void *dctx) {
  size_t cap = (size_t)r->n * 5 + 1;
  struct pollfd *pfd = calloc(cap, sizeof *pfd);
  int *who = calloc(cap, sizeof *who), *what = calloc(cap, sizeof *what);
  int64_t kill_at = -1, remote_at = nbf_now_ms();
  int tick = (int)(r->o.monitor_interval_s * 1000);
  for (;;) {
    int pending = 0, died = 0;
    for (int i = 0; i < r->n; i++) {
      /* with a pidfd, pump reaps the worker when it exits: no wait4 here */
      int gone = r->w[i].exited || (r->w[i].pidfd < 0 && reap(r, i, 0));
      if (ans[i].pending && gone) {
        ans[i].pending = 0;
        ans[i].status = -1;
      }
      died |= ans[i].status == -1;
      pending += ans[i].pending;
    }
    if (!pending || !pfd || !who || !what)
      break;
    int here = died || (r->ctx.interrupted && *r->ctx.interrupted);
    if (!here && r->nodes && r->watch && !r->remote && nbf_now_ms() >= remote_at) {
      r->remote = ln_rk_nodes_stopped(r->nodes, r->seq); /* another node stopped it */
      remote_at = nbf_now_ms() + (tick > 0 ? tick : 100);
    }
    if ((here || r->remote) && kill_at < 0) {
      if (here && r->nodes && r->watch)
        tell_nodes_stop(r, ans);
      snapshot(r); /* before SIGINT moves anyone */
      interrupt_pending(r, ans);
      kill_at = nbf_now_ms() + LN_RANKS_ANSWER_MS;
    } else if (kill_at >= 0 && nbf_now_ms() > kill_at) {
      for (int i = 0; i < r->n; i++)
        if (ans[i].pending && !r->w[i].exited)
          kill(r->w[i].pid, SIGKILL); /* reaped next pass, through its pidfd */
      kill_at = nbf_now_ms() + 60000;
    }
    pump(r, ans, tick > 0 ? tick : 100, pfd, who, what);
    for (int k = 0; k < r->n; k++)
      ln_worker_flush_stale(&r->w[k]);
    for (int i = 0; i < r->n; i++) {
      struct pollfd p = {r->ctl[i], POLLIN, 0};
      if (ans[i].pending && r->ctl[i] >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN) &&
          take_reply(r, i, &ans[i], dest, dctx) != 0)
        reap(r, i, 1); /* its channel broke: it is exiting */
    }
  }
  free(pfd);
  free(who);
  free(what);
  drain_output(r);
}

/* Send a command to rank i: 0, or -1 (it is gone). The header and the
 * names go in one write (one wake-up of the rank; three writes per rank
 * were on every cell's round trip), push data after them. */
static int send_cmd(ln_ranks_t *r, int i, uint32_t op, int cell, const char *a, const char *b,
                    const void *data, size_t n) {
  size_t la = strlen(a) + 1, lb = b ? strlen(b) + 1 : 0;
  ln_rk_cmd_t c = {op, cell, la + lb, n};
  char small[1024], *msg = sizeof c + la + lb <= sizeof small ? small : malloc(sizeof c + la + lb);
  if (!msg || r->ctl[i] < 0) {
    if (msg != small)
      free(msg);
    return -1;
  }
  memcpy(msg, &c, sizeof c);
  memcpy(msg + sizeof c, a, la);
  if (lb)
    memcpy(msg + sizeof c + la, b, lb);
  int rc = ln_rk_write_all(r->ctl[i], msg, sizeof c + la + lb) ||
           (n && ln_rk_write_all(r->ctl[i], data, n));
  if (msg != small)
    free(msg);
  return rc ? -1 : 0;
}

/* Start one worker and its control channel. */
static int start_worker(ln_ranks_t *r, int i, const ln_worker_env_t *env) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
    return -1;
  r->ctl[i] = sv[0];
  g_boot = r;
  g_boot_fd = sv[1];
  g_boot_n = i + 1;
  int rc = ln_worker_start(&r->w[i], i, env, rank_main, r->w, i);
  int e = errno;
  close(sv[1]);
  errno = e;
  return rc;
}

static ln_ranks_t *ranks_alloc(const ln_options_t *o, ln_context_t *ctx,
                               const ln_ranks_hooks_t *hooks, int restart) {
  ln_ranks_t *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->o = *o;
  r->ctx = *ctx;
  r->hooks = *hooks;
  r->n = o->num_processes;
  r->first = o->node_rank * o->num_processes;
  r->restart = restart;
  if (!r->o.log_line_prefix_template[0])
    snprintf(r->o.log_line_prefix_template, sizeof r->o.log_line_prefix_template, "[rank {rank}] ");
  r->w = calloc((size_t)r->n, sizeof *r->w);
  r->ctl = malloc((size_t)r->n * sizeof *r->ctl);
  r->state = calloc((size_t)r->n, sizeof *r->state);
  r->cell = calloc((size_t)r->n, sizeof *r->cell);
  r->died_in = calloc((size_t)r->n, sizeof *r->died_in);
  if (!r->w || !r->ctl || !r->state || !r->cell || !r->died_in) {
    free(r->w), free(r->ctl), free(r->state), free(r->cell), free(r->died_in), free(r);
    return NULL;
  }
  for (int i = 0; i < r->n; i++) {
    ln_worker_init(&r->w[i], i);
    r->ctl[i] = -1;
  }
  return r;
}

/* Several nodes: wait for the launchers' verdict (ln_rdzv.h). */
static int wait_rendezvous(ln_ranks_t *r, char **error) {
  if (r->o.num_nodes <= 1)
    return 0;
  ln_rdzv_t rdzv;
  ln_rdzv_begin(&rdzv, &r->o, r->restart, r->srv);
  size_t cap = (size_t)r->n * 5 + 1;
  struct pollfd pfd[cap];
  int who[cap], what[cap], rc = 0;
  while (!rdzv.done && rc == 0) {
    rc = ln_rdzv_poll(&rdzv, error);
    if (r->ctx.interrupted && *r->ctx.interrupted) {
      *error = strdup("interrupted while the nodes met");
      rc = -1;
    }
    if (rc == 0 && !rdzv.done)
      pump(r, NULL, 100, pfd, who, what);
  }
  ln_rdzv_end(&rdzv);
  return rc;
}

int ln_ranks_start(ln_ranks_t **out, const ln_options_t *o, ln_context_t *ctx,
                   const ln_ranks_hooks_t *hooks, int restart, ln_error_t *err) {
  *out = NULL;
  int use_gpu = 0;
  if (ln_launch_check(o, ctx, &use_gpu, err))
    return -1;
  ln_ranks_t *r = ranks_alloc(o, ctx, hooks, restart);
  if (!r) {
    set_error(err, "LaunchError", strdup("out of memory"), NULL);
    return -1;
  }
  r->use_gpu = use_gpu;
  ln_worker_env_t env = {&r->o, restart, use_gpu, ctx->private_fds, ctx->nprivate};
  char *setup = NULL;
  for (int i = 0; i < r->n && !setup; i++)
    if (start_worker(r, i, &env))
      setup = nbf_xprintf("cannot start rank worker %d: %s", i, NBF_STRERROR(errno));
  if (!setup && o->node_rank == 0)
    ln_group_host_store(&r->o, &r->srv, &setup);
  if (!setup)
    wait_rendezvous(r, &setup);
  if (!setup && o->num_nodes > 1) /* after the forks: the client has threads */
    r->nodes = ln_rk_nodes_open(&r->o, restart, &setup);
  if (setup) {
    ln_ranks_stop(&r);
    set_error(err, "LaunchError", setup, NULL);
    return -1;
  }
  *out = r;
  return 0;
}

/* Wait up to ms for every worker to exit, forwarding their output. */
static void wait_exits(ln_ranks_t *r, int ms) {
  size_t cap = (size_t)r->n * 5 + 1;
  struct pollfd pfd[cap];
  int who[cap], what[cap];
  int64_t until = nbf_now_ms() + ms;
  for (;;) {
    int alive = 0;
    for (int i = 0; i < r->n; i++)
      alive += !reap(r, i, 0);
    if (!alive || nbf_now_ms() > until)
      return;
    pump(r, NULL, 50, pfd, who, what);
  }
}

void ln_ranks_stop(ln_ranks_t **rp) {
  ln_ranks_t *r = *rp;
  if (!r)
    return;
  *rp = NULL;
  ln_rk_nodes_close(&r->nodes);
  free(r->remote);
  for (int i = 0; i < r->n; i++)
    if (r->ctl[i] >= 0) { /* EOF: an idle worker exits at once */
      close(r->ctl[i]);
      r->ctl[i] = -1;
    }
  int started = 0;
  while (started < r->n && r->w[started].pid > 0)
    started++;
  wait_exits(r, LN_RANKS_GRACE_MS);
  ln_group_signal(r->w, started, nbf_proc_term);
  wait_exits(r, LN_RANKS_GRACE_MS);
  ln_group_signal(r->w, started, nbf_proc_kill);
  for (int i = 0; i < started; i++) {
    reap(r, i, 1);
    ln_worker_close(&r->w[i]);
    ln_worker_free(&r->w[i]);
  }
  acc_store_server_stop(&r->srv);
  free(r->w), free(r->ctl), free(r->state), free(r->cell), free(r->died_in), free(r);
}

/* --group: rank i's stdout and stderr go to memory files until the end
 * of the cell, then out in one block each (group_flush). */
static void group_begin(ln_ranks_t *r, int i, char *saved_prefix, size_t cap) {
  ln_worker_t *w = &r->w[i];
  snprintf(saved_prefix, cap, "%s", w->prefix);
  w->prefix[0] = 0;
  for (int s = LN_STDOUT; s <= LN_STDERR; s++) {
    int fd = memfd_create("nbfork-rank-output", MFD_CLOEXEC);
    if (fd >= 0)
      w->out_fd[s] = fd;
  }
}

static void copy_fd(int from, int to) {
  char buf[65536];
  ssize_t n;
  lseek(from, 0, SEEK_SET);
  while ((n = read(from, buf, sizeof buf)) > 0)
    nbf_write_all(to, buf, (size_t)n);
}

static void group_end(ln_ranks_t *r, int i, const char *saved_prefix) {
  ln_worker_t *w = &r->w[i];
  char head[64];
  int n = snprintf(head, sizeof head, "[rank %d]\n", r->first + i);
  nbf_write_all(1, head, (size_t)n);
  for (int s = LN_STDOUT; s <= LN_STDERR; s++) {
    if (w->out_fd[s] > 2) {
      copy_fd(w->out_fd[s], s == LN_STDOUT ? 1 : 2);
      close(w->out_fd[s]);
    }
    w->out_fd[s] = s == LN_STDOUT ? 1 : 2;
  }
  snprintf(w->prefix, sizeof w->prefix, "%s", saved_prefix);
}

/* Where dead rank i stands in the order of causes (ln_report_cause: a
 * crash before an exit of its own before a rank that lost its peer), from
 * its exit status and its state record. */
static int failure_class(const ln_ranks_t *r, int i) {
  ln_worker_t w = r->w[i]; /* a copy, to mark it failed as ln_group does */
  w.failed = !WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0;
  nbf_rankstate_t rec;
  const nbf_rankstate_t *p = nbf_rankstate_read(w.rs, &rec) == 0 ? &rec : NULL;
  return (int)ln_report_cause(&w, p, &p, 1, INT64_MAX);
}

/* The rank whose failure leads: the first cause (a crash leads the peer
 * whose collective lost it, whichever exit was reaped first), then the
 * rank that died first, then the lower rank; -1 when none died. */
static int first_failure(const ln_ranks_t *r, const rk_answer_t *ans) {
  int best = -1, best_class = 0;
  for (int i = 0; i < r->n; i++) {
    if (ans[i].status != -1)
      continue;
    int c = failure_class(r, i);
    if (best < 0 || c < best_class ||
        (c == best_class && r->w[i].exited_ms < r->w[best].exited_ms)) {
      best = i;
      best_class = c;
    }
  }
  return best;
}

/* RankFailed: each dead rank described (ln_worker_describe), the first
 * failure first; what the others did. */
static void failed_error(ln_ranks_t *r, const rk_answer_t *ans, int first, ln_error_t *err) {
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f) {
    set_error(err, "RankFailed", strdup("a rank failed"), NULL);
    return;
  }
  if (r->remote && r->remote[0] == 'F') /* the cause, on another node: ours lost it */
    fprintf(f,
            "%s on another node during this cell (that node's notebook has its report); "
            "this node's ranks lost it:\n",
            r->remote + 1);
  ln_worker_describe(&r->w[first], r->first + first, f);
  for (int i = 0; i < r->n; i++)
    if (i != first && ans[i].status == -1)
      ln_worker_describe(&r->w[i], r->first + i, f);
  int others = 0;
  for (int i = 0; i < r->n; i++)
    others += ans[i].status == LN_RK_INTERRUPTED;
  if (others)
    fprintf(f, "The other rank%s ended the cell (interrupted; their state is kept).\n",
            others > 1 ? "s" : "");
  fprintf(f, "%%ranks status shows the dead rank; %%ranks restart starts every rank again "
             "(the ranks' state is lost).");
  fclose(f);
  char *summary = text ? strndup(text, strcspn(text, "\n")) : NULL;
  set_error(err, "RankFailed", summary, text);
}

/* The error of an exchange, or 0 when every rank answered OK. */
static int exchange_error(ln_ranks_t *r, const rk_answer_t *ans, const char *what,
                          ln_error_t *err) {
  int first = first_failure(r, ans);
  if (first >= 0) {
    failed_error(r, ans, first, err);
    return -1;
  }
  if (r->remote) { /* another node stopped the cell: its notebook has the report */
    int failed = r->remote[0] == 'F';
    set_error(err, failed ? "RankFailed" : "KeyboardInterrupt",
              nbf_xprintf("%s during this cell (that node's notebook has its report); this "
                          "node's ranks ended the cell (interrupted; their state is kept)",
                          r->remote + 1),
              NULL);
    return -1;
  }
  for (int i = 0; i < r->n; i++)
    if (ans[i].status == LN_RK_INTERRUPTED ||
        (ans[i].status != LN_RK_OK && r->ctx.interrupted && *r->ctx.interrupted)) {
      set_error(err, "KeyboardInterrupt",
                nbf_xprintf("the %s was interrupted on every rank running it; the ranks' state "
                            "is kept",
                            what),
                NULL); /* a cell's: where each rank was (stopped_report) */
      return -1;
    }
  for (int i = 0; i < r->n; i++)
    if (ans[i].status == LN_RK_ERROR) {
      set_error(err, "LaunchError",
                nbf_xprintf("rank %d: %s", r->first + i, ans[i].text ? ans[i].text : "failed"),
                NULL);
      return -1;
    }
  return 0;
}

static void answers_free(rk_answer_t *ans, int n) {
  for (int i = 0; ans && i < n; i++)
    free(ans[i].text);
  free(ans);
}

/* A targeted rank that is dead: LaunchError naming it and its cause. */
static int refuse_dead(ln_ranks_t *r, const unsigned char *targets, ln_error_t *err) {
  for (int i = 0; i < r->n; i++) {
    if (targets && !targets[i])
      continue;
    reap(r, i, 0);
    if (r->state[i] != RK_DEAD)
      continue;
    char *text = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&text, &cap);
    if (f) {
      ln_worker_describe(&r->w[i], r->first + i, f);
      fclose(f);
    }
    set_error(err, "LaunchError",
              nbf_xprintf("rank %d is dead: run %%ranks restart (the ranks' state is lost)",
                          r->first + i),
              text);
    return -1;
  }
  return 0;
}

/* Give every live rank acc_rebuild_process_groups(epoch) (a command
 * each answers at once: no collect, whose interrupt would leave a SIGINT
 * pending for the next cell). 0 when every live rank took it. */
static int send_rebuild(ln_ranks_t *r, unsigned epoch) {
  r->rebuild_epoch = epoch;
  int rc = 0;
  for (int i = 0; i < r->n; i++) {
    if (r->state[i] == RK_DEAD)
      continue;
    ln_rk_cmd_t c = {LN_RK_REBUILD, 0, 1, r->rebuild_epoch};
    ln_rk_reply_t h;
    struct pollfd p = {r->ctl[i], POLLIN, 0};
    if (r->ctl[i] < 0 || ln_rk_write_all(r->ctl[i], &c, sizeof c) ||
        ln_rk_write_all(r->ctl[i], "", 1) || poll(&p, 1, LN_RANKS_ANSWER_MS) != 1 ||
        ln_rk_read_all(r->ctl[i], &h, sizeof h) || h.status != LN_RK_OK)
      rc = -1;
  }
  return rc;
}

/* The first targeted rank that did not finish the cell and whose record
 * was in a collective when the cell was stopped, or -1. */
static int cut_rank(const ln_ranks_t *r, const unsigned char *targets, const rk_answer_t *ans) {
  for (int i = 0; i < r->n; i++)
    if (targets[i] && ans[i].status != LN_RK_OK && r->w[i].seen_ok &&
        r->w[i].seen.phase == NBF_RS_COLLECTIVE)
      return i;
  return -1;
}

/* Several nodes: act on the nodes' decision on stopped cell `seq` (the
 * same on every node, ln_ranks_nodes.h) and say so into f. */
static void nodes_apply(ln_ranks_t *r, int seq, ln_rkn_decision_t d, const char *why, FILE *f) {
  int nodes = r->o.num_nodes;
  int sent = d == LN_RKN_REBUILD && send_rebuild(r, (unsigned)seq) == 0;
  r->unmendable = d != LN_RKN_NOTHING && !sent;
  if (sent)
    fprintf(f,
            "A rank was cut inside a collective: every rank of the %d nodes rebuilds its "
            "process groups at its next collective (shared memory by node or a Gloo mesh, "
            "joined again through node 0's store, epoch %d agreed by the nodes; NCCL "
            "communicators aborted and made again); the ranks' other state is kept.\n",
            nodes, seq);
  else if (d == LN_RKN_REBUILD)
    fprintf(f,
            "The process group cannot be rebuilt (a rank of node %d did not answer): run "
            "%%ranks restart on every node.\n",
            r->o.node_rank);
  else if (d == LN_RKN_CANNOT)
    fprintf(f,
            "The process group cannot be used again (%s): run %%ranks restart on every "
            "node.\n",
            why ? why : "the nodes did not agree");
}

/* Several nodes, after a stopped cell: this node's verdict (a rank dead,
 * one cut inside a collective, or stopped outside them), then the nodes'
 * decision, acted on. */
static void nodes_mend(ln_ranks_t *r, int cut, FILE *f) {
  char detail[256] = "";
  size_t at = 0;
  for (int i = 0; i < r->n && at < sizeof detail - 32; i++)
    if (r->state[i] == RK_DEAD)
      at += (size_t)snprintf(detail + at, sizeof detail - at, "%s%d", at ? ", " : "rank ",
                             r->first + i);
  if (at)
    snprintf(detail + at, sizeof detail - at, " dead");
  ln_rk_nodes_verdict(r->nodes, r->seq, at ? 'd' : cut >= 0 ? 'c' : 'k', detail);
  char *why = NULL;
  ln_rkn_decision_t d = ln_rk_nodes_decide(r->nodes, r->seq, &why);
  nodes_apply(r, r->seq, d, why, f);
  free(why);
}

/* Several nodes, before a cell: when the last cell finished here but
 * another node stopped it (a rank died or was cut there after this
 * node's ranks were done), the nodes' decision is acted on now, before
 * any collective of the new cell; what was done is printed on stderr. */
static void nodes_catch_up(ln_ranks_t *r) {
  if (!r->nodes || !r->seq || r->seq_done != r->seq)
    return;
  char *stop = ln_rk_nodes_stopped(r->nodes, r->seq);
  if (!stop)
    return;
  char *why = NULL;
  ln_rkn_decision_t d = ln_rk_nodes_decide(r->nodes, r->seq, &why);
  fprintf(stderr,
          "The previous %%%%ranks cell finished on this node's ranks but was stopped on "
          "another node (%s).\n",
          stop + 1);
  nodes_apply(r, r->seq, d, why, stderr);
  fflush(stderr);
  free(why);
  free(stop);
}

/* After a stopped cell (interrupt, or a rank's death): where each rank
 * was (the records read at the stop, printed as %launch's reports do)
 * and, when a rank was cut inside a collective, the process groups
 * rebuilt (every live rank gets the next epoch; each group is rebuilt at
 * its next collective) or what to do when they cannot be (a rank is
 * dead); with several nodes, as the nodes decided (nodes_mend). NULL
 * when the cell was not stopped or no rank had joined a group. */
static char *stopped_report(ln_ranks_t *r, const unsigned char *targets, const rk_answer_t *ans) {
  if (!r->snap_ms)
    return NULL;
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  ln_report_positions(r->w, r->n, r->first, r->snap_ms,
                      "Where each rank was when the cell stopped:", f);
  int idle = 0;
  for (int i = 0; i < r->n; i++)
    idle += !targets[i];
  if (idle && ftell(f) > 0) {
    fprintf(f, "  (not running this cell:");
    for (int i = 0; i < r->n; i++)
      if (!targets[i])
        fprintf(f, " rank %d", r->first + i);
    fprintf(f, ")\n");
  }
  int cut = cut_rank(r, targets, ans), dead = 0;
  for (int i = 0; i < r->n; i++)
    dead += r->state[i] == RK_DEAD;
  if (cut >= 0) {
    char call[160];
    nbf_rs_call_text(&r->w[cut].seen.call, call, sizeof call);
    fprintf(f, "Rank %d was cut inside %s: its process group is out of step. ", r->first + cut,
            call);
  }
  if (r->nodes)
    nodes_mend(r, cut, f);
  else if (cut >= 0) {
    if ((r->unmendable = dead || send_rebuild(r, r->rebuild_epoch + 1)))
      fprintf(f, "It cannot be rebuilt here (%s): run %%ranks restart.\n",
              dead ? "a rank is dead" : "a rank did not answer");
    else
      fprintf(f,
              "Every rank rebuilds its process groups at its next collective (shared memory "
              "by node or a Gloo mesh, joined again through the store, epoch %u; NCCL "
              "communicators aborted and made again); the "
              "ranks' other state is kept.\n",
              r->rebuild_epoch);
  }
  fclose(f);
  if (text && !*text) {
    free(text);
    text = NULL;
  }
  return text;
}

/* err's traceback followed by `more` (consumed). */
static void append_traceback(ln_error_t *err, char *more) {
  if (!more)
    return;
  if (!err->traceback) {
    err->traceback = more;
    return;
  }
  char *t = nbf_xprintf("%s\n%s", err->traceback, more);
  free(more);
  if (t) {
    free(err->traceback);
    err->traceback = t;
  }
}

int ln_ranks_run(ln_ranks_t *r, const char *so_path, const char *symbol, int count,
                 const unsigned char *targets, int group, ln_error_t *err) {
  memset(err, 0, sizeof *err);
  nodes_catch_up(r);
  r->seq++;
  free(r->remote);
  r->remote = NULL;
  if (refuse_dead(r, targets, err))
    return -1;
  rk_answer_t *ans = calloc((size_t)r->n, sizeof *ans);
  char(*saved)[128] = calloc((size_t)r->n, sizeof *saved);
  if (!ans || !saved) {
    free(ans), free(saved);
    set_error(err, "LaunchError", strdup("out of memory"), NULL);
    return -1;
  }
  for (int i = 0; i < r->n; i++) {
    if (!targets[i])
      continue;
    if (group)
      group_begin(r, i, saved[i], sizeof saved[i]);
    r->cell[i] = count;
    r->state[i] = RK_RUNNING;
    ans[i].pending = send_cmd(r, i, LN_RK_RUN, count, so_path, symbol, NULL, 0) == 0;
    if (!ans[i].pending)
      ans[i].status = reap(r, i, 1) ? -1 : LN_RK_ERROR;
  }
  r->snap_ms = 0;
  r->watch = 1;
  collect(r, ans, NULL, NULL);
  r->watch = 0;
  int failed = first_failure(r, ans) >= 0;
  if (failed && !r->snap_ms) /* every rank died before a pass saw the stop */
    snapshot(r);            /* (a dead rank's record stays readable) */
  if (r->nodes && failed) {
    tell_nodes_stop(r, ans); /* again: the cause among every death seen */
    await_remote_cause(r, ans);
  }
  if (r->nodes && !r->snap_ms) { /* finished here: the deciding node may wait for it */
    ln_rk_nodes_verdict(r->nodes, r->seq, 'o', NULL);
    r->seq_done = r->seq;
  }
  for (int i = 0; i < r->n; i++)
    if (targets[i] && r->state[i] == RK_RUNNING)
      r->state[i] = RK_IDLE;
  if (group) { /* failed ranks' output first */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < r->n; i++)
        if (targets[i] && (ans[i].status == -1) == (pass == 0))
          group_end(r, i, saved[i]);
  }
  int rc = exchange_error(r, ans, "cell", err);
  char *where = stopped_report(r, targets, ans);
  if (rc)
    append_traceback(err, where);
  else
    free(where);
  answers_free(ans, r->n);
  free(saved);
  return rc;
}

int ln_ranks_load(ln_ranks_t *r, const char *so_path, ln_error_t *err) {
  memset(err, 0, sizeof *err);
  rk_answer_t *ans = calloc((size_t)r->n, sizeof *ans);
  if (!ans)
    return -1;
  for (int i = 0; i < r->n; i++)
    if (r->state[i] != RK_DEAD)
      ans[i].pending = send_cmd(r, i, LN_RK_LOAD, 0, so_path, NULL, NULL, 0) == 0;
  collect(r, ans, NULL, NULL);
  int rc = exchange_error(r, ans, "load", err);
  answers_free(ans, r->n);
  return rc;
}

int ln_ranks_pull(ln_ranks_t *r, int local, const char *kind, const char *name,
                  void *(*dest)(void *ctx, size_t n), void *ctx, size_t *n_out, ln_error_t *err) {
  memset(err, 0, sizeof *err);
  unsigned char *one = calloc((size_t)r->n, 1);
  rk_answer_t *ans = calloc((size_t)r->n, sizeof *ans);
  int rc = -1;
  if (!one || !ans) {
    set_error(err, "LaunchError", strdup("out of memory"), NULL);
    goto out;
  }
  one[local] = 1;
  if (refuse_dead(r, one, err))
    goto out;
  ans[local].pending = send_cmd(r, local, LN_RK_PULL, 0, kind, name, NULL, 0) == 0;
  collect(r, ans, dest, ctx);
  *n_out = (size_t)ans[local].arg;
  if (ans[local].status == LN_RK_MISMATCH) {
    rc = 1;
    goto out;
  }
  rc = exchange_error(r, ans, "pull", err);
out:
  free(one);
  answers_free(ans, r->n);
  return rc;
}

int ln_ranks_push(ln_ranks_t *r, const unsigned char *targets, const char *kind, const char *name,
                  const void *src, size_t size, ln_error_t *err) {
  memset(err, 0, sizeof *err);
  if (refuse_dead(r, targets, err))
    return -1;
  rk_answer_t *ans = calloc((size_t)r->n, sizeof *ans);
  if (!ans)
    return -1;
  /* one rank at a time: each reads the whole payload before it answers */
  for (int i = 0; i < r->n; i++) {
    if (!targets[i])
      continue;
    ans[i].pending = send_cmd(r, i, LN_RK_PUSH, 0, kind, name, src, size) == 0;
    collect(r, ans, NULL, NULL);
    if (ans[i].status != LN_RK_OK)
      break;
  }
  int rc = 0;
  for (int i = 0; i < r->n && !rc; i++)
    if (ans[i].status == LN_RK_MISMATCH) {
      set_error(err, "ValueError",
                nbf_xprintf("size mismatch: rank %d's '%s' is %llu bytes, the kernel's is %zu "
                            "bytes",
                            r->first + i, name, (unsigned long long)ans[i].arg, size),
                NULL);
      rc = -1;
    } else if (ans[i].status == LN_RK_ERROR && ans[i].text && !strcmp(ans[i].text, "not found")) {
      set_error(err, "NameError",
                nbf_xprintf("rank %d has no '%s': define it in a %%%%ranks cell first",
                            r->first + i, name),
                NULL);
      rc = -1;
    }
  if (!rc)
    rc = exchange_error(r, ans, "push", err);
  answers_free(ans, r->n);
  return rc;
}

/* Resident memory of pid in MiB, or -1. */
static double rss_mib(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
  FILE *f = fopen(path, "r");
  long size = 0, resident = -1;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
      resident = -1;
    fclose(f);
  }
  return resident < 0 ? -1 : resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* What rank i's state record adds to its status line ("; in a
 * collective ..."), into out; *rec_ok says whether rec holds a record. */
static void record_note(const ln_ranks_t *r, int i, nbf_rankstate_t *rec, int *rec_ok, char *out,
                        size_t n) {
  const ln_worker_t *w = &r->w[i];
  out[0] = 0;
  *rec_ok = nbf_rankstate_read(w->rs, rec) == 0;
  if (!*rec_ok || rec->phase == NBF_RS_STARTING)
    return;
  char call[160];
  nbf_rs_call_text(&rec->call, call, sizeof call);
  int64_t now = r->state[i] == RK_DEAD ? w->exited_ms : nbf_now_ms();
  if (rec->phase == NBF_RS_COLLECTIVE && r->state[i] == RK_DEAD)
    snprintf(out, n, "; it was in %s for %.1f s", call, (double)(now - rec->call.start_ms) / 1e3);
  else if (rec->phase == NBF_RS_COLLECTIVE) {
    char after[48] = ""; /* the last stop's snapshot says after how long */
    if (r->snap_ms >= rec->call.start_ms)
      snprintf(after, sizeof after, " after %.1f s",
               (double)(r->snap_ms - rec->call.start_ms) / 1e3);
    snprintf(out, n, "; cut inside %s%s (%s)", call, after,
             r->rebuild_epoch && !r->unmendable
                 ? "its process group is rebuilt at its next collective"
             : r->o.num_nodes > 1 ? "run %ranks restart on every node"
                                  : "run %ranks restart");
  } else if (rec->phase == NBF_RS_RENDEZVOUS)
    snprintf(out, n, "; in acc_new's rendezvous for %.1f s", (double)(now - rec->phase_ms) / 1e3);
  else if (rec->phase == NBF_RS_EXITED)
    snprintf(out, n, "; left its process group (acc_destroy)");
  else if (rec->done_seq)
    snprintf(out, n, "; process group: last %s #%llu", nbf_rs_op_name(rec->done_op),
             (unsigned long long)rec->done_seq);
  else
    snprintf(out, n, "; process group: no collective yet");
}

void ln_ranks_status(const ln_ranks_t *r, FILE *out) {
  if (r->o.num_nodes > 1)
    fprintf(out,
            "one process group of world size %d: %d nodes x %d ranks; this is node %d (ranks "
            "%d-%d); the other nodes' ranks: %%ranks status in their notebooks\n",
            r->o.num_nodes * r->n, r->o.num_nodes, r->n, r->o.node_rank, r->first,
            r->first + r->n - 1);
  fprintf(out, "%-5s %-8s %-8s %-9s %s\n", "rank", "pid", "device", "RSS", "state");
  for (int i = 0; i < r->n; i++) {
    ln_ranks_t *rw = (ln_ranks_t *)r; /* reaping updates the table */
    reap(rw, i, 0);
    const ln_worker_t *w = &r->w[i];
    char dev[16], rss[16], state[64];
    if (r->use_gpu)
      snprintf(dev, sizeof dev, "cuda:%d", i);
    else
      snprintf(dev, sizeof dev, "cpu");
    double m = r->state[i] == RK_DEAD ? -1 : rss_mib(w->pid);
    if (m < 0)
      snprintf(rss, sizeof rss, "-");
    else
      snprintf(rss, sizeof rss, "%.1f MiB", m);
    if (r->state[i] == RK_RUNNING)
      snprintf(state, sizeof state, "running cell [%d]", r->cell[i]);
    else if (r->state[i] == RK_IDLE && r->cell[i])
      snprintf(state, sizeof state, "idle (last cell [%d])", r->cell[i]);
    else if (r->state[i] == RK_IDLE)
      snprintf(state, sizeof state, "idle");
    else
      state[0] = 0;
    nbf_rankstate_t rec;
    int rec_ok;
    char note[256];
    record_note(r, i, &rec, &rec_ok, note, sizeof note);
    fprintf(out, "%-5d %-8d %-8s %-9s ", r->first + i, (int)w->pid, dev, rss);
    if (state[0]) {
      fprintf(out, "%s%s\n", state, note);
    } else {
      fprintf(out, "exited");
      if (r->died_in[i])
        fprintf(out, " in cell [%d]", r->died_in[i]);
      if (WIFSIGNALED(w->status))
        fprintf(out, ": killed by signal %d (SIG%s)%s\n", WTERMSIG(w->status),
                sigabbrev_np(WTERMSIG(w->status)) ? sigabbrev_np(WTERMSIG(w->status)) : "?", note);
      else
        fprintf(out, " with code %d%s%s\n", WEXITSTATUS(w->status),
                r->died_in[i] ? " (exit() in the cell)" : "", note);
    }
    if (rec_ok)
      ln_report_record_line(&rec, out); /* its last error, when it has one */
  }
}
