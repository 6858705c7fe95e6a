/*
 * kn_kernel.h — the kernel's state and its request dispatch (after xeus's
 * xkernel/xinterpreter). Single-threaded: every function here runs on the
 * main loop thread (kn_server.c).
 *
 * Requests on shell are queued and handled one at a time: a request that
 * needs the executor (execute, complete, inspect, is_complete) becomes
 * "pending" until the executor's reply; shell requests arriving meanwhile
 * wait in the queue. Control requests (interrupt, shutdown, kernel_info,
 * ...) are handled at once, even while a cell runs.
 *
 * Every shell and control request is wrapped in iopub status busy ...
 * idle with the request as parent (messaging spec "Kernel status").
 */
#ifndef KN_KERNEL_H
#define KN_KERNEL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "kn_utf8.h"
#include "nbf_executor.h"
#include "kn_history.h"
#include "kn_io.h"
#include "kn_message.h"
#include "kn_pending.h"
#include "kn_util.h"

#ifndef NBFORK_VERSION
#define NBFORK_VERSION "0.1.0"
#endif

typedef struct kn_kernel kn_kernel_t;

/* A request handler (one per *_request, kn_<name>_request.c). Takes
 * ownership of req. Returns true when the request is complete (the
 * dispatcher then publishes status idle), false when it became the
 * pending executor request (its finish function publishes idle). */
typedef bool (*kn_handler_fn)(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);

typedef struct kn_queued {
  kn_msg_t *msg;
  bool aborted; /* stop_on_error: answer with status "aborted" */
  struct kn_queued *next;
} kn_queued_t;

struct kn_kernel {
  kn_io_t io;
  char session[KN_UUID_LEN + 1];
  char username[64];
  int execution_count;
  kn_history_t *history;

  nbf_executor_t ex;
  kn_utf8_decoder_t dec[2];     /* UTF-8 state of its stdout and stderr */
  char executor_path[PATH_MAX]; /* "" = no executor available */
  char executor_error[512];     /* why the last spawn failed */
  int64_t interrupt_grace_ms;   /* NBF_WIRE_INTERRUPT_GRACE_MS */

  kn_pending_t *pending; /* the in-flight executor request (kn_pending.h) */
  kn_queued_t *queue_head, *queue_tail;
  json_t *last_parent; /* header of the last non-silent execute (outputs outside requests) */

  bool stop;    /* leave the main loop */
  bool restart; /* shutdown_request asked for a restart */
};

/* New kernel sending through io; executor_path NULL or "" means no
 * executor (requests that need one get errors / empty answers). Does not
 * start the executor (kn_kernel_ensure_executor does). NULL on failure. */
kn_kernel_t *kn_kernel_new(kn_io_t io, const char *executor_path);

/* Stop the executor (nbf_executor_stop), free the queue and state. */
void kn_kernel_destroy(kn_kernel_t **self_p);

/* --- dispatch (kn_dispatch.c) --- */

/* A message arrived on ch (ownership passes). shell: queued; control:
 * dispatched now; stdin: input_reply for the pending execute. */
void kn_kernel_on_message(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *msg);

/* Dispatch queued shell requests while no executor request is pending. */
void kn_kernel_process_queue(kn_kernel_t *k);

/* --- the shell queue (kn_kernel.c) --- */

/* Pull every shell message waiting in the transport into the queue. */
void kn_kernel_drain_shell(kn_kernel_t *k);

/* Mark every queued execute_request aborted (stop_on_error). */
void kn_kernel_abort_queued(kn_kernel_t *k);

/* Append msg (ownership passes) to the shell queue. KN_ERR_NOMEM (msg is
 * then freed). */
kn_result_t kn_kernel_enqueue(kn_kernel_t *k, kn_msg_t *msg);
/* Take the first queued message (caller owns it), with whether it was
 * aborted; NULL when the queue is empty. */
kn_msg_t *kn_kernel_dequeue(kn_kernel_t *k, bool *aborted);

/* --- the pending request (kn_kernel.c) --- */

/* Make req the pending executor request (exec: its flags for an
 * execute_request, else NULL; kn_pending_begin) and send it the wire
 * request. */
void kn_kernel_set_pending(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req, kn_finish_fn finish,
                           const kn_exec_flags_t *exec, json_t *wire_request);

/* Publish status idle for the pending request, free it, clear pending. */
void kn_kernel_finish_pending(kn_kernel_t *k);

/* --- executor supervision (kn_supervise.c) --- */

/* Start the executor if it is not running. false (reason in
 * k->executor_error) if it cannot be started. */
bool kn_kernel_ensure_executor(kn_kernel_t *k);

/* Forward an interrupt (interrupt_request or the kernel's SIGINT) to the
 * executor while a request is pending: one SIGINT to its pid, and a
 * deadline after which kn_kernel_tick kills it. */
void kn_kernel_interrupt(kn_kernel_t *k);

/* Periodic work (each loop turn): the interrupt deadline, the executor
 * exiting, or closing its events (EOF seen by kn_kernel_read_events). */
void kn_kernel_tick(kn_kernel_t *k);

/* The executor ended with wait status wstatus (already reaped or about
 * to be killed): publish leftovers, answer the pending request with an
 * error that says what happened and that state was lost, and start a
 * fresh executor. */
void kn_kernel_executor_died(kn_kernel_t *k, int wstatus, bool interrupt_timeout);

/* --- executor output (kn_events.c) --- */

/* Read the executor's stdout/stderr and publish `stream` messages. */
void kn_kernel_drain_output(kn_kernel_t *k);

/* Read executor events and publish them. EOF leaves fd 4 closed (-1):
 * kn_kernel_tick then answers for the executor's death. */
void kn_kernel_read_events(kn_kernel_t *k);

/* --- sending (kn_kernel.c) --- */

/* New reply to req of type reply_type with content (steals) on ch,
 * routed to req's identities. */
kn_result_t kn_kernel_reply(kn_kernel_t *k, kn_channel_t ch, const kn_msg_t *req,
                            const char *reply_type, json_t *content);
/* Publish msg_type with content (steals) on iopub; parent_header may be
 * NULL ({}). */
kn_result_t kn_kernel_publish(kn_kernel_t *k, json_t *parent_header, const char *msg_type,
                              json_t *content);
/* Publish {"execution_state": state} with parent req (may be NULL). */
void kn_kernel_status(kn_kernel_t *k, const kn_msg_t *req, const char *state);

/* Parent header for outputs now: the pending execute, else the last one. */
json_t *kn_kernel_output_parent(kn_kernel_t *k);
/* true when outputs must not be published (pending execute is silent). */
bool kn_kernel_output_muted(const kn_kernel_t *k);

#endif
