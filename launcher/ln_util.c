/*
 * ln_util.c — see ln_util.h.
 */
#define _GNU_SOURCE
#include "ln_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

int ln_write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

char *ln_xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *r = NULL;
  if (vasprintf(&r, fmt, ap) < 0)
    r = NULL;
  va_end(ap);
  return r;
}
