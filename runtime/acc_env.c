/*
 * acc_env.c — reading the environment the launcher sets (names as torch
 * and Accelerate use them) and the monotonic clock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#include "acc_internal.h"

const char *acc__env_str(const char *name, const char *def) {
  const char *v = getenv(name);
  return v && *v ? v : def;
}

long acc__env_long(const char *name, long def, int *ok) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end) {
    fprintf(stderr, "nbfork: environment variable %s='%s' is not an integer\n", name, v);
    if (ok)
      *ok = 0;
    return -1;
  }
  return x;
}

int acc__env_bool(const char *name, int def) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  static const char *yes[] = {"1", "true", "yes", "on", "y"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
    if (strcasecmp(v, yes[i]) == 0)
      return 1;
  return 0;
}

double acc__now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
