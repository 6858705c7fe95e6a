/*
 * nbf_util.c — see nbf_util.h.
 */
#define _GNU_SOURCE
#include "nbf_util.h"

#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t nbf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t nbf_now_ms(void) {
  return nbf_now_ns() / 1000000;
}

double nbf_now_s(void) {
  return (double)nbf_now_ns() * 1e-9;
}

int nbf_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* a full non-blocking pipe: wait for room rather than drop output */
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
        return -1;
      continue;
    }
    if (w < 0)
      return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

int nbf_self_exe(char *out, size_t size) {
  if (size < 2) {
    errno = ENAMETOOLONG;
    return -1;
  }
  ssize_t n = readlink("/proc/self/exe", out, size);
  if (n < 0)
    return -1;
  if ((size_t)n >= size) { /* readlink truncates silently */
    errno = ENAMETOOLONG;
    return -1;
  }
  out[n] = 0;
  return 0;
}

const char *nbf_strerror(int err, char *buf, size_t size) {
  /* GNU strerror_r: returns the text, in `buf` or a static string. */
  const char *s = strerror_r(err, buf, size);
  return s ? s : "unknown error";
}

/* nftw has no argument for its callback: the first failure's errno. */
static __thread int g_rm_errno;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  if (remove(path) != 0 && errno != ENOENT && !g_rm_errno)
    g_rm_errno = errno;
  return 0; /* go on: remove what can be removed */
}

int nbf_rmtree(const char *path) {
  g_rm_errno = 0;
  if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT && !g_rm_errno)
    g_rm_errno = errno;
  if (access(path, F_OK) != 0 && errno == ENOENT)
    return 0;
  errno = g_rm_errno ? g_rm_errno : EEXIST;
  return -1;
}

char *nbf_xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  return n < 0 ? NULL : s;
}
