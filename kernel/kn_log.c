/* kn_log.c — stderr diagnostics (see kn_log.h). */
#define _GNU_SOURCE
#include "kn_log.h"
#include "nbf_param.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int debug_enabled(void) {
  static int cached = -1; /* the kernel reads it once: it logs on hot paths */
  if (cached < 0)
    cached = nbf_param_NBFORK_KERNEL_DEBUG();
  return cached;
}

void kn_log(kn_log_level_t level, const char *fmt, ...) {
  if (level == KN_LOG_DEBUG && !debug_enabled())
    return;
  static const char *names[] = {"debug: ", "", "warning: ", "error: "};
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "nbfork-kernel: %s%s\n", names[level], line);
}

const char *kn_result_str(kn_result_t r) {
  static const char *const names[] = {
      [KN_OK] = "KN_OK",
      [KN_ERR_AGAIN] = "KN_ERR_AGAIN",
      [KN_ERR_NOMEM] = "KN_ERR_NOMEM",
      [KN_ERR_SYSTEM] = "KN_ERR_SYSTEM",
      [KN_ERR_INVALID] = "KN_ERR_INVALID",
      [KN_ERR_AUTH] = "KN_ERR_AUTH",
      [KN_ERR_PROTOCOL] = "KN_ERR_PROTOCOL",
      [KN_ERR_ZMQ] = "KN_ERR_ZMQ",
      [KN_ERR_EOF] = "KN_ERR_EOF",
  };
  unsigned i = (unsigned)r;
  return i < sizeof names / sizeof names[0] && names[i] ? names[i] : "KN_ERR_UNKNOWN";
}

void kn_log_trace(const char *file, int line, const char *expr, kn_result_t r) {
  kn_log(KN_LOG_DEBUG, "%s:%d: %s -> %s", file, line, expr, kn_result_str(r));
}
