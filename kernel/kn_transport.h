/*
 * kn_transport.h — the five ZeroMQ sockets of a Jupyter kernel (messaging
 * spec "Introduction"): shell (ROUTER), control (ROUTER), stdin (ROUTER),
 * iopub (PUB), heartbeat (REP, echoed on its own thread, kn_heartbeat.c).
 *
 * Every received message is authenticated (kn_auth) over the exact frames
 * received; a message with a bad or missing signature is logged to
 * stderr and dropped.
 */
#ifndef KN_TRANSPORT_H
#define KN_TRANSPORT_H

#include <stddef.h>

#include "kn_connection.h"
#include "kn_io.h"

typedef struct kn_transport kn_transport_t;

/* Create the ZeroMQ context, bind the five sockets of c and start the
 * heartbeat thread. Returns NULL on failure with the reason (which
 * endpoint, why) in err[err_len]. Caller owns the result. */
kn_transport_t *kn_transport_new(const kn_connection_t *c, char *err, size_t err_len);

/* Close the sockets (lingering up to 1 s so the last replies leave),
 * stop the heartbeat thread, terminate the context. NULL-safe. */
void kn_transport_destroy(kn_transport_t **self_p);

/* The kn_io_t view of this transport (valid while it lives). */
kn_io_t kn_transport_io(kn_transport_t *t);

/* The raw ZeroMQ socket of a channel, for zmq_poll. Borrowed. */
void *kn_transport_socket(kn_transport_t *t, kn_channel_t ch);

#endif
