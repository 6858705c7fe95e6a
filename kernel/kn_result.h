/*
 * kn_result.h — result codes of the kernel module and the check macros.
 *
 * Every kn_* call that can fail returns a kn_result_t (modelled on NCCL's
 * ncclResult_t). KN_CHECK returns early and leaves a file:line breadcrumb
 * on stderr; KN_CHECK_GOTO jumps to a cleanup label instead.
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

#define KN_CHECK_GOTO(call, res, label)                                                            \
  do {                                                                                             \
    (res) = (call);                                                                                \
    if ((res) != KN_OK) {                                                                          \
      kn_log_trace(__FILE__, __LINE__, #call, (res));                                              \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* Breadcrumb printed by the check macros (defined in kn_log.c). */
void kn_log_trace(const char *file, int line, const char *expr, kn_result_t r);

#endif
