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

#include <stdbool.h>
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

/* The raw ZeroMQ socket of a channel. Borrowed. */
void *kn_transport_socket(kn_transport_t *t, kn_channel_t ch);

/* For an event loop that poll(2)s the sockets itself (kn_server.c):
 * kn_transport_fd is the channel's ZMQ_FD, which is edge-triggered: it
 * turns readable when the socket's state may have changed, and any
 * ZeroMQ call on the socket may consume that signal. So the loop calls
 * kn_transport_signalled when poll saw the fd readable, and asks
 * kn_transport_readable whether a message waits: that asks ZeroMQ
 * (ZMQ_EVENTS, two system calls) only when the fd was signalled or the
 * socket was used (send, or a receive that got a message) since the last
 * answer, and otherwise returns the last answer without a system call.
 * A receive that found nothing leaves the socket known empty: ZeroMQ
 * drained its command mailbox then, so the next message signals the fd.
 * kn_transport_fd returns -1 for a channel without a socket. */
int kn_transport_fd(kn_transport_t *t, kn_channel_t ch);
void kn_transport_signalled(kn_transport_t *t, kn_channel_t ch);
bool kn_transport_readable(kn_transport_t *t, kn_channel_t ch);

#endif
