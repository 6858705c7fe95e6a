/* kn_kernel.c — kernel state, dispatch, request queue (see kn_kernel.h). */
#define _GNU_SOURCE
#include "kn_kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_handlers.h"
#include "kn_log.h"
#include "nbf_wire.h"
#include "nbf_param.h"

/* ---------------------------------------------------------------- sending */

kn_result_t kn_kernel_reply(kn_kernel_t *k, kn_channel_t ch, const kn_msg_t *req,
                            const char *reply_type, json_t *content) {
  kn_msg_t *m = kn_msg_new(reply_type, k->session, k->username, req->header, content);
  if (!m)
    return KN_ERR_NOMEM;
  kn_result_t r = kn_msg_copy_ids(m, req);
  if (r == KN_OK)
    r = k->io.send(k->io.self, ch, m);
  kn_msg_destroy(&m);
  return r;
}

kn_result_t kn_kernel_publish(kn_kernel_t *k, json_t *parent_header, const char *msg_type,
                              json_t *content) {
  kn_msg_t *m = kn_msg_new(msg_type, k->session, k->username, parent_header, content);
  if (!m)
    return KN_ERR_NOMEM;
  kn_result_t r = k->io.send(k->io.self, KN_CH_IOPUB, m);
  kn_msg_destroy(&m);
  return r;
}

void kn_kernel_status(kn_kernel_t *k, const kn_msg_t *req, const char *state) {
  kn_kernel_publish(k, req ? req->header : NULL, "status",
                    json_pack("{s:s}", "execution_state", state));
}

json_t *kn_kernel_output_parent(kn_kernel_t *k) {
  if (k->pending.msg && k->pending.is_execute)
    return k->pending.msg->header;
  return k->last_parent;
}

bool kn_kernel_output_muted(const kn_kernel_t *k) {
  return k->pending.msg && k->pending.is_execute && k->pending.silent;
}

/* ------------------------------------------------------------- accessors */

const char *kn_content_str(const kn_msg_t *req, const char *key, const char *dflt) {
  const char *s = json_string_value(json_object_get(req->content, key));
  return s ? s : dflt;
}

bool kn_content_bool(const kn_msg_t *req, const char *key, bool dflt) {
  json_t *v = json_object_get(req->content, key);
  if (json_is_boolean(v))
    return json_is_true(v);
  if (json_is_integer(v))
    return json_integer_value(v) != 0;
  return dflt;
}

json_int_t kn_content_int(const kn_msg_t *req, const char *key, json_int_t dflt) {
  json_t *v = json_object_get(req->content, key);
  if (json_is_integer(v))
    return json_integer_value(v);
  if (json_is_real(v))
    return (json_int_t)json_real_value(v);
  return dflt;
}

/* ------------------------------------------------------------- lifecycle */

kn_kernel_t *kn_kernel_new(kn_io_t io, const char *executor_path) {
  kn_kernel_t *k = calloc(1, sizeof *k);
  if (!k)
    return NULL;
  k->io = io;
  nbf_executor_init(&k->ex);
  k->interrupt_grace_ms = NBF_WIRE_INTERRUPT_GRACE_MS;
  if (kn_uuid4(k->session) != KN_OK || !(k->history = kn_history_new())) {
    kn_history_destroy(&k->history);
    free(k);
    return NULL;
  }
  snprintf(k->username, sizeof k->username, "%s", nbf_param_str(NBF_P_USER));
  snprintf(k->executor_path, sizeof k->executor_path, "%s", executor_path ? executor_path : "");
  return k;
}

static void free_pending(kn_pending_t *p) {
  kn_msg_destroy(&p->msg);
  free(p->result_text);
  memset(p, 0, sizeof *p);
}

void kn_kernel_destroy(kn_kernel_t **self_p) {
  if (!self_p || !*self_p)
    return;
  kn_kernel_t *k = *self_p;
  nbf_executor_stop(&k->ex, 1000);
  free_pending(&k->pending);
  while (k->queue_head) {
    kn_queued_t *q = k->queue_head;
    k->queue_head = q->next;
    kn_msg_destroy(&q->msg);
    free(q);
  }
  json_decref(k->last_parent);
  kn_history_destroy(&k->history);
  free(k);
  *self_p = NULL;
}

/* -------------------------------------------------------------- dispatch */

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

static kn_result_t enqueue(kn_kernel_t *k, kn_msg_t *msg) {
  kn_queued_t *q = calloc(1, sizeof *q);
  if (!q) {
    kn_msg_destroy(&msg);
    return KN_ERR_NOMEM;
  }
  q->msg = msg;
  if (k->queue_tail)
    k->queue_tail->next = q;
  else
    k->queue_head = q;
  k->queue_tail = q;
  return KN_OK;
}

void kn_kernel_on_message(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *msg) {
  switch (ch) {
  case KN_CH_SHELL:
    enqueue(k, msg);
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
  while (!k->stop && !k->pending.msg && k->queue_head) {
    kn_queued_t *q = k->queue_head;
    k->queue_head = q->next;
    if (!k->queue_head)
      k->queue_tail = NULL;
    kn_msg_t *msg = q->msg;
    bool aborted = q->aborted;
    free(q);
    if (aborted)
      kn_execute_abort(k, msg);
    else
      dispatch(k, KN_CH_SHELL, msg);
  }
}

void kn_kernel_drain_shell(kn_kernel_t *k) {
  kn_msg_t *m;
  kn_result_t r;
  while ((r = k->io.recv(k->io.self, KN_CH_SHELL, &m)) != KN_ERR_AGAIN) {
    if (r == KN_OK)
      enqueue(k, m);
    else if (r != KN_ERR_AUTH && r != KN_ERR_PROTOCOL)
      break;
  }
}

void kn_kernel_abort_queued(kn_kernel_t *k) {
  kn_kernel_drain_shell(k);
  for (kn_queued_t *q = k->queue_head; q; q = q->next)
    if (strcmp(kn_msg_type(q->msg), "execute_request") == 0)
      q->aborted = true;
}

/* --------------------------------------------------- pending request */

void kn_kernel_set_pending(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req, kn_finish_fn finish,
                           json_t *wire_request) {
  k->pending.msg = req;
  k->pending.channel = ch;
  k->pending.finish = finish;
  if (nbf_executor_send(&k->ex, wire_request) != 0)
    /* The pipe is closed: the executor is dying; its EOF/exit will be
     * seen by the loop and answered through kn_kernel_executor_died. */
    kn_log(KN_LOG_WARN, "could not send the %s request to the executor",
           json_string_value(json_object_get(wire_request, "msg")));
}

void kn_kernel_finish_pending(kn_kernel_t *k) {
  if (!k->pending.msg)
    return;
  kn_kernel_status(k, k->pending.msg, "idle");
  free_pending(&k->pending);
}
