/*
 * ln_worker.c — fork one worker, forward its output, describe its end.
 */
#define _GNU_SOURCE
#include "ln_worker.h"
#include "ln_rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_param.h"
#include "nbf_util.h"

/* Point the child's descriptors where a worker needs them: stdin and
 * the caller's private descriptors at /dev/null, fd 1/2 and the display
 * channel at the launcher's pipes; every other pipe end closed. */
static void child_descriptors(const ln_worker_env_t *env, int pipes[3][2], ln_worker_t *siblings,
                              int nsiblings) {
  for (int i = 0; i < nsiblings; i++) {
    for (int s = 0; s < 3; s++)
      if (siblings[i].fd[s] >= 0)
        close(siblings[i].fd[s]);
    if (siblings[i].pidfd >= 0)
      close(siblings[i].pidfd);
    if (siblings[i].rs_fd >= 0)
      close(siblings[i].rs_fd);
    nbf_rankstate_unmap(&siblings[i].rs);
  }
  int devnull = open("/dev/null", O_RDWR);
  for (int i = 0; i < env->nprivate; i++)
    if (devnull >= 0)
      dup2(devnull, env->private_fds[i]);
  if (devnull >= 0)
    dup2(devnull, 0);
  dup2(pipes[LN_STDOUT][1], 1);
  dup2(pipes[LN_STDERR][1], 2);
  /* The display channel keeps the number the runtime was told about
   * (NBFORK_DISPLAY_FD), now leading to the launcher instead of the kernel. */
  long display_fd = 0;
  if (nbf_param_NBFORK_DISPLAY_FD(&display_fd) < 0 || display_fd > INT_MAX)
    display_fd = 0;
  if (display_fd <= 2 || display_fd == devnull) {
    display_fd = fcntl(pipes[LN_DISPLAY][1], F_DUPFD, 10);
  } else {
    dup2(pipes[LN_DISPLAY][1], (int)display_fd);
  }
  nbf_param_set_long(NBF_P_NBFORK_DISPLAY_FD, display_fd);
  for (int s = 0; s < 3; s++) {
    if (pipes[s][1] != display_fd && pipes[s][1] > 2)
      close(pipes[s][1]);
    close(pipes[s][0]);
  }
  if (devnull > 2)
    close(devnull);
  /* The executor's stdin is a stream that asks the front end for input
   * (ex_stdin.c); a worker's reads end at once instead (/dev/null, EOF),
   * as under torchrun: no input_request per rank, no answer lost. */
  FILE *in = fdopen(0, "r");
  if (in)
    stdin = in;
}

void ln_worker_export_env(const ln_worker_env_t *env, int local_rank) {
  const ln_options_t *o = env->o;
  int rank = o->node_rank * o->num_processes + local_rank;
  nbf_param_set_long(NBF_P_RANK, rank);
  nbf_param_set_long(NBF_P_LOCAL_RANK, local_rank);
  nbf_param_set_long(NBF_P_WORLD_SIZE, o->num_nodes * o->num_processes);
  nbf_param_set_long(NBF_P_LOCAL_WORLD_SIZE, o->num_processes);
  nbf_param_set_long(NBF_P_NODE_RANK, o->node_rank);
  nbf_param_set_long(NBF_P_GROUP_RANK, o->node_rank);
  nbf_param_set(NBF_P_MASTER_ADDR, o->master_addr);
  nbf_param_set_long(NBF_P_MASTER_PORT, o->use_port);
  nbf_param_set(NBF_P_ACCELERATE_MIXED_PRECISION, o->mixed_precision);
  ln_options_sharding_env(o);
  nbf_param_set_long(NBF_P_TORCHELASTIC_RESTART_COUNT, env->restart);
  nbf_param_set_long(NBF_P_NBFORK_RESTART_COUNT, env->restart);
  nbf_param_set(NBF_P_NBFORK_STORE_HOSTED, "1");
  if (o->rdzv_secret[0])
    nbf_param_set(NBF_P_NBFORK_RDZV_SECRET, o->rdzv_secret); /* the runtime's store client */
  char run_id[200];
  snprintf(run_id, sizeof run_id, "%s-r%d", o->rdzv_id[0] ? o->rdzv_id : "nbfork", env->restart);
  nbf_param_set(NBF_P_NBFORK_RUN_ID, run_id);
  if (o->num_nodes > 1) { /* join only once the nodes agreed (ln_rdzv.h) */
    char gate[200];
    ln_rdzv_gate_key(o, env->restart, gate, sizeof gate);
    nbf_param_set(NBF_P_NBFORK_RDZV_GATE, gate);
  }
}

