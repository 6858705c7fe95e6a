/*
 * kn_executor.h — the executor child process and its pipes (the fd layout
 * and the line protocol are in nbf_wire.h).
 *
 * The kernel side of every pipe is non-blocking: reads drain what is
 * there, writes that would block stay in a pending buffer that
 * kn_executor_flush sends when the fd is writable. The executor can
 * therefore never block on a full pipe because the kernel is busy, and the
 * kernel never blocks on the executor.
 */
#ifndef KN_EXECUTOR_H
#define KN_EXECUTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kn_result.h"
#include "kn_utf8.h"
#include "kn_util.h"

typedef enum kn_exec_stream { KN_EXEC_STDOUT = 0, KN_EXEC_STDERR = 1 } kn_exec_stream_t;

typedef struct kn_executor {
  pid_t pid;             /* > 0 while running (also its process group id) */
  int fd_in;             /* kernel's write end of the executor's fd 0, or -1 */
  int fd_req;            /* write end of fd 3 (requests), or -1 */
  int fd_out[2];         /* read ends of fd 1 and fd 2, or -1 after EOF */
  int fd_ev;             /* read end of fd 4 (events), or -1 after EOF */
  nbf_buf_t req_pending; /* request bytes not yet written */
  nbf_buf_t in_pending;  /* stdin bytes not yet written */
  nbf_buf_t ev_line;     /* an event line not yet complete */
  kn_utf8_decoder_t dec[2];
  int64_t started_ms; /* nbf_now_ms() at spawn */
  int wstatus;        /* wait status once reaped */
} kn_executor_t;

/* Called for each event object read from fd 4 (borrowed reference). */
typedef void (*kn_executor_event_fn)(void *arg, json_t *event);

/* Set every fd to -1 and clear the buffers; call once before first use. */
void kn_executor_init(kn_executor_t *ex);

/* Path of the executor binary into path[len]: $NBFORK_EXECUTOR when set
 * and non-empty, else "nbfork-executor" in the directory of
 * /proc/self/exe. KN_ERR_SYSTEM if /proc/self/exe cannot be read. */
kn_result_t kn_executor_find(char *path, size_t len);

/* Start the executor at path with fds 0-4 as nbf_wire.h says, environment
 * NBFORK_DISPLAY_FD=4 and OPENBLAS_NUM_THREADS=1 unless set, default
 * signal dispositions, an empty signal mask, and its own process group.
 * On failure returns KN_ERR_SYSTEM with the reason in err[err_len]. */
kn_result_t kn_executor_spawn(kn_executor_t *ex, const char *path, char *err, size_t err_len);

/* true while a child process is attached. */
bool kn_executor_running(const kn_executor_t *ex);

/* Queue one request object as a JSON line on fd 3 and write as much as
 * the pipe takes now. Does not steal req. KN_ERR_EOF if the executor is
 * gone. */
kn_result_t kn_executor_send(kn_executor_t *ex, json_t *req);

/* Queue len bytes for the executor's stdin (fd 0). */
kn_result_t kn_executor_write_stdin(kn_executor_t *ex, const char *s, size_t len);

/* Write pending request/stdin bytes without blocking. KN_ERR_EOF if the
 * executor closed the pipe (its pending bytes are dropped). */
kn_result_t kn_executor_flush(kn_executor_t *ex);

/* Whether pending bytes wait for fd_req / fd_in to become writable. */
bool kn_executor_wants_req_write(const kn_executor_t *ex);
bool kn_executor_wants_in_write(const kn_executor_t *ex);

/* Read what stdout (or stderr) holds now, at most max_bytes, appending
 * valid UTF-8 text to out (a split multi-byte character waits for the
 * next call). Returns KN_OK, or KN_ERR_EOF once the pipe closed (the fd
 * is then closed and set to -1; remaining partial bytes are flushed as
 * U+FFFD). */
kn_result_t kn_executor_read_stream(kn_executor_t *ex, kn_exec_stream_t which, nbf_buf_t *out,
                                    size_t max_bytes);

/* Read the events fd and call fn for every complete JSON line (a line
 * that is not a JSON object is logged and skipped). Returns KN_OK, or
 * KN_ERR_EOF once the executor closed fd 4 (then closed and set to -1). */
kn_result_t kn_executor_read_events(kn_executor_t *ex, kn_executor_event_fn fn, void *arg);

/* Non-blocking waitpid: true and *wstatus set when the process exited. */
bool kn_executor_reap(kn_executor_t *ex, int *wstatus);

/* SIGKILL the executor's process group, reap it (blocking) and close
 * every fd. Returns its wait status (the stored one if it was already
 * reaped by kn_executor_reap). */
int kn_executor_kill(kn_executor_t *ex);

/* Shut down politely: close fd 3 (EOF = exit, nbf_wire.h), wait up to
 * grace_ms discarding its output, then SIGTERM the group, wait 500 ms,
 * then SIGKILL. Closes every fd. */
void kn_executor_stop(kn_executor_t *ex, int grace_ms);

/* Close all fds and free the buffers (process must be reaped). */
void kn_executor_close(kn_executor_t *ex);

/* Describe a wait status for the user: ename like "Segmentation fault
 * (SIGSEGV)" or "ExecutorExited", and a sentence on how it ended ("was
 * killed by signal 11 (SIGSEGV)", "exited with status 3"). */
void kn_executor_describe_exit(int wstatus, char *ename, size_t ename_len, char *how,
                               size_t how_len);

#endif
