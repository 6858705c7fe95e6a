/* kn_kernel.c — kernel state, dispatch, request queue (see kn_kernel.h). */
#define _GNU_SOURCE
#include "kn_kernel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_log.h"
#include "nbf_wire.h"
#include "nbf_param.h"
#include "nbf_util.h"

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
  if (kn_pending_execute(k->pending))
    return kn_pending_msg(k->pending)->header;
  return k->last_parent;
}

bool kn_kernel_output_muted(const kn_kernel_t *k) {
  const kn_exec_flags_t *x = kn_pending_execute(k->pending);
  return x && x->silent;
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
  if (kn_uuid4(k->session) != KN_OK || !(k->history = kn_history_new()) ||
      !(k->pending = kn_pending_new())) {
    kn_history_destroy(&k->history);
    free(k);
    return NULL;
  }
  snprintf(k->username, sizeof k->username, "%s", nbf_param_USER());
  snprintf(k->executor_path, sizeof k->executor_path, "%s", executor_path ? executor_path : "");
  return k;
}

void kn_kernel_destroy(kn_kernel_t **self_p) {
  kn_kernel_t *k = NBF_TAKE(self_p);
  if (!k)
    return;
  nbf_executor_stop(&k->ex, 1000);
  kn_pending_destroy(&k->pending);
  while (k->queue_head) {
    kn_queued_t *q = k->queue_head;
    k->queue_head = q->next;
    kn_msg_destroy(&q->msg);
    free(q);
  }
  json_decref(k->last_parent);
  kn_history_destroy(&k->history);
  free(k);
}

/* ----------------------------------------------------------------- queue */

kn_result_t kn_kernel_enqueue(kn_kernel_t *k, kn_msg_t *msg) {
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

kn_msg_t *kn_kernel_dequeue(kn_kernel_t *k, bool *aborted) {
  kn_queued_t *q = k->queue_head;
  if (!q)
    return NULL;
  k->queue_head = q->next;
  if (!k->queue_head)
    k->queue_tail = NULL;
  kn_msg_t *msg = q->msg;
  *aborted = q->aborted;
  free(q);
  return msg;
}

void kn_kernel_drain_shell(kn_kernel_t *k) {
  kn_msg_t *m;
  kn_result_t r;
  while ((r = k->io.recv(k->io.self, KN_CH_SHELL, &m)) != KN_ERR_AGAIN) {
    if (r == KN_OK)
      kn_kernel_enqueue(k, m);
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
                           const kn_exec_flags_t *exec, json_t *wire_request) {
  kn_pending_begin(k->pending, ch, req, finish, exec);
  if (nbf_executor_send(&k->ex, wire_request) != 0)
    /* The pipe is closed: the executor is dying; its EOF/exit will be
     * seen by the loop and answered through kn_kernel_executor_died. */
    kn_log(KN_LOG_WARN, "could not send the %s request to the executor",
           json_string_value(json_object_get(wire_request, "msg")));
}

void kn_kernel_finish_pending(kn_kernel_t *k) {
  if (!kn_pending_msg(k->pending))
    return;
  kn_kernel_status(k, kn_pending_msg(k->pending), "idle");
  kn_pending_end(k->pending);
}
