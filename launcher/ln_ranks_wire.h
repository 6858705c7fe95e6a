/*
 * ln_ranks_wire.h — the control channel between the executor and one
 * rank worker (private to ln_ranks.c and ln_ranks_worker.c): a
 * socketpair of the same process image (fork, no exec), so the records
 * are raw structs in host byte order.
 *
 * Command: ln_rk_cmd_t, then `len` payload bytes:
 *   LN_RK_RUN   "PATH\0SYMBOL\0"          dlopen PATH, call SYMBOL
 *   LN_RK_LOAD  "PATH\0"                  dlopen PATH only
 *   LN_RK_PULL  "KIND\0NAME\0"            reply payload: the bytes
 *   LN_RK_PUSH  "KIND\0NAME\0" then `arg` bytes of data (len counts the
 *               names only)
 *   LN_RK_REBUILD  ""  `arg` = epoch: acc_rebuild_process_groups(epoch)
 *               (a collective was cut; each process group of the rank is
 *               rebuilt at its next collective)
 * KIND is "sym" (a global's assembler name) or "keep" (acc_keep).
 * Reply: ln_rk_reply_t, then `len` bytes (the pulled data, or an error
 * text). One reply per command, written after stdout and stderr were
 * flushed, so the cell's output is in the pipes before its reply.
 */
#ifndef LN_RANKS_WIRE_H
#define LN_RANKS_WIRE_H

#include <stdint.h>

#include "ln_ranks.h"

enum { LN_RK_RUN = 1, LN_RK_LOAD, LN_RK_PULL, LN_RK_PUSH, LN_RK_REBUILD };

enum {
  LN_RK_OK = 0,
  LN_RK_ERROR,       /* payload: what failed                        */
  LN_RK_INTERRUPTED, /* SIGINT ended the cell                       */
  LN_RK_MISMATCH     /* push: the rank's size in `arg`              */
};

typedef struct {
  uint32_t op;
  int32_t cell;
  uint64_t len;
  uint64_t arg; /* push: data bytes after the names */
} ln_rk_cmd_t;

typedef struct {
  uint32_t status;
  uint32_t pad;
  uint64_t len;
  uint64_t arg;
} ln_rk_reply_t;

/* The worker's side: serve commands on fd until EOF, then _exit(0).
 * `close_fds[0..n)` are the executor's ends of every control channel
 * forked so far, closed first. Never returns. */
void ln_ranks_worker_serve(int fd, const int *close_fds, int n, const ln_ranks_hooks_t *hooks)
    __attribute__((noreturn));

/* Read or write exactly n bytes (EINTR retried). 0, or -1 (EOF: errno 0). */
int ln_rk_read_all(int fd, void *p, size_t n);
int ln_rk_write_all(int fd, const void *p, size_t n);

#endif
