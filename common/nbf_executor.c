/* nbf_executor.c — spawn, feed, interrupt and stop the executor process
 * (see nbf_executor.h). */
#define _GNU_SOURCE
#include "nbf_executor.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_param.h"
#include "nbf_proc.h"
#include "nbf_util.h"
#include "nbf_wire.h"
#include "nbf_workdir.h"

extern char **environ;

#define NBF_EXECUTOR_CHUNK 65536

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

void nbf_executor_init(nbf_executor_t *ex) {
  memset(ex, 0, sizeof *ex);
  ex->pid = 0;
  ex->fd_in = ex->fd_req = ex->fd_ev = -1;
  ex->fd_out[0] = ex->fd_out[1] = -1;
}

int nbf_executor_find(char *path, size_t len) {
  const char *env = nbf_param_raw(NBF_P_NBFORK_EXECUTOR);
  if (env && *env) {
    if ((size_t)snprintf(path, len, "%s", env) >= len) {
      errno = ENAMETOOLONG;
      return -1;
    }
    return 0;
  }
  char self[PATH_MAX];
  if (nbf_self_exe(self, sizeof self))
    return -1;
  char *slash = strrchr(self, '/');
  if (slash)
    *slash = '\0';
  int w = snprintf(path, len, "%s/%s", slash ? self : ".", NBF_WIRE_EXECUTOR_NAME);
  if (w < 0 || (size_t)w >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

bool nbf_executor_running(const nbf_executor_t *ex) {
  return ex->pid > 0;
}

/* Environment for the child: ours, with NBFORK_DISPLAY_FD=4 and
 * OPENBLAS_NUM_THREADS=1 unless set. Caller frees the array (not the
 * strings, which are borrowed or static). */
static char **child_env(void) {
  static char display[32];
  static char openblas[] = "OPENBLAS_NUM_THREADS=1";
  snprintf(display, sizeof display, "NBFORK_DISPLAY_FD=%d", NBF_WIRE_FD_EVENTS);
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 3, sizeof *env);
  if (!env)
    return NULL;
  size_t k = 0;
  bool have_openblas = false;
  for (size_t i = 0; i < n; i++) {
    if (strncmp(environ[i], "NBFORK_DISPLAY_FD=", 18) == 0)
      continue;
    if (strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21) == 0)
      have_openblas = true;
    env[k++] = environ[i];
  }
  env[k++] = display;
  if (!have_openblas)
    env[k++] = openblas;
  env[k] = NULL;
  return env;
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) ? -1 : 0;
}

/* Make the five pipes of nbf_wire.h: kernel_fd[i] is the kernel's end
 * (non-blocking), child_fd[i] the end that becomes the child's fd i,
 * moved above 10 so the dup2 actions cannot clobber each other; all
 * close-on-exec. Both arrays must hold -1. On failure every fd made is
 * closed (-1 again), err says why, and the result is -1. */
static int make_pipes(int kernel_fd[5], int child_fd[5], char *err, size_t err_len) {
  for (int i = 0; i < 5; i++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      snprintf(err, err_len, "pipe: %s", NBF_STRERROR(errno));
      goto fail;
    }
    bool child_reads = (i == 0 || i == NBF_WIRE_FD_REQUESTS);
    kernel_fd[i] = p[child_reads ? 1 : 0];
    child_fd[i] = fcntl(p[child_reads ? 0 : 1], F_DUPFD_CLOEXEC, 10);
    int e = errno;
    close(p[child_reads ? 0 : 1]);
    if (child_fd[i] < 0 || set_nonblock(kernel_fd[i]) != 0) {
      snprintf(err, err_len, "fcntl: %s", NBF_STRERROR(child_fd[i] < 0 ? e : errno));
      goto fail;
    }
  }
  return 0;
fail:
  for (int i = 0; i < 5; i++) {
    close_fd(&kernel_fd[i]);
    close_fd(&child_fd[i]);
  }
  return -1;
}

/* Spawn attributes of the executor: default dispositions for the signals
 * the kernel handles or ignores, an empty signal mask, and its own process
 * group (so an interrupt or a kill reaches the workers it forks). 0 or -1. */
