/* kn_comm_info_request.c — comm_info_request and comm_open (messaging spec
 * "Custom Messages"). nbfork registers no comm targets: comm_info lists
 * none and a comm_open is answered with comm_close, as ipykernel does for
 * an unknown target. */
#include "kn_handlers.h"
#include "kn_log.h"

bool kn_comm_info_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  kn_kernel_reply(k, ch, req, "comm_info_reply", json_pack("{s:s, s:{}}", "status", "ok", "comms"));
  kn_msg_destroy(&req);
  return true;
}

bool kn_comm_open(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  (void)ch;
  const char *id = kn_content_str(req, "comm_id", "");
  kn_log(KN_LOG_INFO, "no comm target \"%s\": closing comm %s",
         kn_content_str(req, "target_name", ""), id);
  kn_kernel_publish(k, req->header, "comm_close", json_pack("{s:s, s:{}}", "comm_id", id, "data"));
  kn_msg_destroy(&req);
  return true;
}
