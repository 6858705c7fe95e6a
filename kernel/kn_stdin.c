/* kn_stdin.c — the stdin channel (messaging spec "Messages on the stdin
 * ROUTER/DEALER channel"). An executor input_request is sent to the front
 * end that sent the running execute_request (same identities), when that
 * request allowed stdin; the input_reply's value + "\n" goes to the
 * executor's fd 0. */
#include <stdlib.h>
#include <string.h>

#include "kn_handlers.h"
#include "kn_log.h"

void kn_stdin_forward(kn_kernel_t *k, json_t *event) {
  const kn_exec_flags_t *exec = kn_pending_execute(k->pending);
  if (!exec || !exec->allow_stdin) {
    kn_log(KN_LOG_WARN, "executor asked for input but the front end does not allow stdin; "
                        "dropped (nbf_wire.h: the executor must read EOF)");
    return;
  }
  json_t *prompt = json_object_get(event, "prompt");
  json_t *content =
      json_pack("{s:s, s:b}", "prompt", json_is_string(prompt) ? json_string_value(prompt) : "",
                "password", json_is_true(json_object_get(event, "password")));
  if (kn_kernel_reply(k, KN_CH_STDIN, kn_pending_msg(k->pending), "input_request", content) ==
      KN_OK)
    kn_pending_set_waiting_input(k->pending, true);
}

void kn_stdin_on_reply(kn_kernel_t *k, kn_msg_t *msg) {
  if (strcmp(kn_msg_type(msg), "input_reply") != 0) {
    kn_log(KN_LOG_WARN, "unexpected %s on stdin, ignored", kn_msg_type(msg));
  } else if (!kn_pending_waiting_input(k->pending)) {
    kn_log(KN_LOG_DEBUG, "input_reply with no input pending, ignored");
  } else {
    json_t *v = json_object_get(msg->content, "value");
    const char *value = json_is_string(v) ? json_string_value(v) : "";
    size_t len = json_is_string(v) ? json_string_length(v) : 0;
    kn_pending_set_waiting_input(k->pending, false);
    nbf_executor_write_stdin(&k->ex, value, len);
    nbf_executor_write_stdin(&k->ex, "\n", 1);
  }
  kn_msg_destroy(&msg);
}
