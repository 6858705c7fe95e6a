/*
 * kn_result.h — result codes of the kernel module and the check macro.
 *
 * The kernel's error discipline (one rule per kind of call):
 *
 *  - Every kn_* call that can fail returns a kn_result_t (modelled on
 *    NCCL's ncclResult_t); never a bare -1 or errno. System failures are
 *    KN_ERR_SYSTEM (the caller reads errno at once, or the call fills an
 *    err[len] text with NBF_STRERROR); ZeroMQ failures are KN_ERR_ZMQ.
 *  - Callers propagate with KN_CHECK, which returns early and leaves a
 *    file:line breadcrumb (a debug line, NBFORK_KERNEL_DEBUG=1). A
 *    function that must undo work on failure jumps to one cleanup label.
 *    KN_ERR_AGAIN is not an error: KN_CHECK lets it through.
 *  - Constructors follow CZMQ: x_new() returns NULL on failure,
 *    x_destroy(&p) is NULL-safe and clears the pointer.
 *  - Errors stop at the request handler: a handler never fails the
 *    kernel. What the user caused (bad cell, dead executor, bad request)
 *    becomes an error reply or an iopub `error` message saying what
 *    happened and what to do; what only the operator can act on (bad
 *    connection file, a socket that fails) goes to stderr via kn_log.
 *    Only main (kn_main.c) and the install subcommand exit with a status.
 */
#ifndef KN_RESULT_H
#define KN_RESULT_H

typedef enum kn_result {
  KN_OK = 0,
  KN_ERR_AGAIN = 1,    /* nothing to read now (non-blocking call) */
  KN_ERR_NOMEM = 2,    /* allocation failed */
  KN_ERR_SYSTEM = 3,   /* a system call failed; errno says why */
  KN_ERR_INVALID = 4,  /* bad argument or malformed input (user-caused) */
  KN_ERR_AUTH = 5,     /* HMAC signature missing or wrong */
  KN_ERR_PROTOCOL = 6, /* message does not follow the wire/Jupyter protocol */
  KN_ERR_ZMQ = 7,      /* a ZeroMQ call failed; zmq_errno() says why */
  KN_ERR_EOF = 8,      /* the peer closed its end */
} kn_result_t;

/* Static string naming a result code ("KN_ERR_AUTH", ...). Never NULL. */
const char *kn_result_str(kn_result_t r);

#define KN_CHECK(call)                                                                             \
  do {                                                                                             \
    kn_result_t kn_res_ = (call);                                                                  \
    if (kn_res_ != KN_OK && kn_res_ != KN_ERR_AGAIN) {                                             \
      kn_log_trace(__FILE__, __LINE__, #call, kn_res_);                                            \
      return kn_res_;                                                                              \
    }                                                                                              \
  } while (0)

/* Breadcrumb printed by the check macros (defined in kn_log.c). */
void kn_log_trace(const char *file, int line, const char *expr, kn_result_t r);

#endif
