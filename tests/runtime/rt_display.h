/*
 * rt_display.h — for tests of the display API: point NBFORK_DISPLAY_FD
 * (the channel nbf_display.c writes events to, see kernel/kn_wire.h) at a
 * fresh pipe and return its non-blocking read end.
 */
#ifndef RT_DISPLAY_H
#define RT_DISPLAY_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rt_test.h"

static inline int rt_display_attach(void) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* room for every event of a test */
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  char b[16];
  snprintf(b, sizeof b, "%d", p[1]);
  setenv("NBFORK_DISPLAY_FD", b, 1);
  return p[0];
}

#endif
