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

/* Called with the executor's reply event (or a synthesized error reply
 * when the executor died or was killed) to complete the pending request.
 * reply is borrowed. Must end with kn_kernel_finish_pending. */
typedef void (*kn_finish_fn)(kn_kernel_t *k, json_t *reply);

typedef struct kn_pending {
  kn_msg_t *msg; /* the request (owned), NULL when none */
  kn_channel_t channel;
  kn_finish_fn finish;
  bool is_execute;
  bool silent, store_history, allow_stdin, stop_on_error;
  int execution_count;           /* the count this execute runs with */
  bool waiting_input;            /* an input_request went to the front end */
  int64_t interrupt_deadline_ms; /* nbf_now_ms() limit after an interrupt, 0 = none */
  char *result_text;             /* execute_result text/plain, for history output */
} kn_pending_t;

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
  unsigned generation;          /* +1 each time an executor is given up */
  char executor_path[PATH_MAX]; /* "" = no executor available */
  char executor_error[512];     /* why the last spawn failed */
  int64_t interrupt_grace_ms;   /* NBF_WIRE_INTERRUPT_GRACE_MS */

  kn_pending_t pending;
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

/* A message arrived on ch (ownership passes). shell: queued; control:
 * dispatched now; stdin: input_reply for the pending execute. */
void kn_kernel_on_message(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *msg);

/* Dispatch queued shell requests while no executor request is pending. */
void kn_kernel_process_queue(kn_kernel_t *k);

/* Pull every shell message waiting in the transport into the queue. */
void kn_kernel_drain_shell(kn_kernel_t *k);

/* Mark every queued execute_request aborted (stop_on_error). */
void kn_kernel_abort_queued(kn_kernel_t *k);

/* --- the pending request (kn_kernel.c) --- */

/* Make req the pending executor request and send it the wire request. */
void kn_kernel_set_pending(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req, kn_finish_fn finish,
                           json_t *wire_request);

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

/* Periodic work: interrupt deadline, executor exit without EOF. */
void kn_kernel_tick(kn_kernel_t *k);

/* The executor ended with wait status wstatus (already reaped or about
 * to be killed): publish leftovers, answer the pending request with an
 * error that says what happened and that state was lost, and start a
 * fresh executor. */
void kn_kernel_executor_died(kn_kernel_t *k, int wstatus, bool interrupt_timeout);

/* --- executor output (kn_events.c) --- */

/* Read the executor's stdout/stderr and publish `stream` messages. */
void kn_kernel_drain_output(kn_kernel_t *k);

/* Read executor events; handles EOF (executor death). */
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
