/*
 * kn_pending.h — the kernel's in-flight executor request (at most one,
 * nbf_wire.h), owned by this module alone (after xeus's xkernel_core,
 * where one object owns the request being served): the request message,
 * the channel to answer on, the function that completes it, and, for an
 * execute_request, its flags, whether it waits for input, whether it was
 * interrupted and its execute_result text. Other files read it through
 * the accessors and change it through the few verbs below.
 */
#ifndef KN_PENDING_H
#define KN_PENDING_H

#include <jansson.h>
#include <stdbool.h>

#include "kn_io.h"
#include "kn_message.h"

struct kn_kernel;

/* Called with the executor's reply event (or a synthesized error reply
 * when the executor died or was killed) to complete the pending request.
 * reply is borrowed. Must end with kn_kernel_finish_pending. */
typedef void (*kn_finish_fn)(struct kn_kernel *k, json_t *reply);

/* What an execute_request asked for (messaging spec "Execute"). */
typedef struct kn_exec_flags {
  bool silent, store_history, allow_stdin, stop_on_error;
  int execution_count; /* the count this execute runs with */
} kn_exec_flags_t;

typedef struct kn_pending kn_pending_t;

/* New, with no request in flight; NULL when out of memory. */
kn_pending_t *kn_pending_new(void);
/* Free it and a request still in flight; NULL-safe, clears *self_p. */
void kn_pending_destroy(kn_pending_t **self_p);

/* Make req (ownership passes) the request in flight, answered on ch and
 * completed by finish; exec is its flags for an execute_request, NULL for
 * the others. The previous one must have ended. */
void kn_pending_begin(kn_pending_t *p, kn_channel_t ch, kn_msg_t *req, kn_finish_fn finish,
                      const kn_exec_flags_t *exec);
/* End it: free the request and clear every field. */
void kn_pending_end(kn_pending_t *p);

/* The request in flight, or NULL when none (borrowed). */
kn_msg_t *kn_pending_msg(const kn_pending_t *p);
kn_channel_t kn_pending_channel(const kn_pending_t *p);
/* Complete it with reply (borrowed): its kn_finish_fn. No-op when none. */
void kn_pending_complete(kn_pending_t *p, struct kn_kernel *k, json_t *reply);
/* The flags of the execute_request in flight, or NULL (none, or another
 * request type). */
const kn_exec_flags_t *kn_pending_execute(const kn_pending_t *p);

/* An input_request went to the front end and its input_reply is due. */
bool kn_pending_waiting_input(const kn_pending_t *p);
void kn_pending_set_waiting_input(kn_pending_t *p, bool waiting);

/* An interrupt was forwarded while it ran. */
bool kn_pending_interrupted(const kn_pending_t *p);
void kn_pending_mark_interrupted(kn_pending_t *p);

/* The text/plain of its execute_result (for history output), or NULL;
 * set copies text. */
const char *kn_pending_result_text(const kn_pending_t *p);
void kn_pending_set_result_text(kn_pending_t *p, const char *text);

#endif
