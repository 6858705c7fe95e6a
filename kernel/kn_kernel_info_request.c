/* kn_kernel_info_request.c — kernel_info_request (messaging spec "Kernel info").
 * language_info is what JupyterLab 4 needs for C: its CodeMirror 6 editor
 * finds the C mode from the MIME type text/x-csrc (mimetype and
 * codemirror_mode), nbconvert's exporters use pygments_lexer and
 * file_extension; version is the C standard cells are compiled with
 * (ex_compile.c: -std=gnu11; tests/kernel: kernel_info_for_jupyterlab
 * checks the two agree). debugger: false, so Lab shows no debugger. */
#include "kn_handlers.h"

bool kn_kernel_info_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req) {
  json_t *content = json_pack(
      "{s:s, s:s, s:s, s:s,"
      " s:{s:s, s:s, s:s, s:s, s:s, s:s},"
      " s:s, s:[{s:s, s:s}, {s:s, s:s}], s:b}",
      "status", "ok", "protocol_version", KN_PROTOCOL_VERSION, "implementation", "nbfork",
      "implementation_version", NBFORK_VERSION, "language_info", "name", "c", "version", "11",
      "mimetype", "text/x-csrc", "file_extension", ".c", "pygments_lexer", "c", "codemirror_mode",
      "text/x-csrc", "banner",
      "nbfork " NBFORK_VERSION " -- a C11 kernel whose cells are C; %launch forks training "
      "workers from a cell",
      "help_links", "text", "C reference", "url", "https://en.cppreference.com/w/c", "text",
      "Jupyter messaging", "url", "https://jupyter-client.readthedocs.io/en/stable/messaging.html",
      "debugger", 0);
  kn_kernel_reply(k, ch, req, "kernel_info_reply", content);
  kn_msg_destroy(&req);
  return true;
}
