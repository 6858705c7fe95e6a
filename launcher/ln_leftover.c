/*
 * ln_leftover.c — stop what the workers left running (see ln_leftover.h).
 */
#define _GNU_SOURCE
#include "ln_leftover.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_util.h"

/* The parent pid in /proc/<pid>/stat, or -1. The command name (field 2)
 * may hold spaces and parentheses: fields resume after the last ')'. */
static pid_t stat_ppid(const char *pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  int ppid;
  if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
    return -1;
  return (pid_t)ppid;
}

static int push(pid_t **out, int *count, int *cap, pid_t pid) {
  if (*count == *cap) {
    pid_t *p = realloc(*out, (size_t)(*cap = *cap ? *cap * 2 : 16) * sizeof **out);
    if (!p)
      return -1;
    *out = p;
  }
  (*out)[(*count)++] = pid;
  return 0;
}

/* The kernel's own list (CONFIG_PROC_CHILDREN): each thread's children.
 * -1 when the files do not exist here. */
static int children_from_tasks(pid_t **out, int *count, int *cap) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
    FILE *f = fopen(path, "re");
    if (!f) {
      rc = -1;
      break;
    }
    int pid;
    while (fscanf(f, "%d", &pid) == 1)
      if (push(out, count, cap, (pid_t)pid))
        break;
    fclose(f);
  }
  closedir(d);
  return rc;
}

pid_t *ln_children(int *count) {
  *count = 0;
  pid_t *out = NULL;
  int cap = 0;
  if (children_from_tasks(&out, count, &cap) == 0)
    return out;
  *count = 0; /* not built in: every process's parent, from its stat */
  DIR *d = opendir("/proc");
  if (!d)
    return out;
  pid_t self = getpid();
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && stat_ppid(e->d_name) == self &&
        push(&out, count, &cap, (pid_t)atoi(e->d_name)))
      break;
  closedir(d);
  return out;
}

void ln_leftovers_begin(ln_leftovers_t *l) {
  memset(l, 0, sizeof *l);
  l->before = ln_children(&l->nbefore);
  prctl(PR_GET_CHILD_SUBREAPER, &l->was_subreaper);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

static int was_there(const ln_leftovers_t *l, pid_t pid) {
  for (int i = 0; i < l->nbefore; i++)
    if (l->before[i] == pid)
      return 1;
  return 0;
}

/* One round: signal the groups and the new children, reap the children
 * that died. Returns how many processes may still be alive. */
static int sweep_round(const ln_leftovers_t *l, const pid_t *groups, int n, int sig, int *reaped) {
  int alive = 0;
  for (int i = 0; i < n; i++)
    if (groups[i] > 0 && kill(-groups[i], sig) == 0) {
      alive++;
      if (sig == SIGTERM) /* nbf_proc_term's policy: a stopped one gets its TERM */
        kill(-groups[i], SIGCONT);
    }
  int nc;
  pid_t *kids = ln_children(&nc);
  for (int i = 0; i < nc; i++) {
    if (was_there(l, kids[i]))
      continue;
    kill(kids[i], sig);
    if (sig == SIGTERM)
      kill(kids[i], SIGCONT);
    int st;
    if (waitpid(kids[i], &st, WNOHANG) == kids[i])
      (*reaped)++;
    else
      alive++;
  }
  free(kids);
  return alive;
}

int ln_leftovers_stop(ln_leftovers_t *l, const pid_t *groups, int n, int grace_ms, int kill_ms,
                      void (*pump)(void *arg, int ms), void *arg) {
  if (l->done)
    return 0;
  l->done = 1;
  int reaped = 0, sig = SIGTERM;
  int64_t t0 = nbf_now_ms();
  for (;;) {
    int64_t t = nbf_now_ms() - t0;
    if (sig == SIGTERM && t >= grace_ms)
      sig = SIGKILL;
    if (!sweep_round(l, groups, n, sig, &reaped) || t >= (int64_t)grace_ms + kill_ms)
      break;
    if (pump)
      pump(arg, 10);
    else
      usleep(10000);
  }
  prctl(PR_SET_CHILD_SUBREAPER, l->was_subreaper);
  free(l->before);
  l->before = NULL;
  return reaped;
}
