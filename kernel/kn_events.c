/* kn_events.c — executor output and events, published on iopub (see
 * kn_kernel.h). Its death (EOF here included) and restarts are
 * kn_supervise.c's.
 *
 * Ordering (nbf_wire.h): the stdout/stderr pipes are drained before each
 * event is published, so text printed before a display or the reply is
 * shown before it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "kn_handlers.h"
#include "kn_kernel.h"
#include "kn_log.h"
#include "nbf_wire.h"

#define KN_STREAM_CHUNK (1u << 20) /* bytes per published stream message, at most */
#define KN_DRAIN_LIMIT (8u << 20)  /* bytes read per drain call, so control stays responsive */

void kn_kernel_drain_output(kn_kernel_t *k) {
  static const char *const names[2] = {"stdout", "stderr"};
  for (int w = 0; w < 2; w++) {
    size_t total = 0;
    while (k->ex.fd_out[w] >= 0 && total < KN_DRAIN_LIMIT) {
      nbf_buf_t raw = {0}, text = {0};
      int fd_before = k->ex.fd_out[w];
      int r = nbf_executor_read_stream(&k->ex, w, &raw, KN_STREAM_CHUNK);
      /* valid UTF-8 only: a split character waits for the next read; at
       * EOF a dangling partial one becomes U+FFFD */
      if (kn_utf8_decode(&k->dec[w], (const unsigned char *)raw.data, raw.len, r != 0, &text) !=
          KN_OK)
        r = -1;
      nbf_buf_free(&raw);
      if (text.len && !kn_kernel_output_muted(k))
        kn_kernel_publish(
            k, kn_kernel_output_parent(k), "stream",
            json_pack("{s:s, s:s%}", "name", names[w], "text", (const char *)text.data, text.len));
      total += text.len;
      size_t got = text.len;
      nbf_buf_free(&text);
      if (r != 0 || got == 0 || k->ex.fd_out[w] != fd_before)
        break;
    }
  }
}

static void on_event(void *arg, json_t *ev) {
  kn_kernel_t *k = arg;
  const char *type = json_string_value(json_object_get(ev, "msg"));
  kn_kernel_drain_output(k);
  if (strcmp(type, "reply") == 0) {
    if (!kn_pending_msg(k->pending)) {
      kn_log(KN_LOG_WARN, "executor sent a reply while no request was pending; ignored");
      return;
    }
    kn_pending_complete(k->pending, k, ev);
    return;
  }
  if (strcmp(type, "input_request") == 0) {
    kn_stdin_forward(k, ev);
    return;
  }
  if (kn_kernel_output_muted(k))
    return;
  json_t *content = json_deep_copy(ev);
  if (!content)
    return;
  json_object_del(content, "msg");
  if (strcmp(type, "execute_result") == 0) {
    const kn_exec_flags_t *exec = kn_pending_execute(k->pending);
    json_object_set_new(content, "execution_count",
                        json_integer(exec ? exec->execution_count : k->execution_count));
    if (!json_is_object(json_object_get(content, "data")))
      json_object_set_new(content, "data", json_object());
    if (!json_is_object(json_object_get(content, "metadata")))
      json_object_set_new(content, "metadata", json_object());
    const char *plain =
        json_string_value(json_object_get(json_object_get(content, "data"), "text/plain"));
    if (exec && plain)
      kn_pending_set_result_text(k->pending, plain);
  }
  kn_kernel_publish(k, kn_kernel_output_parent(k), type, content);
}

void kn_kernel_read_events(kn_kernel_t *k) {
  if (k->ex.fd_ev < 0)
    return;
  unsigned ignored = k->ex.ignored_events;
  int r = nbf_executor_read_events(&k->ex, on_event, k);
  if (k->ex.ignored_events != ignored)
    kn_log(KN_LOG_WARN, "executor: ignored %u event line(s) that are not JSON objects with \"msg\"",
           k->ex.ignored_events - ignored);
  (void)r; /* EOF (fd 4 closed, now -1): the executor is ending; kn_kernel_tick
             * answers for it, so this file stays below supervision */
}
