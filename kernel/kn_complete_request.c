/* kn_complete_request.c — complete_request (messaging spec "Completion").
 * Forwarded to the executor with a byte cursor (nbf_wire.h); its byte
 * offsets are converted back to code points. Without an executor, or on
 * an error reply: no matches, cursor_start = cursor_end = cursor_pos. */
#include <string.h>

#include "kn_handlers.h"
#include "kn_utf8.h"

static json_t *fallback(size_t cursor_cp) {
  return json_pack("{s:s, s:[], s:I, s:I, s:{}}", "status", "ok", "matches", "cursor_start",
                   (json_int_t)cursor_cp, "cursor_end", (json_int_t)cursor_cp, "metadata");
}

/* cursor_pos in code points, defaulting to the end of code. */
static size_t cursor_cp(const kn_msg_t *req, const char *code) {
  json_int_t c = kn_content_int(req, "cursor_pos", -1);
  size_t total = kn_utf8_cp_offset(code, strlen(code), strlen(code));
  return (c < 0 || (size_t)c > total) ? total : (size_t)c;
}

static void complete_finish(kn_kernel_t *k, json_t *reply) {
  kn_msg_t *req = kn_pending_msg(k->pending);
  const char *code = kn_content_str(req, "code", "");
  size_t len = strlen(code);
  size_t cp = cursor_cp(req, code);
  json_t *content;
  json_t *matches = json_object_get(reply, "matches");
  const char *status = json_string_value(json_object_get(reply, "status"));
  if (status && strcmp(status, "ok") == 0 && json_is_array(matches)) {
    json_t *clean = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(matches, i, m) if (json_is_string(m)) json_array_append(clean, m);
    json_int_t bs = json_integer_value(json_object_get(reply, "cursor_start"));
    json_t *be_v = json_object_get(reply, "cursor_end");
    size_t be = json_is_integer(be_v) ? (size_t)json_integer_value(be_v)
                                      : kn_utf8_byte_offset(code, len, cp);
    json_t *md = json_object_get(reply, "metadata");
    content =
        json_pack("{s:s, s:o, s:I, s:I, s:O}", "status", "ok", "matches", clean, "cursor_start",
                  (json_int_t)kn_utf8_cp_offset(code, len, bs < 0 ? 0 : (size_t)bs), "cursor_end",
                  (json_int_t)kn_utf8_cp_offset(code, len, be), "metadata",
                  json_is_object(md) ? md : json_object());
  } else
    content = fallback(cp);
  kn_kernel_reply(k, kn_pending_channel(k->pending), req, "complete_reply", content);
  kn_kernel_finish_pending(k);
}

bool kn_complete_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  const char *code = kn_content_str(req, "code", "");
  size_t cp = cursor_cp(req, code);
  if (kn_pending_msg(k->pending) || !kn_kernel_ensure_executor(k)) {
    kn_kernel_reply(k, ch, req, "complete_reply", fallback(cp));
    kn_msg_destroy(&req);
    return true;
  }
  json_t *wire = json_pack("{s:s, s:s, s:I}", "msg", "complete", "code", code, "cursor_pos",
                           (json_int_t)kn_utf8_byte_offset(code, strlen(code), cp));
  kn_kernel_set_pending(k, ch, req, complete_finish, NULL, wire);
  json_decref(wire);
  return false;
}
