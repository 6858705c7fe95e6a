/*
 * nbf_workdir.c — the executor's private work directory and the sweep of
 * those whose owner died (see nbf_workdir.h).
 */
#define _GNU_SOURCE
#include "nbf_workdir.h"
#include "nbf_param.h"
#include "nbf_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "nbfork-"

static int touch_at(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
}

int nbf_workdir_create(const char *tmp, int keep, char *out, size_t len, int *lock_fd) {
  *lock_fd = -1;
  int n = snprintf(out, len, "%s/" PREFIX "%d-XXXXXX", tmp, (int)getpid());
  if (n < 0 || (size_t)n >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  if (!mkdtemp(out)) /* mode 0700 whatever the umask */
    return -1;
  int fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || touch_at(fd, NBF_WORKDIR_LOCKED) != 0 ||
      (keep && touch_at(fd, NBF_WORKDIR_KEEP) != 0)) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    nbf_workdir_remove(out);
    errno = e;
    return -1;
  }
  *lock_fd = fd;
  return 0;
}

int nbf_workdir_remove(const char *path) {
  return nbf_rmtree(path);
}

/* The owner pid in a name "nbfork-<pid>-XXXXXX", or 0 when it is not one. */
static pid_t name_pid(const char *name) {
  if (strncmp(name, PREFIX, sizeof PREFIX - 1) != 0)
    return 0;
  char *end;
  long pid = strtol(name + sizeof PREFIX - 1, &end, 10);
  if (pid <= 0 || end == name + sizeof PREFIX - 1 || *end != '-' || strlen(end + 1) != 6)
    return 0;
  return (pid_t)pid;
}

/* Is the directory open at fd (this user's real directory, not kept)
 * provably free? Its lock must be takeable; then the owner is dead when
 * its pid is gone or when it had taken the lock (NBF_WORKDIR_LOCKED),
 * since only its exit (and its workers') releases it. The lock taken here
 * goes with fd. */
static int owner_dead(int fd, pid_t pid) {
  if (flock(fd, LOCK_EX | LOCK_NB) != 0)
    return 0;
  int gone = kill(pid, 0) != 0 && errno == ESRCH;
  return gone || faccessat(fd, NBF_WORKDIR_LOCKED, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* One entry of the sweep: 1 when removed. A directory marked keep
 * (NBF_WORKDIR_KEEP) never is; with owner 0, only one whose owner is
 * provably dead. */
static int sweep_one(const char *tmp, int dirfd, const char *name, pid_t owner) {
  pid_t pid = name_pid(name);
  struct stat st;
  if (!pid || (owner > 0 && pid != owner))
    return 0;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid())
    return 0;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return 0;
  int removable = faccessat(fd, NBF_WORKDIR_KEEP, F_OK, AT_SYMLINK_NOFOLLOW) != 0 &&
                  (owner > 0 || owner_dead(fd, pid));
  close(fd); /* releases the lock owner_dead may have taken */
  char path[4096];
  if (!removable || snprintf(path, sizeof path, "%s/%s", tmp, name) >= (int)sizeof path)
    return 0;
  return nbf_workdir_remove(path) == 0;
}

int nbf_workdir_sweep(const char *tmp, pid_t owner) {
  DIR *d = opendir(tmp);
  if (!d)
    return -1;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    removed += sweep_one(tmp, dirfd(d), e->d_name, owner);
  closedir(d);
  return removed;
}

int nbf_workdir_reaped(pid_t pid) {
  if (nbf_param_raw(NBF_P_NBFORK_WORKDIR))
    return 0;
  int n = nbf_workdir_sweep(nbf_param_TMPDIR(), pid);
  return n > 0 ? n : 0;
}
