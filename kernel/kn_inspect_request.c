/* kn_inspect_request.c — inspect_request (messaging spec "Introspection").
 * Forwarded to the executor with a byte cursor (nbf_wire.h). Without an
 * executor, or on an error reply: found=false. */
#include <string.h>

#include "kn_handlers.h"
#include "kn_utf8.h"

static json_t *not_found(void) {
  return json_pack("{s:s, s:b, s:{}, s:{}}", "status", "ok", "found", 0, "data", "metadata");
}

static void inspect_finish(kn_kernel_t *k, json_t *reply) {
  const char *status = json_string_value(json_object_get(reply, "status"));
  json_t *data = json_object_get(reply, "data");
  json_t *md = json_object_get(reply, "metadata");
  json_t *content;
  if (status && strcmp(status, "ok") == 0 && json_is_object(data))
    content = json_pack("{s:s, s:b, s:O, s:O}", "status", "ok", "found",
                        json_is_true(json_object_get(reply, "found")), "data", data, "metadata",
                        json_is_object(md) ? md : json_object());
  else
    content = not_found();
  kn_kernel_reply(k, kn_pending_channel(k->pending), kn_pending_msg(k->pending), "inspect_reply", content);
  kn_kernel_finish_pending(k);
}

bool kn_inspect_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  const char *code = kn_content_str(req, "code", "");
  size_t len = strlen(code);
  json_int_t c = kn_content_int(req, "cursor_pos", -1);
  size_t bytes = c < 0 ? len : kn_utf8_byte_offset(code, len, (size_t)c);
  if (kn_pending_msg(k->pending) || !kn_kernel_ensure_executor(k)) {
    kn_kernel_reply(k, ch, req, "inspect_reply", not_found());
    kn_msg_destroy(&req);
    return true;
  }
  json_t *wire =
      json_pack("{s:s, s:s, s:I, s:I}", "msg", "inspect", "code", code, "cursor_pos",
                (json_int_t)bytes, "detail_level", kn_content_int(req, "detail_level", 0));
  kn_kernel_set_pending(k, ch, req, inspect_finish, NULL, wire);
  json_decref(wire);
  return false;
}
