/*
 * kn_server.h — the main loop (after xeus's xserver): one thread polls
 * the shell, control and stdin sockets (their ZMQ_FD), the executor's
 * stdout, stderr and events pipes, and the signal self-pipe with poll(2),
 * and hands what arrives to kn_kernel.
 *
 * Priorities per wake-up: signals, control, executor output/events,
 * stdin, shell; then timers (interrupt deadline, executor exit) and the
 * shell queue. The executor pipes are read whenever readable, even while
 * idle, so the executor never blocks on a full pipe.
 *
 * Cost per wake-up (a trivial cell wakes it 2-3 times): only the sources
 * poll saw ready are read, and ZeroMQ is asked for a socket's state
 * (ZMQ_EVENTS) only when its fd fired or it was used since
 * (kn_transport_readable). zmq_poll asked every socket twice per wake-up
 * and every source was read until EAGAIN: about 100 system calls of the
 * kernel's main thread per trivial cell then, about 34 now.
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
