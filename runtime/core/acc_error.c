/*
 * acc_error.c — result codes as text, and the last error of an
 * accelerator.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "acc_internal.h"

const char *acc_strerror(acc_result_t r) {
  switch (r) {
  case ACC_OK:
    return "success";
  case ACC_ERR_INVALID_ARGUMENT:
    return "invalid argument (pointer, count, dtype, op or rank)";
  case ACC_ERR_SYSTEM:
    return "a system call failed";
  case ACC_ERR_TIMEOUT:
    return "timed out waiting for a peer (NBFORK_TIMEOUT_S)";
  case ACC_ERR_PEER:
    return "a peer process failed or closed its connection";
  case ACC_ERR_STORE:
    return "rendezvous store unreachable or refused the request";
  case ACC_ERR_BACKEND:
    return "the communication backend (Gloo/NCCL/CUDA) reported an error";
  case ACC_ERR_UNSUPPORTED:
    return "not supported by this build (e.g. NCCL without CUDA)";
  case ACC_ERR_IO:
    return "file read/write or format error";
  case ACC_ERR_NO_MEMORY:
    return "out of memory";
  case ACC_ERR_MISMATCH:
    return "the ranks called different collectives (ACCELERATE_DEBUG_MODE)";
  }
  return "unknown nbfork result code";
}

/* The last error of a call made without an accelerator (acc NULL, or an
 * acc_new that failed), per thread so that threads do not read each
 * other's: acc_last_error(NULL). */
static __thread char g_err_no_acc[1024];

acc_result_t acc__set_error(acc_t *acc, acc_result_t code, const char *fmt, ...) {
  va_list ap;
  if (!acc) {
    va_start(ap, fmt);
    vsnprintf(g_err_no_acc, sizeof g_err_no_acc, fmt, ap);
    va_end(ap);
    return code;
  }
  int n = snprintf(acc->err, sizeof acc->err, "rank %d: ", acc->rank);
  if (n < 0 || (size_t)n >= sizeof acc->err)
    n = 0;
  va_start(ap, fmt);
  vsnprintf(acc->err + n, sizeof acc->err - (size_t)n, fmt, ap);
  va_end(ap);
  return code;
}

const char *acc_last_error(const acc_t *acc) {
  return acc ? acc->err : g_err_no_acc;
}
