/*
 * rt_display.h — for tests of the display API: point NBFORK_DISPLAY_FD
 * (the channel nbf_display.c writes events to, see common/nbf_wire.h) at a
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

/* Point stdout (fd 1) at a fresh pipe, after flushing what stdio holds:
 * returns the pipe's non-blocking read end and keeps the old stdout in
 * *saved for rt_restore_stdout. */
static inline int rt_capture_stdout(int *saved) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  fflush(stdout);
  *saved = dup(1);
  dup2(p[1], 1);
  close(p[1]); /* fd 1 is now the only write end */
  return p[0];
}

/* Flush stdio into the pipe and put the old stdout back (the pipe then
 * has no writer: a read gets what was written, then end of file). */
static inline void rt_restore_stdout(int saved) {
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
}

#endif