static int init_attr(posix_spawnattr_t *attr) {
  if (posix_spawnattr_init(attr) != 0)
    return -1;
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  int sigs[] = {SIGINT, SIGTERM, SIGPIPE, SIGQUIT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaddset(&dflt, sigs[i]);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setsigdefault(attr, &dflt);
  posix_spawnattr_setpgroup(attr, 0);
  posix_spawnattr_setflags(attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  return 0;
}

int nbf_executor_spawn(nbf_executor_t *ex, const char *path, nbf_executor_stdio_t stdio, char *err,
                       size_t err_len) {
  int child_fd[5] = {-1, -1, -1, -1, -1};
  int kernel_fd[5] = {-1, -1, -1, -1, -1};
  int r = -1;
  char **env = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  bool fa_init = false, attr_init = false;

  nbf_executor_close(ex);
  if (make_pipes(kernel_fd, child_fd, err, err_len) != 0)
    goto out;
  if (posix_spawn_file_actions_init(&fa) != 0)
    goto out;
  fa_init = true;
  for (int i = 0; i < 5; i++) {
    if (stdio == NBF_EXECUTOR_INHERIT && i < 3) { /* headless: no stdin, our stdout/stderr */
      close_fd(&child_fd[i]);
      close_fd(&kernel_fd[i]);
      if (i == 0)
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
      continue;
    }
    posix_spawn_file_actions_adddup2(&fa, child_fd[i], i);
  }
  if (init_attr(&attr) != 0)
    goto out;
  attr_init = true;
  if (!(env = child_env())) {
    snprintf(err, err_len, "out of memory");
    goto out;
  }
  char parent[24]; /* the executor arms PR_SET_PDEATHSIG and checks it (ex_main.c) */
  snprintf(parent, sizeof parent, "%d", (int)getpid());
  char *argv[] = {(char *)path, "--parent", parent, NULL};
  pid_t pid;
  if (stdio == NBF_EXECUTOR_INHERIT) { /* what it prints follows what we printed */
    fflush(stdout);
    fflush(stderr);
  }
  int e = posix_spawn(&pid, path, &fa, &attr, argv, env);
  if (e != 0) {
    snprintf(err, err_len, "cannot start the executor %s: %s", path, NBF_STRERROR(e));
    goto out;
  }
  ex->pid = pid;
  ex->fd_in = kernel_fd[0];
  ex->fd_out[0] = kernel_fd[1];
  ex->fd_out[1] = kernel_fd[2];
  ex->fd_req = kernel_fd[3];
  ex->fd_ev = kernel_fd[4];
  for (int i = 0; i < 5; i++)
    kernel_fd[i] = -1;
  ex->started_ms = nbf_now_ms();
  ex->interrupt_deadline_ms = 0;
  r = 0;
out:
  for (int i = 0; i < 5; i++) {
    close_fd(&child_fd[i]);
    close_fd(&kernel_fd[i]);
  }
  if (fa_init)
    posix_spawn_file_actions_destroy(&fa);
  if (attr_init)
    posix_spawnattr_destroy(&attr);
  free(env);
  return r;
}

static int flush_one(int *fd, nbf_buf_t *b) {
  while (*fd >= 0 && b->len > 0) {
    ssize_t n = write(*fd, b->data, b->len);
    if (n > 0) {
      nbf_buf_consume(b, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    nbf_buf_consume(b, b->len); /* EPIPE: the executor is gone */
    close_fd(fd);
    return NBF_EXECUTOR_EOF;
  }
  return *fd >= 0 ? 0 : NBF_EXECUTOR_EOF;
}

int nbf_executor_flush(nbf_executor_t *ex) {
  int a = flush_one(&ex->fd_req, &ex->req_pending);
  if (ex->in_pending.len)
    flush_one(&ex->fd_in, &ex->in_pending);
  return a;
}

int nbf_executor_send(nbf_executor_t *ex, json_t *req) {
  if (ex->fd_req < 0)
    return NBF_EXECUTOR_EOF;
  char *line = json_dumps(req, JSON_COMPACT);
  if (!line)
    return -1;
  int r = nbf_buf_append(&ex->req_pending, line, strlen(line));
  if (r == 0)
    r = nbf_buf_append(&ex->req_pending, "\n", 1);
  free(line);
  if (r != 0)
    return -1;
  return flush_one(&ex->fd_req, &ex->req_pending);
}

int nbf_executor_write_stdin(nbf_executor_t *ex, const char *s, size_t len) {
  if (ex->fd_in < 0)
    return NBF_EXECUTOR_EOF;
  if (nbf_buf_append(&ex->in_pending, s, len) != 0)
    return -1;
  return flush_one(&ex->fd_in, &ex->in_pending);
}

bool nbf_executor_wants_req_write(const nbf_executor_t *ex) {
  return ex->fd_req >= 0 && ex->req_pending.len > 0;
}

bool nbf_executor_wants_in_write(const nbf_executor_t *ex) {
  return ex->fd_in >= 0 && ex->in_pending.len > 0;
}

int nbf_executor_read_stream(nbf_executor_t *ex, int which, nbf_buf_t *out, size_t max_bytes) {
  int *fd = &ex->fd_out[which];
  unsigned char chunk[NBF_EXECUTOR_CHUNK];
  size_t total = 0;
  while (*fd >= 0 && total < max_bytes) {
    ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n > 0) {
      total += (size_t)n;
      if (nbf_buf_append(out, chunk, (size_t)n) != 0)
        return -1;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    /* EOF or error */
    close_fd(fd);
    return NBF_EXECUTOR_EOF;
  }
  return *fd >= 0 ? 0 : NBF_EXECUTOR_EOF;
}

int nbf_executor_read_events(nbf_executor_t *ex, nbf_executor_event_fn fn, void *arg) {
  unsigned char chunk[NBF_EXECUTOR_CHUNK];
  while (ex->fd_ev >= 0) {
    ssize_t n = read(ex->fd_ev, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0) {
      if (ex->ev_line.len) /* a line without newline at EOF */
        ex->ignored_events++;
      nbf_buf_consume(&ex->ev_line, ex->ev_line.len);
      close_fd(&ex->fd_ev);
      return NBF_EXECUTOR_EOF;
    }
    if (nbf_buf_append(&ex->ev_line, chunk, (size_t)n) != 0)
      return -1;
    size_t start = 0;
    for (size_t i = 0; i < ex->ev_line.len; i++) {
      if (ex->ev_line.data[i] != '\n')
        continue;
      const char *line = (const char *)ex->ev_line.data + start;
      size_t len = i - start;
      start = i + 1;
      if (len == 0)
        continue;
      json_t *ev = json_loadb(line, len, 0, NULL);
      if (!ev || !json_is_object(ev) || !json_is_string(json_object_get(ev, "msg"))) {
        ex->ignored_events++;
        json_decref(ev);
        continue;
      }
      if (!strcmp(json_string_value(json_object_get(ev, "msg")), "reply"))
        ex->interrupt_deadline_ms = 0; /* the request in flight is answered */
      fn(arg, ev);
      json_decref(ev);
      if (ex->fd_ev < 0) /* fn killed the executor */
        return NBF_EXECUTOR_EOF;
    }
    nbf_buf_consume(&ex->ev_line, start);
  }
  return NBF_EXECUTOR_EOF;
}

int64_t nbf_executor_interrupt(nbf_executor_t *ex, int64_t grace_ms) {
  if (ex->pid > 0)
    kill(ex->pid, SIGINT);
  if (!ex->interrupt_deadline_ms)
    ex->interrupt_deadline_ms = nbf_now_ms() + grace_ms;
  return ex->interrupt_deadline_ms;
}

bool nbf_executor_interrupt_expired(const nbf_executor_t *ex) {
  return ex->pid > 0 && ex->interrupt_deadline_ms && nbf_now_ms() >= ex->interrupt_deadline_ms;
}

/* The executor was reaped with status st: keep it, and remove its work
 * directory, which it cannot do itself after SIGKILL or a crash
 * (nbf_workdir.h; not when NBFORK_WORKDIR names one, the user's, kept). */
static void reaped(nbf_executor_t *ex, int st) {
  ex->wstatus = st;
  nbf_workdir_reaped(ex->pid);
  ex->pid = 0;
  ex->interrupt_deadline_ms = 0;
}

bool nbf_executor_reap(nbf_executor_t *ex, int *wstatus) {
  int st;
  if (ex->pid <= 0 || !nbf_proc_reaped(ex->pid, &st))
    return false;
  reaped(ex, st);
  *wstatus = st;
  return true;
}

int nbf_executor_kill(nbf_executor_t *ex) {
  if (ex->pid > 0)
    reaped(ex, nbf_proc_stop(ex->pid, 0, NULL, NULL));
  nbf_executor_close(ex);
  return ex->wstatus;
}

/* nbf_proc_wait's pump while the executor stops: discard what it writes,
 * so a full pipe cannot keep it from exiting. */
static void discard_output(void *arg, int ms) {
  nbf_executor_t *ex = arg;
  unsigned char junk[4096];
  struct pollfd p[3];
  int n = 0;
  int fds[3] = {ex->fd_out[0], ex->fd_out[1], ex->fd_ev};
  for (int i = 0; i < 3; i++)
    if (fds[i] >= 0)
      p[n++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
  poll(p, (nfds_t)n, ms);
  for (int i = 0; i < n; i++)
    if (p[i].revents)
      while (read(p[i].fd, junk, sizeof junk) > 0)
        ;
}

int nbf_executor_stop(nbf_executor_t *ex, int grace_ms) {
  if (ex->pid > 0) {
    close_fd(&ex->fd_req);
    close_fd(&ex->fd_in);
    int st;
    if (nbf_proc_wait(ex->pid, grace_ms, &st, discard_output, ex))
      reaped(ex, st);
    else
      reaped(ex, nbf_proc_stop(ex->pid, 500, discard_output, ex));
  }
  nbf_executor_close(ex);
  return ex->wstatus;
}

void nbf_executor_close(nbf_executor_t *ex) {
  close_fd(&ex->fd_in);
  close_fd(&ex->fd_req);
  close_fd(&ex->fd_out[0]);
  close_fd(&ex->fd_out[1]);
  close_fd(&ex->fd_ev);
  nbf_buf_free(&ex->req_pending);
  nbf_buf_free(&ex->in_pending);
  nbf_buf_free(&ex->ev_line);
}

static const struct {
  int sig;
  const char *abbrev, *desc;
} SIGNALS[] = {
    {SIGSEGV, "SIGSEGV", "Segmentation fault"},
    {SIGBUS, "SIGBUS", "Bus error"},
    {SIGFPE, "SIGFPE", "Floating point exception"},
    {SIGILL, "SIGILL", "Illegal instruction"},
    {SIGABRT, "SIGABRT", "Aborted"},
    {SIGKILL, "SIGKILL", "Killed"},
    {SIGTERM, "SIGTERM", "Terminated"},
    {SIGINT, "SIGINT", "Interrupted"},
    {SIGQUIT, "SIGQUIT", "Quit"},
    {SIGHUP, "SIGHUP", "Hangup"},
    {SIGPIPE, "SIGPIPE", "Broken pipe"},
    {SIGTRAP, "SIGTRAP", "Trace/breakpoint trap"},
    {SIGSYS, "SIGSYS", "Bad system call"},
    {SIGXCPU, "SIGXCPU", "CPU time limit exceeded"},
    {SIGXFSZ, "SIGXFSZ", "File size limit exceeded"},
    {SIGALRM, "SIGALRM", "Alarm clock"},
    {SIGUSR1, "SIGUSR1", "User defined signal 1"},
    {SIGUSR2, "SIGUSR2", "User defined signal 2"},
};

void nbf_executor_describe_exit(int wstatus, char *ename, size_t ename_len, char *how,
                                size_t how_len) {
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char *abbrev = NULL, *desc = NULL;
    for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++)
      if (SIGNALS[i].sig == sig) {
        abbrev = SIGNALS[i].abbrev;
        desc = SIGNALS[i].desc;
      }
    if (abbrev) {
      snprintf(ename, ename_len, "%s (%s)", desc, abbrev);
      snprintf(how, how_len, "was killed by signal %d (%s)%s", sig, abbrev,
               WCOREDUMP(wstatus) ? ", core dumped" : "");
    } else {
      snprintf(ename, ename_len, "Signal %d", sig);
      snprintf(how, how_len, "was killed by signal %d", sig);
    }
  } else if (WIFEXITED(wstatus)) {
    snprintf(ename, ename_len, "ExecutorExited");
    snprintf(how, how_len, "exited with status %d", WEXITSTATUS(wstatus));
  } else {
    snprintf(ename, ename_len, "ExecutorDied");
    snprintf(how, how_len, "ended (wait status 0x%x)", (unsigned)wstatus);
  }
}