/* The child side: never returns. */
static void __attribute__((noreturn))
worker_child(ln_worker_t *self, int local_rank, const ln_worker_env_t *env, int (*fn)(void),
             int pipes[3][2], ln_worker_t *siblings, int nsiblings, pid_t parent) {
  setpgid(0, 0); /* own group: a stop signal reaches its children too */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(1); /* the launcher died before prctl took effect */
  /* The executor's handlers (SIGINT jumps back to the cell runner) must
   * not run here: Jupyter's interrupt reaches workers through the
   * launcher, as SIGTERM. */
  struct sigaction dfl = {0};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      sigaction(s, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  child_descriptors(env, pipes, siblings, nsiblings);
  ln_worker_export_env(env, local_rank);
  if (self->rs_fd >= 0) { /* F_DUPFD: a copy without close-on-exec, for PROGRAM too */
    int fd = fcntl(self->rs_fd, F_DUPFD, 10);
    close(self->rs_fd);
    if (fd >= 0)
      nbf_param_set_long(NBF_P_NBFORK_RANKSTATE_FD, fd);
  } else {
    nbf_param_unset(NBF_P_NBFORK_RANKSTATE_FD); /* not the launcher's own, if it is a rank */
  }
  nbf_rankstate_unmap(&self->rs); /* the runtime maps its page itself */

  /* stdio buffers are shared state copied by fork: start clean */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = fn();
  fflush(stdout);
  fflush(stderr);
  _exit(rc == 0 ? 0 : ((rc & 0xff) ? (rc & 0xff) : 1));
}

int ln_worker_start(ln_worker_t *w, int local_rank, const ln_worker_env_t *env, int (*fn)(void),
                    ln_worker_t *siblings, int nsiblings) {
  ln_worker_init(w, local_rank);
  int rank = env->o->node_rank * env->o->num_processes + local_rank;
  ln_options_prefix(env->o, rank, local_rank, w->prefix, sizeof w->prefix);
  int pipes[3][2];
  for (int s = 0; s < 3; s++) {
    if (pipe2(pipes[s], O_CLOEXEC)) {
      int e = errno;
      for (int t = 0; t < s; t++) {
        close(pipes[t][0]);
        close(pipes[t][1]);
      }
      errno = e;
      return -1;
    }
  }
  /* without a record the report falls back to exit statuses: no error */
  w->rs_fd = nbf_rankstate_create(rank, &w->rs);
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    for (int s = 0; s < 3; s++) {
      close(pipes[s][0]);
      close(pipes[s][1]);
    }
    errno = e;
    return -1;
  }
  if (pid == 0)
    worker_child(w, local_rank, env, fn, pipes, siblings, nsiblings, parent);
  setpgid(pid, pid); /* also here: no race with an early stop signal */
  w->pid = pid;
  if (w->rs)
    w->rs->pid = (int32_t)pid; /* before the worker maps it: its children are not it */
  /* A pidfd turns "the worker exited" into a poll event, so the launcher
   * reaps at once instead of at its next monitor tick. */
  w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  for (int s = 0; s < 3; s++) {
    close(pipes[s][1]);
    w->fd[s] = pipes[s][0];
    fcntl(w->fd[s], F_SETFL, O_NONBLOCK);
  }
  return 0;
}

static void remember_stderr(ln_worker_t *w, const char *line, size_t n) {
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    n--;
  free(w->tail[w->tail_next]);
  w->tail[w->tail_next] = strndup(line, n);
  w->tail_next = (w->tail_next + 1) % LN_TAIL_LINES;
}

void ln_worker_init(ln_worker_t *w, int local_rank) {
  memset(w, 0, sizeof *w);
  w->local_rank = local_rank;
  w->fd[0] = w->fd[1] = w->fd[2] = w->pidfd = w->rs_fd = -1;
  w->out_fd[LN_STDOUT] = 1;
  w->out_fd[LN_STDERR] = 2;
}

/* Forward one piece of stream s (a whole line, or a flushed partial). */
static void emit(ln_worker_t *w, int s, const char *p, size_t n, int complete,
                 int (*send_event)(const char *, size_t)) {
  if (s == LN_DISPLAY) {
    if (complete && n > 1 && send_event)
      send_event(p, n - 1); /* without the newline */
    return;
  }
  int fd = w->out_fd[s];
  size_t np = !w->midline[s] && w->prefix[0] ? strlen(w->prefix) : 0;
  char joined[4096];
  if (np && np + n <= sizeof joined) {
    /* prefix and line in one write: the kernel reads a pipe and makes a
     * stream message of what one read returns, so two writes could reach
     * the front end as "[rank 1] " and the line in two outputs, with a
     * display update between them */
    memcpy(joined, w->prefix, np);
    memcpy(joined + np, p, n);
    nbf_write_all(fd, joined, np + n);
  } else {
    if (np)
      nbf_write_all(fd, w->prefix, np);
    nbf_write_all(fd, p, n);
  }
  w->midline[s] = !complete;
  if (s == LN_STDERR && complete)
    remember_stderr(w, p, n);
}

