/*
 * kn_log.h — the kernel's diagnostics, written to stderr (Jupyter shows a
 * kernel's stderr in the terminal that started the server).
 *
 * Environment: NBFORK_KERNEL_DEBUG=1 turns on KN_LOG_DEBUG lines
 * (default: off). Read once, at the first log call.
 */
#ifndef KN_LOG_H
#define KN_LOG_H

#include "kn_result.h"

typedef enum kn_log_level { KN_LOG_DEBUG, KN_LOG_INFO, KN_LOG_WARN, KN_LOG_ERROR } kn_log_level_t;

/* printf-like; adds the "nbfork-kernel: " prefix and a newline. Thread-safe
 * (one fprintf per line). */
void kn_log(kn_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
