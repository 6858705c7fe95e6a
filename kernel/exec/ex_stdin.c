#define _GNU_SOURCE
#include "ex_stdin.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ex_events.h"

static int g_allow;

void ex_stdin_allow(int allow) { g_allow = allow; }

/* Read one answer line from the kernel (fd 0) into buf. */
static ssize_t cookie_read(void *cookie, char *buf, size_t size) {
  (void)cookie;
  if (!g_allow || size == 0)
    return 0; /* EOF: nobody can answer */
  fflush(stdout);
  if (ex_event_send(json_pack("{s:s, s:s, s:b}", "msg", "input_request", "prompt", "",
                              "password", 0)))
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
