/*
 * kn_io.h — the transport interface the request handlers see (after
 * xeus's xserver): send a message on a channel, receive one without
 * blocking. kn_transport.c implements it over ZeroMQ; the unit tests plug
 * in a mock that records what handlers send.
 */
#ifndef KN_IO_H
#define KN_IO_H

#include "kn_message.h"
#include "kn_result.h"

typedef enum kn_channel {
  KN_CH_SHELL,
  KN_CH_CONTROL,
  KN_CH_STDIN,
  KN_CH_IOPUB,
  KN_CH_COUNT
} kn_channel_t;

/* "shell", "control", "stdin", "iopub". */
const char *kn_channel_name(kn_channel_t ch);

typedef struct kn_io {
  /* Sign and send m on ch (routed to m->ids on ROUTER channels). Never
   * blocks: a message ZeroMQ cannot queue is dropped and logged. Does not
   * take ownership of m. */
  kn_result_t (*send)(void *self, kn_channel_t ch, const kn_msg_t *m);
  /* Receive one message from ch without blocking: KN_OK (*out owned by
   * the caller), KN_ERR_AGAIN (nothing queued), or KN_ERR_AUTH /
   * KN_ERR_PROTOCOL for a message that was dropped (already logged). */
  kn_result_t (*recv)(void *self, kn_channel_t ch, kn_msg_t **out);
  void *self;
} kn_io_t;

#endif
