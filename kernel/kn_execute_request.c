/* kn_execute_request.c — execute_request (messaging spec "Execute").
 *
 * Order on iopub: status busy, execute_input, outputs (stream,
 * display_data, execute_result, error), then execute_reply on shell, then
 * status idle. execution_count grows only for store_history && !silent;
 * a silent request publishes nothing but busy/idle. After an error with
 * stop_on_error, queued execute_requests are answered "aborted". */
#include <string.h>

#include "kn_handlers.h"
#include "kn_log.h"

static void execute_finish(kn_kernel_t *k, json_t *reply);

/* Answer req with an error without running it (no executor). */
static void reply_error_now(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req, bool silent, int count,
                            const char *ename, const char *evalue) {
  char line[1200];
  snprintf(line, sizeof line, "%s: %s", ename, evalue);
  if (!silent)
    kn_kernel_publish(
        k, req->header, "error",
        json_pack("{s:s, s:s, s:[s]}", "ename", ename, "evalue", evalue, "traceback", line));
  kn_kernel_reply(k, ch, req, "execute_reply",
                  json_pack("{s:s, s:i, s:s, s:s, s:[s]}", "status", "error", "execution_count",
                            count, "ename", ename, "evalue", evalue, "traceback", line));
}

bool kn_execute_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  json_t *code_v = json_object_get(req->content, "code");
  const char *code = json_string_value(code_v);
  bool silent = kn_content_bool(req, "silent", false);
  bool store_history = !silent && kn_content_bool(req, "store_history", true);
  bool allow_stdin = kn_content_bool(req, "allow_stdin", false);
  bool stop_on_error = kn_content_bool(req, "stop_on_error", true);

  if (!code) {
    reply_error_now(k, ch, req, silent, k->execution_count, "ProtocolError",
                    "execute_request content has no \"code\" string");
    kn_msg_destroy(&req);
    return true;
  }
  if (kn_pending_msg(k->pending)) { /* only possible for an execute sent on control */
    reply_error_now(k, ch, req, silent, k->execution_count, "KernelBusy",
                    "another request is running; send execute_request on the shell channel");
    kn_msg_destroy(&req);
    return true;
  }
  if (store_history) {
    k->execution_count++;
    kn_history_add(k->history, k->execution_count, code);
  }
  int count = k->execution_count;
  if (!silent) {
    kn_kernel_publish(k, req->header, "execute_input",
                      json_pack("{s:O, s:i}", "code", code_v, "execution_count", count));
    json_decref(k->last_parent);
    k->last_parent = json_incref(req->header);
  }
  if (!kn_kernel_ensure_executor(k)) {
    reply_error_now(k, ch, req, silent, count, "ExecutorUnavailable", k->executor_error);
    if (stop_on_error)
      kn_kernel_abort_queued(k);
    kn_msg_destroy(&req);
    return true;
  }
  json_t *wire = json_pack("{s:s, s:O, s:i, s:b, s:b}", "msg", "execute", "code", code_v,
                           "execution_count", count, "silent", silent, "allow_stdin", allow_stdin);
  kn_exec_flags_t exec = {.silent = silent,
                          .store_history = store_history,
                          .allow_stdin = allow_stdin,
                          .stop_on_error = stop_on_error,
                          .execution_count = count};
  kn_kernel_set_pending(k, ch, req, execute_finish, &exec, wire);
  json_decref(wire);
  return false;
}

static void execute_finish(kn_kernel_t *k, json_t *reply) {
  const kn_exec_flags_t *p = kn_pending_execute(k->pending);
  kn_msg_t *req = kn_pending_msg(k->pending);
  const char *result_text = kn_pending_result_text(k->pending);
  json_t *content = json_deep_copy(reply);
  if (!content)
    content = json_pack("{s:s}", "status", "error");
  json_object_del(content, "msg");
  const char *status = json_string_value(json_object_get(content, "status"));
  if (!status) {
    json_object_set_new(content, "status", json_string("ok"));
    status = "ok";
  }
  bool error = strcmp(status, "error") == 0;
  json_object_set_new(content, "execution_count", json_integer(p->execution_count));
  if (error) {
    if (!json_is_string(json_object_get(content, "ename")))
      json_object_set_new(content, "ename", json_string("Error"));
    if (!json_is_string(json_object_get(content, "evalue")))
      json_object_set_new(content, "evalue", json_string(""));
    if (!json_is_array(json_object_get(content, "traceback")))
      json_object_set_new(content, "traceback", json_array());
    if (!p->silent)
      kn_kernel_publish(k, req->header, "error",
                        json_pack("{s:O, s:O, s:O}", "ename", json_object_get(content, "ename"),
                                  "evalue", json_object_get(content, "evalue"), "traceback",
                                  json_object_get(content, "traceback")));
  } else if (strcmp(status, "ok") == 0) {
    if (!json_is_object(json_object_get(content, "user_expressions")))
      json_object_set_new(content, "user_expressions", json_object());
    if (!json_is_array(json_object_get(content, "payload")))
      json_object_set_new(content, "payload", json_array());
  }
  if (p->store_history && result_text)
    kn_history_set_output(k->history, p->execution_count, result_text);
  kn_kernel_reply(k, kn_pending_channel(k->pending), req, "execute_reply", content);
  if (error && p->stop_on_error)
    kn_kernel_abort_queued(k);
  kn_kernel_finish_pending(k);
}

void kn_execute_abort(kn_kernel_t *k, kn_msg_t *req) {
  kn_log(KN_LOG_INFO, "aborting execute_request %s after an error (stop_on_error)", kn_msg_id(req));
  kn_kernel_status(k, req, "busy");
  kn_kernel_reply(k, KN_CH_SHELL, req, "execute_reply", json_pack("{s:s}", "status", "aborted"));
  kn_kernel_status(k, req, "idle");
  kn_msg_destroy(&req);
}