/* Emit every complete line in the buffer of stream s. */
static void drain_lines(ln_worker_t *w, int s, int (*send_event)(const char *, size_t)) {
  nbf_buf_t *b = &w->line[s];
  size_t start = 0;
  for (size_t i = 0; i < b->len; i++) {
    if (b->data[i] == '\n') {
      emit(w, s, b->data + start, i + 1 - start, 1, send_event);
      start = i + 1;
    }
  }
  if (start) {
    nbf_buf_consume(b, start);
    w->stale[s] = 0;
  }
}

/* The stream ended (EOF or the worker was reaped): forward what is left
 * and end a partial line with a newline, so that the next line written
 * on the same descriptor (another worker's, or the launcher's own
 * message) starts on a line of its own. */
static void end_stream(ln_worker_t *w, int s) {
  if (s != LN_DISPLAY && w->line[s].len)
    emit(w, s, w->line[s].data, w->line[s].len, 0, NULL);
  nbf_buf_consume(&w->line[s], w->line[s].len);
  if (s != LN_DISPLAY && w->midline[s]) {
    nbf_write_all(w->out_fd[s], "\n", 1);
    w->midline[s] = 0;
  }
}

void ln_worker_read(ln_worker_t *w, int s, int (*send_event)(const char *, size_t)) {
  char chunk[65536];
  for (;;) {
    ssize_t r = read(w->fd[s], chunk, sizeof chunk);
    if (r > 0) {
      if (nbf_buf_append(&w->line[s], chunk, (size_t)r) == 0)
        drain_lines(w, s, send_event);
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    /* EOF or error: the writer is gone */
    end_stream(w, s);
    close(w->fd[s]);
    w->fd[s] = -1;
    return;
  }
}

void ln_worker_flush_stale(ln_worker_t *w) {
  for (int s = LN_STDOUT; s <= LN_STDERR; s++) {
    nbf_buf_t *b = &w->line[s];
    if (!b->len) {
      w->stale[s] = 0;
      continue;
    }
    if (w->stale[s]) { /* a prompt or progress text without newline */
      emit(w, s, b->data, b->len, 0, NULL);
      nbf_buf_consume(b, b->len);
      w->stale[s] = 0;
    } else {
      w->stale[s] = 1;
    }
  }
}

void ln_worker_close(ln_worker_t *w) {
  if (w->pidfd >= 0) {
    close(w->pidfd);
    w->pidfd = -1;
  }
  for (int s = 0; s < 3; s++) {
    if (w->fd[s] >= 0) {
      close(w->fd[s]);
      w->fd[s] = -1;
    }
    end_stream(w, s);
  }
}

void ln_worker_describe(const ln_worker_t *w, int rank, FILE *out) {
  int st = w->status;
  if (w->stopped_by) {
    int sig = w->stopped_by;
    const char *abbrev = sigabbrev_np(sig);
    fprintf(out,
            "rank %d (local rank %d, pid %d) was stopped by signal %d (SIG%s) and did not take "
            "part: its peers' collectives timed out waiting for it (it was ended with the group)\n",
            rank, w->local_rank, (int)w->pid, sig, abbrev ? abbrev : "?");
  } else if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    const char *abbrev = sigabbrev_np(sig), *descr = sigdescr_np(sig);
    fprintf(out, "rank %d (local rank %d, pid %d) was killed by signal %d (SIG%s: %s)\n", rank,
            w->local_rank, (int)w->pid, sig, abbrev ? abbrev : "?", descr ? descr : "?");
  } else if (WIFEXITED(st)) {
    fprintf(out,
            "rank %d (local rank %d, pid %d) exited with code %d (exit() or a non-zero return "
            "of the launched function)\n",
            rank, w->local_rank, (int)w->pid, WEXITSTATUS(st));
  } else {
    fprintf(out, "rank %d (pid %d) ended with wait status %d\n", rank, (int)w->pid, st);
  }
  int any = 0;
  for (int i = 0; i < LN_TAIL_LINES; i++) {
    const char *l = w->tail[(w->tail_next + i) % LN_TAIL_LINES];
    if (!l)
      continue;
    if (!any)
      fprintf(out, "  last lines of its stderr:\n");
    any = 1;
    fprintf(out, "    %s\n", l);
  }
  if (!any)
    fprintf(out, "  (it wrote nothing on stderr)\n");
}

void ln_worker_free(ln_worker_t *w) {
  nbf_rankstate_unmap(&w->rs);
  if (w->rs_fd >= 0)
    close(w->rs_fd);
  for (int s = 0; s < 3; s++)
    nbf_buf_free(&w->line[s]);
  for (int i = 0; i < LN_TAIL_LINES; i++)
    free(w->tail[i]);
  memset(w, 0, sizeof *w);
}
