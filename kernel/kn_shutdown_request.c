/* kn_shutdown_request.c — shutdown_request (messaging spec "Kernel
 * shutdown"). Replies on the request's channel (and, like ipykernel, on
 * iopub), then leaves the main loop; kn_main stops the executor and
 * exits. restart=true exits too: jupyter_client starts a new kernel. */
#include "kn_handlers.h"
#include "kn_log.h"

bool kn_shutdown_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  bool restart = kn_content_bool(req, "restart", false);
  kn_kernel_reply(k, ch, req, "shutdown_reply",
                  json_pack("{s:s, s:b}", "status", "ok", "restart", restart));
  kn_kernel_publish(k, req->header, "shutdown_reply",
                    json_pack("{s:s, s:b}", "status", "ok", "restart", restart));
  kn_log(KN_LOG_INFO, "shutdown requested%s", restart ? " (restart)" : "");
  k->stop = true;
  k->restart = restart;
  kn_msg_destroy(&req);
  return true;
}
