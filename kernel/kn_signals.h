/*
 * kn_signals.h — the kernel's signal handling (self-pipe).
 *
 * SIGINT: Jupyter's signal-mode interrupt is a killpg of the kernel's
 * process group; the executor lives in its own group, so the kernel
 * forwards exactly one SIGINT to it (kn_kernel_interrupt) while busy.
 * SIGTERM/SIGHUP: leave the main loop and shut down cleanly. SIGPIPE is
 * ignored (a dead executor's pipe gives EPIPE instead).
 *
 * Call kn_signals_block() before any thread starts (ZeroMQ's I/O threads,
 * heartbeat) so they inherit a mask that keeps these signals on the main
 * thread, then kn_signals_install() on the main thread.
 */
#ifndef KN_SIGNALS_H
#define KN_SIGNALS_H

#include "kn_result.h"

#define KN_SIGNAL_INTERRUPT 'i'
#define KN_SIGNAL_TERMINATE 't'

/* Block SIGINT, SIGTERM, SIGHUP in the calling thread; ignore SIGPIPE. */
void kn_signals_block(void);

/* Install the handlers, unblock in the calling thread, and return the
 * read end of the self-pipe in *fd (non-blocking; each byte is
 * KN_SIGNAL_INTERRUPT or KN_SIGNAL_TERMINATE). */
kn_result_t kn_signals_install(int *fd);

/* Read one pending signal byte from fd: KN_SIGNAL_* or 0 if none. */
int kn_signals_next(int fd);

#endif
