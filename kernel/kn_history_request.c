/* kn_history_request.c — history_request (messaging spec "History"):
 * hist_access_type "tail" (n), "range" (session, start, stop) or
 * "search" (pattern glob, n, unique), over this session's cells. */
#include <string.h>

#include "kn_handlers.h"

bool kn_history_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  const char *type = kn_content_str(req, "hist_access_type", "tail");
  bool output = kn_content_bool(req, "output", false);
  int n = (int)kn_content_int(req, "n", 10);
  json_t *hist;
  if (strcmp(type, "range") == 0)
    hist = kn_history_range(k->history, (int)kn_content_int(req, "session", 0),
                            (int)kn_content_int(req, "start", 0),
                            (int)kn_content_int(req, "stop", 0), output);
  else if (strcmp(type, "search") == 0)
    hist = kn_history_search(k->history, kn_content_str(req, "pattern", "*"), n,
                             kn_content_bool(req, "unique", false), output);
  else
    hist = kn_history_tail(k->history, n, output);
  kn_kernel_reply(k, ch, req, "history_reply",
                  json_pack("{s:s, s:o}", "status", "ok", "history", hist ? hist : json_array()));
  kn_msg_destroy(&req);
  return true;
}
