/* kn_server.c — the kernel's single-threaded main loop (see kn_server.h). */
#define _GNU_SOURCE
#include "kn_server.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "kn_log.h"
#include "kn_signals.h"
#include "nbf_param.h"

#define KN_TICK_MS 100 /* longest sleep: executor exit checks, parent checks */

static void read_channel(kn_kernel_t *k, kn_channel_t ch) {
  kn_msg_t *m;
  kn_result_t r;
  /* Bounded so a flood on one channel cannot starve the others. */
  for (int i = 0; i < 256 && !k->stop; i++) {
    r = k->io.recv(k->io.self, ch, &m);
    if (r == KN_ERR_AGAIN)
      return;
    if (r == KN_OK)
      kn_kernel_on_message(k, ch, m);
    else if (r != KN_ERR_AUTH && r != KN_ERR_PROTOCOL)
      return;
  }
}

static void handle_signals(kn_kernel_t *k, int sig_fd) {
  int c;
  while (sig_fd >= 0 && (c = kn_signals_next(sig_fd)) != 0) {
    if (c == KN_SIGNAL_INTERRUPT) {
      kn_log(KN_LOG_DEBUG, "SIGINT: interrupting the executor");
      kn_kernel_interrupt(k);
    } else {
      kn_log(KN_LOG_INFO, "terminating on signal");
      k->stop = true;
    }
  }
}

/* ipykernel's ParentPollerUnix: when started by a Jupyter client
 * (JPY_PARENT_PID set) and that parent goes away, exit. */
static void check_parent(kn_kernel_t *k, pid_t parent) {
  if (parent > 1 && getppid() != parent) {
    kn_log(KN_LOG_WARN, "parent process %d is gone: shutting down", (int)parent);
    k->stop = true;
  }
}

/* Where each source of one loop turn sits in p[] (-1: not polled). The
 * sockets are polled on their ZMQ_FD with poll(2), not zmq_poll: zmq_poll
 * asks every socket for ZMQ_EVENTS before and after sleeping (two system
 * calls each, idle ones included); kn_transport_readable asks only the
 * sockets whose fd fired or that were used. */
typedef struct {
  struct pollfd p[10];
  int n;
  int ch[3]; /* POLLED[i] */
  int sig, out[2], ev, req, in;
} kn_pollset_t;

static const kn_channel_t POLLED[3] = {KN_CH_CONTROL, KN_CH_SHELL, KN_CH_STDIN};

static int add_fd(kn_pollset_t *s, int fd, short events) {
  if (fd < 0)
    return -1;
  s->p[s->n] = (struct pollfd){.fd = fd, .events = events};
  return s->n++;
}

static bool fired(const kn_pollset_t *s, int at) {
  return at >= 0 && s->p[at].revents != 0;
}

static void build_pollset(kn_pollset_t *s, kn_kernel_t *k, kn_transport_t *t, int sig_fd) {
  nbf_executor_t *ex = &k->ex;
  s->n = 0;
  for (int i = 0; i < 3; i++)
    s->ch[i] = add_fd(s, kn_transport_fd(t, POLLED[i]), POLLIN);
  s->sig = add_fd(s, sig_fd, POLLIN);
  s->out[0] = add_fd(s, ex->fd_out[0], POLLIN);
  s->out[1] = add_fd(s, ex->fd_out[1], POLLIN);
  s->ev = add_fd(s, ex->fd_ev, POLLIN);
  s->req = nbf_executor_wants_req_write(ex) ? add_fd(s, ex->fd_req, POLLOUT) : -1;
  s->in = nbf_executor_wants_in_write(ex) ? add_fd(s, ex->fd_in, POLLOUT) : -1;
}

/* Sleep until something is ready (at most KN_TICK_MS, or until the
 * interrupt deadline); not at all while a socket has a message waiting.
 * 0, or -1 after too many failures in a row. */
static int wait_ready(kn_kernel_t *k, kn_transport_t *t, kn_pollset_t *s, int *failures) {
  int timeout = KN_TICK_MS;
  if (k->ex.interrupt_deadline_ms) {
    int64_t left = k->ex.interrupt_deadline_ms - nbf_now_ms();
    timeout = left < 0 ? 0 : (left < timeout ? (int)left : timeout);
  }
  for (int i = 0; i < 3 && timeout; i++)
    if (kn_transport_readable(t, POLLED[i]))
      timeout = 0;
  if (poll(s->p, (nfds_t)s->n, timeout) < 0) {
    for (int i = 0; i < s->n; i++)
      s->p[i].revents = 0;
    if (errno != EINTR) {
      kn_log(KN_LOG_ERROR, "poll: %s", NBF_STRERROR(errno));
      if (++*failures > 100)
        return -1;
    }
    return 0;
  }
  *failures = 0;
  for (int i = 0; i < 3; i++)
    if (fired(s, s->ch[i]))
      kn_transport_signalled(t, POLLED[i]);
  return 0;
}

kn_result_t kn_server_run(kn_kernel_t *k, kn_transport_t *t, int sig_fd) {
  pid_t parent = nbf_param_raw(NBF_P_JPY_PARENT_PID) ? getppid() : 0;
  int64_t next_parent_check = 0;
  int failures = 0;
  kn_pollset_t s;
  while (!k->stop) {
    build_pollset(&s, k, t, sig_fd);
    if (wait_ready(k, t, &s, &failures) != 0)
      return KN_ERR_ZMQ;
    /* Same order as always: signals, control, the executor, stdin, shell.
     * A source is read when poll saw it ready (a handler that replaced
     * the executor meanwhile leaves the new pipes to the next turn). */
    if (fired(&s, s.sig))
      handle_signals(k, sig_fd);
    if (kn_transport_readable(t, KN_CH_CONTROL))
      read_channel(k, KN_CH_CONTROL);
    if ((fired(&s, s.req) || fired(&s, s.in)) &&
        (nbf_executor_wants_req_write(&k->ex) || nbf_executor_wants_in_write(&k->ex)))
      nbf_executor_flush(&k->ex);
    if (fired(&s, s.out[0]) || fired(&s, s.out[1]))
      kn_kernel_drain_output(k);
    if (fired(&s, s.ev))
      kn_kernel_read_events(k);
    if (kn_transport_readable(t, KN_CH_STDIN))
      read_channel(k, KN_CH_STDIN);
    if (kn_transport_readable(t, KN_CH_SHELL))
      read_channel(k, KN_CH_SHELL);
    kn_kernel_tick(k);
    kn_kernel_process_queue(k);
    if (parent && nbf_now_ms() >= next_parent_check) {
      check_parent(k, parent);
      next_parent_check = nbf_now_ms() + 1000;
    }
  }
  return KN_OK;
}
