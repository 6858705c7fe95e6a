/* kn_is_complete_request.c — is_complete_request (messaging spec "Code
 * completeness"). The executor's reply status is the answer (nbf_wire.h);
 * without an executor, or on an error reply: "unknown". */
#include <string.h>

#include "kn_handlers.h"

static void is_complete_finish(kn_kernel_t *k, json_t *reply) {
  const char *s = json_string_value(json_object_get(reply, "status"));
  json_t *content;
  if (s && strcmp(s, "incomplete") == 0) {
    const char *indent = json_string_value(json_object_get(reply, "indent"));
    content = json_pack("{s:s, s:s}", "status", "incomplete", "indent", indent ? indent : "");
  } else if (s && (strcmp(s, "complete") == 0 || strcmp(s, "invalid") == 0))
    content = json_pack("{s:s}", "status", s);
  else
    content = json_pack("{s:s}", "status", "unknown");
  kn_kernel_reply(k, kn_pending_channel(k->pending), kn_pending_msg(k->pending), "is_complete_reply", content);
  kn_kernel_finish_pending(k);
}

bool kn_is_complete_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  if (kn_pending_msg(k->pending) || !kn_kernel_ensure_executor(k)) {
    kn_kernel_reply(k, ch, req, "is_complete_reply", json_pack("{s:s}", "status", "unknown"));
    kn_msg_destroy(&req);
    return true;
  }
  json_t *wire =
      json_pack("{s:s, s:s}", "msg", "is_complete", "code", kn_content_str(req, "code", ""));
  kn_kernel_set_pending(k, ch, req, is_complete_finish, NULL, wire);
  json_decref(wire);
  return false;
}
