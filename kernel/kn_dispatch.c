/* kn_dispatch.c — the kernel's request dispatch (see kn_kernel.h): one
 * table of handlers (after xeus's xkernel_core), shell requests queued and
 * served one at a time, control requests at once, stdin replies to
 * kn_stdin. Above the handlers, which call the kernel's state and sending
 * (kn_kernel.c) but never this file. */
#define _GNU_SOURCE
#include <string.h>

#include "kn_handlers.h"
#include "kn_kernel.h"
#include "kn_log.h"

static const struct {
  const char *type;
  kn_handler_fn fn;
} HANDLERS[] = {
    {"kernel_info_request", kn_kernel_info_request}, {"execute_request", kn_execute_request},
    {"complete_request", kn_complete_request},       {"inspect_request", kn_inspect_request},
    {"is_complete_request", kn_is_complete_request}, {"history_request", kn_history_request},
    {"comm_info_request", kn_comm_info_request},     {"comm_open", kn_comm_open},
    {"shutdown_request", kn_shutdown_request},       {"interrupt_request", kn_interrupt_request},
};

/* Handle one shell or control request, wrapped in status busy/idle. */
static void dispatch(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  const char *type = kn_msg_type(req);
  kn_log(KN_LOG_DEBUG, "%s: %s %s", kn_channel_name(ch), type, kn_msg_id(req));
  kn_kernel_status(k, req, "busy");
  kn_handler_fn fn = NULL;
  for (size_t i = 0; i < sizeof HANDLERS / sizeof HANDLERS[0]; i++)
    if (strcmp(type, HANDLERS[i].type) == 0)
      fn = HANDLERS[i].fn;
  if (!fn) {
    if (strcmp(type, "comm_msg") != 0 && strcmp(type, "comm_close") != 0)
      kn_log(KN_LOG_WARN, "unknown message type \"%s\" on %s, ignored", type, kn_channel_name(ch));
    kn_kernel_status(k, req, "idle");
    kn_msg_destroy(&req);
    return;
  }
  /* Keep the header for the idle message: the handler owns req now. */
  json_t *header = json_incref(req->header);
  if (fn(k, ch, req))
    kn_kernel_publish(k, header, "status", json_pack("{s:s}", "execution_state", "idle"));
  json_decref(header);
}

void kn_kernel_on_message(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *msg) {
  switch (ch) {
  case KN_CH_SHELL:
    kn_kernel_enqueue(k, msg);
    break;
  case KN_CH_CONTROL:
    dispatch(k, ch, msg);
    break;
  case KN_CH_STDIN:
    kn_stdin_on_reply(k, msg);
    break;
  default:
    kn_msg_destroy(&msg);
  }
}

void kn_kernel_process_queue(kn_kernel_t *k) {
  kn_msg_t *msg;
  bool aborted;
  while (!k->stop && !kn_pending_msg(k->pending) && (msg = kn_kernel_dequeue(k, &aborted))) {
    if (aborted)
      kn_execute_abort(k, msg);
    else
      dispatch(k, KN_CH_SHELL, msg);
  }
}
