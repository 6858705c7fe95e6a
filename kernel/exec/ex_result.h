/*
 * ex_result — the executor's result codes, and its error discipline.
 *
 * Error discipline of kernel/exec/ (the executor):
 *
 *  - A function that can fail in more than one way returns ex_result_t:
 *    EX_OK (0) on success, else one named failure. Each function's header
 *    comment lists the results it returns and what each leaves behind.
 *  - The text for the user travels beside the code, never instead of it:
 *    in a caller-owned `err[errlen]` buffer or a `char **diag` the caller
 *    frees. It says what happened and where (`cell[3]: ...`), so the
 *    executor can reply with it unchanged.
 *  - Functions that only build something return the object, or NULL when
 *    memory ran out (CZMQ's `x_new`); pure predicates return 0/1.
 *  - Functions that answer a request by sending events (ex_events.h,
 *    ex_run_code, ex_query_handle) return what sending returned: 0, or
 *    -1 when the kernel's pipe is gone. Thin wrappers of a system call
 *    (ex_stdin_install, ex_run_install_sigint) return 0, or -1 with errno.
 *  - The cell runner (ex_run.c) and the request loop (ex_main.c) turn a
 *    failure into exactly one execute_reply with an ename (CompileError,
 *    LinkError, SystemError, KeyboardInterrupt, ...), so the kernel never
 *    sees a bare code.
 *  - errno text is formatted with NBF_STRERROR (strerror_r), never strerror.
 */
#ifndef EX_RESULT_H
#define EX_RESULT_H

typedef enum {
  EX_OK = 0,          /* done                                              */
  EX_ERR_SYSTEM,      /* a system call failed (pipe, fork, write, exec of the
                         compiler); the message names the call and errno   */
  EX_ERR_NOMEM,       /* out of memory                                     */
  EX_ERR_COMPILE,     /* the compiler rejected the code (diagnostics kept) */
  EX_ERR_SPLIT,       /* the cell could not be split into declarations and
                         statements (unbalanced brackets, ...)             */
  EX_ERR_USAGE,       /* bad arguments: flags that do not parse, too many   */
  EX_ERR_INTERRUPTED, /* SIGINT arrived; the operation stopped, state kept */
  EX_ERR_REDEFINED,   /* a type is redefined differently while globals or
                         functions compiled earlier still use it            */
  EX_RESULT_COUNT
} ex_result_t;

/* A static name for `r` ("EX_ERR_COMPILE"), for logs and test messages. */
static inline const char *ex_result_name(ex_result_t r) {
  static const char *const names[EX_RESULT_COUNT] = {
      "EX_OK",        "EX_ERR_SYSTEM", "EX_ERR_NOMEM",       "EX_ERR_COMPILE",
      "EX_ERR_SPLIT", "EX_ERR_USAGE",  "EX_ERR_INTERRUPTED", "EX_ERR_REDEFINED",
  };
  return (unsigned)r < EX_RESULT_COUNT ? names[r] : "EX_ERR_UNKNOWN";
}

/* Return early with the result of `call` when it is not EX_OK (NCCLCHECK). */
#define EX_CHECK(call)                                                                             \
  do {                                                                                             \
    ex_result_t ex_check_r_ = (call);                                                              \
    if (ex_check_r_ != EX_OK)                                                                      \
      return ex_check_r_;                                                                          \
  } while (0)

#endif
