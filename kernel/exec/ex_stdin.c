#define _GNU_SOURCE
#include "ex_stdin.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <string.h>
#include <unistd.h>

#include "ex_events.h"

static int g_allow;
static int g_saved_fd0 = -1; /* the kernel's pipe while fd 0 is /dev/null */

/* Discard answers still in the pipe (an input_request answered after its
 * cell was interrupted). */
static void drain_pipe(void) {
  int fl = fcntl(0, F_GETFL);
  if (fl < 0 || fcntl(0, F_SETFL, fl | O_NONBLOCK) < 0)
    return;
  char buf[4096];
  while (read(0, buf, sizeof buf) > 0)
    ;
  fcntl(0, F_SETFL, fl);
}

void ex_stdin_begin(int allow) {
  g_allow = allow;
  clearerr(stdin);
  __fpurge(stdin);
  if (allow) {
    drain_pipe();
    return;
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    return;
  g_saved_fd0 = fcntl(0, F_DUPFD_CLOEXEC, 10);
  if (g_saved_fd0 >= 0)
    dup2(devnull, 0);
  close(devnull);
}

void ex_stdin_end(void) {
  if (g_saved_fd0 >= 0) {
    dup2(g_saved_fd0, 0);
    close(g_saved_fd0);
    g_saved_fd0 = -1;
  }
  g_allow = 0;
}

/* Read one answer line from the kernel (fd 0) into buf. */
static ssize_t cookie_read(void *cookie, char *buf, size_t size) {
  (void)cookie;
  if (!g_allow || size == 0)
    return 0; /* EOF: nobody can answer */
  fflush(stdout);
  if (ex_event_send(
          json_pack("{s:s, s:s, s:b}", "msg", "input_request", "prompt", "", "password", 0)))
    return 0;
  size_t n = 0;
  while (n < size) {
    char c;
    ssize_t r = read(0, &c, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    buf[n++] = c;
    if (c == '\n')
      break;
  }
  return (ssize_t)n;
}

int ex_stdin_install(void) {
  cookie_io_functions_t io = {cookie_read, NULL, NULL, NULL};
  FILE *f = fopencookie(NULL, "r", io);
  if (!f)
    return -1;
  /* buffered: each refill of the buffer is one line asked for */
  stdin = f;
  return 0;
}
