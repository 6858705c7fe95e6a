/* kn_interrupt_request.c — interrupt_request on control (messaging spec
 * "Kernel interrupt", interrupt_mode "message"): one SIGINT to the
 * executor while a request is pending (kn_kernel_interrupt), then reply. */
#include "kn_handlers.h"

bool kn_interrupt_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  kn_kernel_interrupt(k);
  kn_kernel_reply(k, ch, req, "interrupt_reply", json_pack("{s:s}", "status", "ok"));
  kn_msg_destroy(&req);
  return true;
}
