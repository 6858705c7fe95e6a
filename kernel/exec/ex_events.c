#include "ex_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "nbf_wire.h"
#include "nbf_util.h"

/* The line and its newline in one writev: one wake-up of the kernel,
 * which reads events by line (two writes woke it twice per event, the
 * first time for a line without its end). A partial write is finished
 * with nbf_write_all (a full non-blocking pipe). */
int ex_event_send_raw(const char *line, size_t len) {
  fflush(stdout);
  fflush(stderr);
  struct iovec v[2] = {{(void *)line, len}, {(void *)"\n", 1}};
  ssize_t w;
  do
    w = writev(NBF_WIRE_FD_EVENTS, v, 2);
  while (w < 0 && errno == EINTR);
  if (w < 0 && errno != EAGAIN)
    return -1;
  size_t done = w > 0 ? (size_t)w : 0;
  if (done < len && nbf_write_all(NBF_WIRE_FD_EVENTS, line + done, len - done))
    return -1;
  return done <= len ? nbf_write_all(NBF_WIRE_FD_EVENTS, "\n", 1) : 0;
}

int ex_event_send(json_t *obj) {
  if (!obj)
    return -1;
  char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(obj);
  if (!s)
    return -1;
  int rc = ex_event_send_raw(s, strlen(s));
  free(s);
  return rc;
}

int ex_event_reply_ok(json_t *extra) {
  json_t *o = json_pack("{s:s, s:s}", "msg", "reply", "status", "ok");
  if (extra) {
    json_object_update(o, extra);
    json_decref(extra);
  }
  return ex_event_send(o);
}

int ex_event_reply_error(const char *ename, const char *evalue, const char *traceback) {
  json_t *tb = json_array();
  const char *p = traceback ? traceback : evalue;
  while (p && *p) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    json_array_append_new(tb, json_stringn_nocheck(p, n));
    p = e ? e + 1 : NULL;
  }
  json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o}", "msg", "reply", "status", "error", "ename",
                        ename, "evalue", evalue, "traceback", tb);
  return ex_event_send(o);
}
