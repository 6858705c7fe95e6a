/* kn_server.c — the kernel's single-threaded main loop (see kn_server.h). */
#define _GNU_SOURCE
#include "kn_server.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

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

kn_result_t kn_server_run(kn_kernel_t *k, kn_transport_t *t, int sig_fd) {
  pid_t parent = nbf_param_raw(NBF_P_JPY_PARENT_PID) ? getppid() : 0;
  int64_t next_parent_check = 0;
  int failures = 0;
  while (!k->stop) {
    zmq_pollitem_t items[10];
    int n = 0;
    items[n++] = (zmq_pollitem_t){kn_transport_socket(t, KN_CH_CONTROL), 0, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){kn_transport_socket(t, KN_CH_SHELL), 0, ZMQ_POLLIN, 0};
    items[n++] = (zmq_pollitem_t){kn_transport_socket(t, KN_CH_STDIN), 0, ZMQ_POLLIN, 0};
    if (sig_fd >= 0)
      items[n++] = (zmq_pollitem_t){NULL, sig_fd, ZMQ_POLLIN, 0};
    nbf_executor_t *ex = &k->ex;
    int rfds[3] = {ex->fd_out[0], ex->fd_out[1], ex->fd_ev};
    for (int i = 0; i < 3; i++)
      if (rfds[i] >= 0)
        items[n++] = (zmq_pollitem_t){NULL, rfds[i], ZMQ_POLLIN, 0};
    if (nbf_executor_wants_req_write(ex))
      items[n++] = (zmq_pollitem_t){NULL, ex->fd_req, ZMQ_POLLOUT, 0};
    if (nbf_executor_wants_in_write(ex))
      items[n++] = (zmq_pollitem_t){NULL, ex->fd_in, ZMQ_POLLOUT, 0};

    long timeout = KN_TICK_MS;
    if (k->ex.interrupt_deadline_ms) {
      int64_t left = k->ex.interrupt_deadline_ms - nbf_now_ms();
      timeout = left < 0 ? 0 : (left < timeout ? (long)left : timeout);
    }
    if (zmq_poll(items, n, timeout) < 0) {
      if (zmq_errno() != EINTR) {
        kn_log(KN_LOG_ERROR, "zmq_poll: %s", zmq_strerror(zmq_errno()));
        if (++failures > 100)
          return KN_ERR_ZMQ;
      }
    } else
      failures = 0;

    handle_signals(k, sig_fd);
    read_channel(k, KN_CH_CONTROL);
    /* Executor pipes: read whatever is there (cheap when empty; robust
     * when a handler above replaced the executor and its fds). */
    if (nbf_executor_wants_req_write(&k->ex) || nbf_executor_wants_in_write(&k->ex))
      nbf_executor_flush(&k->ex);
    kn_kernel_drain_output(k);
    kn_kernel_read_events(k);
    read_channel(k, KN_CH_STDIN);
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
