/* kn_signals.c — self-pipe signal handling (see kn_signals.h). */
#define _GNU_SOURCE
#include "kn_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int pipe_w = -1;

static void on_signal(int sig) {
  int saved = errno;
  char c = sig == SIGINT ? KN_SIGNAL_INTERRUPT : KN_SIGNAL_TERMINATE;
  if (pipe_w >= 0) {
    ssize_t n = write(pipe_w, &c, 1); /* async-signal-safe; full pipe: drop */
    (void)n;
  }
  errno = saved;
}

static void kn_sigset(sigset_t *s) {
  sigemptyset(s);
  sigaddset(s, SIGINT);
  sigaddset(s, SIGTERM);
  sigaddset(s, SIGHUP);
}

void kn_signals_block(void) {
  sigset_t s;
  kn_sigset(&s);
  pthread_sigmask(SIG_BLOCK, &s, NULL);
  signal(SIGPIPE, SIG_IGN);
}

kn_result_t kn_signals_install(int *fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
    return KN_ERR_SYSTEM;
  pipe_w = p[1];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigset_t s;
  kn_sigset(&s);
  pthread_sigmask(SIG_UNBLOCK, &s, NULL);
  *fd = p[0];
  return KN_OK;
}

int kn_signals_next(int fd) {
  char c;
  return read(fd, &c, 1) == 1 ? c : 0;
}
