/*
 * kn_handlers.h — one handler per request type (after xeus), each in its
 * own kn_<type>.c file. Handler contract: see kn_handler_fn in
 * kn_kernel.h. The *_finish functions complete a pending executor request
 * (kn_finish_fn).
 */
#ifndef KN_HANDLERS_H
#define KN_HANDLERS_H

#include "kn_kernel.h"

bool kn_kernel_info_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_execute_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_complete_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_inspect_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_is_complete_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_history_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_comm_info_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_comm_open(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_shutdown_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);
bool kn_interrupt_request(kn_kernel_t *k, kn_channel_t ch, kn_msg_t *req);

/* Answer a queued execute_request with status "aborted" (stop_on_error). */
void kn_execute_abort(kn_kernel_t *k, kn_msg_t *req);

/* stdin channel (kn_stdin.c): forward an executor input_request event to
 * the front end; accept the front end's input_reply. */
void kn_stdin_forward(kn_kernel_t *k, json_t *event);
void kn_stdin_on_reply(kn_kernel_t *k, kn_msg_t *msg);

/* Small accessors for request content (kn_kernel.c). */
const char *kn_content_str(const kn_msg_t *req, const char *key, const char *dflt);
bool kn_content_bool(const kn_msg_t *req, const char *key, bool dflt);
json_int_t kn_content_int(const kn_msg_t *req, const char *key, json_int_t dflt);

#endif
