/*
 * rt_spawn.c — see rt_spawn.h.
 */
#define _GNU_SOURCE
#include "rt_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_util.h"

#define RT_RUNNING (-2000)
#define RT_KILLED_AT_DEADLINE (-1000)

double rt_now(void) {
  return nbf_now_s();
}

int rt_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void setenv_int(const char *name, int v) {
  char b[32];
  snprintf(b, sizeof b, "%d", v);
  setenv(name, b, 1);
}

/* In the child: the environment of rank `r`, then the body. */
static void run_rank(const rt_spawn_opts_t *opts, int r, int port, rt_rank_fn fn, void *arg) {
  char run_id[64];
  snprintf(run_id, sizeof run_id, "test-%d-%d", (int)getppid(), port);
  setenv_int("RANK", r);
  setenv_int("LOCAL_RANK", r);
  setenv_int("WORLD_SIZE", opts->world);
  setenv_int("LOCAL_WORLD_SIZE", opts->world);
  setenv_int("MASTER_PORT", port);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("NBFORK_RUN_ID", run_id, 1);
  setenv("NBFORK_TIMEOUT_S", opts->timeout_s ? opts->timeout_s : "20", 1);
  if (!getenv("NBFORK_TEST_GPU")) /* CPU tests stay on CPU on GPU machines */
    setenv("ACCELERATE_USE_CPU", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  unsetenv("NBFORK_STORE_HOSTED");
  int rc = fn(r, opts->world, arg);
  fflush(stdout);
  fflush(stderr);
  _exit(rc);
}

/* Keep the last tail_size - 1 bytes of what was read in `tail`, so that a
 * line split between two reads still matches. */
static void keep_tail(char *tail, size_t tail_size, const char *buf, size_t n) {
  size_t have = strlen(tail);
  if (n >= tail_size) {
    buf += n - (tail_size - 1);
    n = tail_size - 1;
    have = 0;
  } else if (have + n >= tail_size) {
    size_t drop = have + n - (tail_size - 1);
    memmove(tail, tail + drop, have - drop);
    have -= drop;
  }
  memcpy(tail + have, buf, n);
  tail[have + n] = '\0';
}

/* Copy what rank 0 wrote to stderr through to ours; 1 once it has said
 * that the store's port is taken. */
static int port_taken(int fd, int port, char *tail, size_t tail_size) {
  char buf[1024], want[64];
  snprintf(want, sizeof want, "port %d is already in use", port);
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    nbf_write_all(2, buf, (size_t)n);
    keep_tail(tail, tail_size, buf, (size_t)n);
  }
  return strstr(tail, want) != NULL;
}

static void kill_running(pid_t *pids, int *st, int started, int why) {
  for (int r = 0; r < started; r++)
    if (st[r] == RT_RUNNING) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
      st[r] = why;
    }
}

/* Reap the ranks until all have exited or the deadline passes. Returns 1
 * when rank 0 reported its port taken (the ranks are killed: try again). */
static int wait_ranks(pid_t *pids, int *st, int started, int deadline_s, int errfd, int port) {
  double deadline = rt_now() + deadline_s;
  char tail[512] = "";
  int left = started;
  while (left > 0) {
    int ws;
    pid_t p = waitpid(-1, &ws, WNOHANG);
    for (int r = 0; p > 0 && r < started; r++)
      if (pids[r] == p) {
        st[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : -WTERMSIG(ws);
        left--;
      }
    if (p > 0)
      continue;
    if (port_taken(errfd, port, tail, sizeof tail)) {
      kill_running(pids, st, started, RT_KILLED_AT_DEADLINE);
      return 1;
    }
    if (rt_now() > deadline) {
      kill_running(pids, st, started, RT_KILLED_AT_DEADLINE);
      break;
    }
    struct pollfd pfd = {errfd, POLLIN, 0};
    poll(&pfd, 1, 2); /* rank 0's stderr, or 2 ms: then reap again */
  }
  port_taken(errfd, port, tail, sizeof tail); /* the rest of rank 0's text */
  return 0;
}

/* One start of the ranks on `port`; 1 when the port was taken. */
static int spawn_once(const rt_spawn_opts_t *opts, int port, rt_rank_fn fn, void *arg, int *st) {
  int started = opts->started > 0 ? opts->started : opts->world;
  int deadline_s = opts->deadline_s > 0 ? opts->deadline_s : 60;
  int errp[2];
  if (pipe2(errp, O_CLOEXEC) != 0) {
    perror("rt_spawn: pipe");
    exit(2);
  }
  pid_t *pids = calloc((size_t)started, sizeof *pids);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < started; r++) {
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      exit(2);
    }
    if (p == 0) {
      if (r == 0)
        dup2(errp[1], 2);
      close(errp[0]);
      close(errp[1]);
      run_rank(opts, r, port, fn, arg);
    }
    pids[r] = p;
    st[r] = RT_RUNNING;
  }
  close(errp[1]);
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  int taken = wait_ranks(pids, st, started, deadline_s, errp[0], port);
  close(errp[0]);
  free(pids);
  return taken;
}

int rt_spawn(const rt_spawn_opts_t *opts, rt_rank_fn fn, void *arg, int *status) {
  int started = opts->started > 0 ? opts->started : opts->world;
  int deadline_s = opts->deadline_s > 0 ? opts->deadline_s : 60;
  int *st = status ? status : calloc((size_t)opts->world, sizeof *st);
  int taken = 1;
  for (int t = 0; taken && t < RT_SPAWN_TRIES; t++) {
    int port = rt_free_port();
    if (port <= 0) {
      fprintf(stderr, "rt_spawn: no free port\n");
      break;
    }
    taken = spawn_once(opts, port, fn, arg, st);
    if (taken)
      fprintf(stderr, "rt_spawn: port %d was taken before rank 0 bound it: again\n", port);
  }
  if (taken) { /* no port, or every one tried was taken */
    if (!status)
      free(st);
    return 1;
  }
  int rc = 0;
  for (int r = 0; r < started; r++)
    if (st[r] != 0) {
      if (st[r] == RT_KILLED_AT_DEADLINE)
        fprintf(stderr, "rt_spawn: rank %d still running after %d s: killed\n", r, deadline_s);
      else if (st[r] < 0)
        fprintf(stderr, "rt_spawn: rank %d killed by signal %d\n", r, -st[r]);
      else
        fprintf(stderr, "rt_spawn: rank %d exited with %d\n", r, st[r]);
      rc = 1;
    }
  if (!status)
    free(st);
  return rc;
}
