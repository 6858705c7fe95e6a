/*
 * kn_server.h — the main loop (after xeus's xserver): one thread polls
 * the shell, control and stdin sockets, the executor's stdout, stderr and
 * events pipes, and the signal self-pipe with zmq_poll (which accepts
 * plain fds), and hands what arrives to kn_kernel.
 *
 * Priorities per wake-up: signals, control, executor output/events,
 * stdin, shell; then timers (interrupt deadline, executor exit) and the
 * shell queue. The executor pipes are read whenever readable, even while
 * idle, so the executor never blocks on a full pipe.
 */
#ifndef KN_SERVER_H
#define KN_SERVER_H

#include "kn_kernel.h"
#include "kn_transport.h"

/* Run until k->stop (shutdown_request, SIGTERM, parent gone). sig_fd is
 * kn_signals_install's read end (-1: none). Returns KN_OK, or
 * KN_ERR_ZMQ if polling fails for good. */
kn_result_t kn_server_run(kn_kernel_t *k, kn_transport_t *t, int sig_fd);

#endif
