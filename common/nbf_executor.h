/*
 * nbf_executor.h — the one client of the kernel<->executor protocol
 * (nbf_wire.h): spawning nbfork-executor, sending requests, reading its
 * events, interrupting and stopping it. Used by the kernel (kernel/
 * kn_supervise.c, kn_events.c) and by `nbfork launch NOTEBOOK`
 * (launcher/ln_notebook.c), so both keep the protocol's promises the same
 * way (one SIGINT per interrupt, SIGKILL after NBF_WIRE_INTERRUPT_GRACE_MS;
 * shutdown = EOF on fd 3, then nbf_proc_stop's TERM, CONT, KILL).
 *
 * Our side of every pipe is non-blocking: reads drain what is there,
 * writes that would block stay in a pending buffer that
 * nbf_executor_flush sends when the fd is writable; so the executor never
 * blocks on a full pipe because we are busy, and we never block on it.
 *
 * Results: 0 ok, NBF_EXECUTOR_EOF when the executor closed that pipe (or
 * is gone), -1 with errno set on a system failure (ENOMEM included).
 */
#ifndef NBF_EXECUTOR_H
#define NBF_EXECUTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nbf_buf.h"

#define NBF_EXECUTOR_EOF 1

typedef enum nbf_executor_stdio {
  NBF_EXECUTOR_PIPES = 0,  /* fds 0, 1, 2 are pipes to us (the kernel) */
  NBF_EXECUTOR_INHERIT = 1 /* fd 0 is /dev/null, fds 1 and 2 are ours (headless) */
} nbf_executor_stdio_t;

typedef struct nbf_executor {
  pid_t pid;                     /* > 0 while running (also its process group id) */
  int fd_in;                     /* our write end of its fd 0, or -1 */
  int fd_req;                    /* write end of fd 3 (requests), or -1 */
  int fd_out[2];                 /* read ends of its fds 1 and 2, or -1 (EOF, or inherited) */
  int fd_ev;                     /* read end of fd 4 (events), or -1 after EOF */
  nbf_buf_t req_pending;         /* request bytes not yet written */
  nbf_buf_t in_pending;          /* stdin bytes not yet written */
  nbf_buf_t ev_line;             /* an event line not yet complete */
  int64_t started_ms;            /* nbf_now_ms() at spawn */
  int64_t interrupt_deadline_ms; /* kill after this (nbf_executor_interrupt), or 0 */
  unsigned ignored_events;       /* event lines that were not JSON objects with "msg" */
  int wstatus;                   /* wait status once reaped */
} nbf_executor_t;

/* Called for each event object read from fd 4 (borrowed reference). */
typedef void (*nbf_executor_event_fn)(void *arg, json_t *event);

/* Set every fd to -1 and clear the buffers; call once before first use. */
void nbf_executor_init(nbf_executor_t *ex);

/* Path of the executor binary into path[len]: $NBFORK_EXECUTOR when set
 * and non-empty, else NBF_WIRE_EXECUTOR_NAME in the directory of
 * /proc/self/exe. 0, or -1 with errno set (ENAMETOOLONG when it does not
 * fit). */
int nbf_executor_find(char *path, size_t len);

/* Start the executor at path with fds as nbf_wire.h says (fds 0-2 per
 * stdio), environment NBFORK_DISPLAY_FD=4 and OPENBLAS_NUM_THREADS=1
 * unless set, `--parent OUR_PID`, default signal dispositions, an empty
 * signal mask and its own process group. 0, or -1 with the reason in
 * err[err_len]. */
int nbf_executor_spawn(nbf_executor_t *ex, const char *path, nbf_executor_stdio_t stdio, char *err,
                       size_t err_len);

/* true while a child process is attached. */
bool nbf_executor_running(const nbf_executor_t *ex);

/* Queue one request object as a JSON line on fd 3 and write as much as
 * the pipe takes now. Does not steal req. */
int nbf_executor_send(nbf_executor_t *ex, json_t *req);

/* Queue len bytes for the executor's stdin (fd 0, NBF_EXECUTOR_PIPES). */
int nbf_executor_write_stdin(nbf_executor_t *ex, const char *s, size_t len);

/* Write pending request/stdin bytes without blocking. NBF_EXECUTOR_EOF if
 * the executor closed fd 3 (its pending bytes are dropped). */
int nbf_executor_flush(nbf_executor_t *ex);

/* Whether pending bytes wait for fd_req / fd_in to become writable. */
bool nbf_executor_wants_req_write(const nbf_executor_t *ex);
bool nbf_executor_wants_in_write(const nbf_executor_t *ex);

/* Append what its stdout (which 0) or stderr (1) holds now, at most
 * max_bytes, raw, to out. 0, or NBF_EXECUTOR_EOF once the pipe closed
 * (the fd is then closed and set to -1). */
int nbf_executor_read_stream(nbf_executor_t *ex, int which, nbf_buf_t *out, size_t max_bytes);

/* Read the events fd and call fn for every complete JSON line (a line
 * that is not a JSON object with a string "msg" is counted in
 * ignored_events and skipped). 0, or NBF_EXECUTOR_EOF once the executor
 * closed fd 4 or fn killed it (fd 4 is then closed and set to -1). */
int nbf_executor_read_events(nbf_executor_t *ex, nbf_executor_event_fn fn, void *arg);

/* Interrupt the request in flight (nbf_wire.h): one SIGINT to the
 * executor's pid (not its group), and, the first time, a deadline
 * grace_ms from now after which nbf_executor_interrupt_expired says to
 * kill it. Returns the deadline (ms, nbf_now_ms clock). */
int64_t nbf_executor_interrupt(nbf_executor_t *ex, int64_t grace_ms);

/* true once an interrupt's deadline passed while the executor runs. */
bool nbf_executor_interrupt_expired(const nbf_executor_t *ex);

/* Non-blocking reap: true and *wstatus set when the process exited (its
 * work directory is then removed, nbf_workdir_reaped). */
bool nbf_executor_reap(nbf_executor_t *ex, int *wstatus);

/* SIGKILL the executor's process group, reap it (blocking) and close
 * every fd. Returns its wait status (the stored one if it was already
 * reaped by nbf_executor_reap). */
int nbf_executor_kill(nbf_executor_t *ex);

/* Shut down politely (nbf_wire.h "Shutdown"): close fd 3 (EOF = exit) and
 * fd 0, wait up to grace_ms discarding its output, then nbf_proc_stop with
 * a 500 ms grace. Closes every fd. Returns its wait status. */
int nbf_executor_stop(nbf_executor_t *ex, int grace_ms);

/* Close all fds and free the buffers (process must be reaped). */
void nbf_executor_close(nbf_executor_t *ex);

/* Describe a wait status for the user: ename like "Segmentation fault
 * (SIGSEGV)" or "ExecutorExited", and a sentence on how it ended ("was
 * killed by signal 11 (SIGSEGV)", "exited with status 3"). */
void nbf_executor_describe_exit(int wstatus, char *ename, size_t ename_len, char *how,
                                size_t how_len);

#endif
