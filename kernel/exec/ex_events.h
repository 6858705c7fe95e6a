/*
 * ex_events — the executor's side of the event stream to the kernel
 * (fd 4, one JSON object per line; see common/nbf_wire.h).
 *
 * Every writer flushes stdout and stderr first, so output printed before
 * an event reaches the kernel before it (the ordering contract).
 */
#ifndef EX_EVENTS_H
#define EX_EVENTS_H

#include <jansson.h>
#include <stddef.h>

/* Send `obj` (stolen) as one event line. Returns 0 or -1. */
int ex_event_send(json_t *obj);
/* Send a line that is already JSON (a worker's display event), adding
 * the newline. */
int ex_event_send_raw(const char *line, size_t len);
/* The terminating event of a request: status ok, with `extra` fields
 * (stolen, may be NULL). */
int ex_event_reply_ok(json_t *extra);
/* The terminating event: status error. `traceback` is split on newlines
 * into the traceback list (NULL = [evalue]). */
int ex_event_reply_error(const char *ename, const char *evalue, const char *traceback);

#endif
