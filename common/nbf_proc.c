/* nbf_proc.c — one stop sequence for every child process (see nbf_proc.h). */
#define _GNU_SOURCE
#include "nbf_proc.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_util.h"

void nbf_proc_signal(pid_t pid, int sig) {
  if (pid <= 0)
    return;
  kill(-pid, sig);
  kill(pid, sig);
}

void nbf_proc_term(pid_t pid) {
  nbf_proc_signal(pid, SIGTERM);
  nbf_proc_signal(pid, SIGCONT);
}

void nbf_proc_kill(pid_t pid) {
  nbf_proc_signal(pid, SIGKILL);
}

bool nbf_proc_reaped(pid_t pid, int *wstatus) {
  int st = 0;
  pid_t r;
  while ((r = waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR)
    ;
  if (r == pid || (r < 0 && errno == ECHILD)) {
    *wstatus = r < 0 ? 0 : st;
    return true;
  }
  return false;
}

bool nbf_proc_wait(pid_t pid, int ms, int *wstatus, nbf_proc_pump_fn pump, void *arg) {
  int64_t deadline = nbf_now_ms() + ms;
  for (;;) {
    if (nbf_proc_reaped(pid, wstatus))
      return true;
    int64_t left = deadline - nbf_now_ms();
    if (left <= 0)
      return false;
    int step = left < 10 ? (int)left : 10;
    if (pump)
      pump(arg, step);
    else
      usleep((useconds_t)step * 1000);
  }
}

int nbf_proc_stop(pid_t pid, int grace_ms, nbf_proc_pump_fn pump, void *arg) {
  int st = 0;
  if (pid <= 0 || nbf_proc_reaped(pid, &st))
    return st;
  if (grace_ms > 0) {
    nbf_proc_term(pid);
    if (nbf_proc_wait(pid, grace_ms, &st, pump, arg))
      return st;
  }
  nbf_proc_kill(pid);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return st;
}
