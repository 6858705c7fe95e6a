/*
 * kn_heartbeat.h — the heartbeat channel (messaging spec "Heartbeat for
 * kernels"): a REP socket that echoes every message, on its own thread so
 * a busy main loop never looks dead.
 */
#ifndef KN_HEARTBEAT_H
#define KN_HEARTBEAT_H

#include "kn_result.h"

typedef struct kn_heartbeat kn_heartbeat_t;

/* Start echoing on the already bound REP socket sock (ownership of the
 * socket passes to the heartbeat thread, which closes it). Returns NULL if
 * the thread cannot start. */
kn_heartbeat_t *kn_heartbeat_start(void *sock);

/* Join the thread. Call after zmq_ctx_shutdown() on the socket's context
 * (which makes the blocked receive return ETERM). NULL-safe. */
void kn_heartbeat_join(kn_heartbeat_t **self_p);

#endif
