/* kn_pending.c — the in-flight executor request (see kn_pending.h). */
#define _GNU_SOURCE
#include "kn_pending.h"

#include <stdlib.h>
#include <string.h>

struct kn_pending {
  kn_msg_t *msg; /* the request (owned), NULL when none */
  kn_channel_t channel;
  kn_finish_fn finish;
  bool is_execute;
  kn_exec_flags_t exec;
  bool waiting_input; /* an input_request went to the front end */
  bool interrupted;   /* an interrupt was forwarded */
  char *result_text;  /* execute_result text/plain, for history output */
};

kn_pending_t *kn_pending_new(void) {
  return calloc(1, sizeof(kn_pending_t));
}

void kn_pending_destroy(kn_pending_t **self_p) {
  if (!self_p || !*self_p)
    return;
  kn_pending_end(*self_p);
  free(*self_p);
  *self_p = NULL;
}

void kn_pending_begin(kn_pending_t *p, kn_channel_t ch, kn_msg_t *req, kn_finish_fn finish,
                      const kn_exec_flags_t *exec) {
  kn_pending_end(p);
  p->msg = req;
  p->channel = ch;
  p->finish = finish;
  p->is_execute = exec != NULL;
  if (exec)
    p->exec = *exec;
}

void kn_pending_end(kn_pending_t *p) {
  kn_msg_destroy(&p->msg);
  free(p->result_text);
  memset(p, 0, sizeof *p);
}

kn_msg_t *kn_pending_msg(const kn_pending_t *p) {
  return p->msg;
}

kn_channel_t kn_pending_channel(const kn_pending_t *p) {
  return p->channel;
}

void kn_pending_complete(kn_pending_t *p, struct kn_kernel *k, json_t *reply) {
  if (p->msg && p->finish)
    p->finish(k, reply);
}

const kn_exec_flags_t *kn_pending_execute(const kn_pending_t *p) {
  return p->msg && p->is_execute ? &p->exec : NULL;
}

bool kn_pending_waiting_input(const kn_pending_t *p) {
  return p->msg && p->waiting_input;
}

void kn_pending_set_waiting_input(kn_pending_t *p, bool waiting) {
  p->waiting_input = waiting;
}

bool kn_pending_interrupted(const kn_pending_t *p) {
  return p->msg && p->interrupted;
}

void kn_pending_mark_interrupted(kn_pending_t *p) {
  if (p->msg)
    p->interrupted = true;
}

const char *kn_pending_result_text(const kn_pending_t *p) {
  return p->result_text;
}

void kn_pending_set_result_text(kn_pending_t *p, const char *text) {
  free(p->result_text);
  p->result_text = text ? strdup(text) : NULL;
}
