/*
 * rt_spawn.c — see rt_spawn.h.
 */
#define _GNU_SOURCE
#include "rt_spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
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

int rt_spawn(const rt_spawn_opts_t *opts, rt_rank_fn fn, void *arg, int *status) {
  int world = opts->world;
  int started = opts->started > 0 ? opts->started : world;
  int deadline_s = opts->deadline_s > 0 ? opts->deadline_s : 60;
  int port = rt_free_port();
  if (port <= 0) {
    fprintf(stderr, "rt_spawn: no free port\n");
    return 1;
  }
  char run_id[64];
  snprintf(run_id, sizeof run_id, "test-%d-%d", (int)getpid(), port);
  pid_t *pids = calloc((size_t)world, sizeof *pids);
  int *st = status ? status : calloc((size_t)world, sizeof *st);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < started; r++) {
    pid_t p = fork();
    if (p < 0) {
      perror("fork");
      exit(2);
    }
    if (p == 0) {
      setenv_int("RANK", r);
      setenv_int("LOCAL_RANK", r);
      setenv_int("WORLD_SIZE", world);
      setenv_int("LOCAL_WORLD_SIZE", world);
      setenv_int("MASTER_PORT", port);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("NBFORK_RUN_ID", run_id, 1);
      setenv("NBFORK_TIMEOUT_S", opts->timeout_s ? opts->timeout_s : "20", 1);
      if (!getenv("NBFORK_TEST_GPU")) /* CPU tests stay on CPU on GPU machines */
        setenv("ACCELERATE_USE_CPU", "1", 1);
      setenv("OPENBLAS_NUM_THREADS", "1", 1);
      unsetenv("NBFORK_STORE_HOSTED");
      int rc = fn(r, world, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = p;
    st[r] = -2000; /* running */
  }
  double deadline = rt_now() + deadline_s;
  int left = started;
  while (left > 0) {
    int ws;
    pid_t p = waitpid(-1, &ws, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < started; r++)
        if (pids[r] == p) {
          st[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : -WTERMSIG(ws);
          left--;
        }
      continue;
    }
    if (rt_now() > deadline) {
      for (int r = 0; r < started; r++)
        if (st[r] == -2000) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          st[r] = -1000;
          left--;
        }
      break;
    }
    usleep(2000);
  }
  int rc = 0;
  for (int r = 0; r < started; r++)
    if (st[r] != 0) {
      if (st[r] == -1000)
        fprintf(stderr, "rt_spawn: rank %d still running after %d s: killed\n", r, deadline_s);
      else if (st[r] < 0)
        fprintf(stderr, "rt_spawn: rank %d killed by signal %d\n", r, -st[r]);
      else
        fprintf(stderr, "rt_spawn: rank %d exited with %d\n", r, st[r]);
      rc = 1;
    }
  free(pids);
  if (!status)
    free(st);
  return rc;
}
