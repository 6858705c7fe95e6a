/* kn_heartbeat.c — echo thread for the heartbeat REP socket (see kn_heartbeat.h). */
#include "kn_heartbeat.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <zmq.h>

#include "kn_log.h"

struct kn_heartbeat {
  pthread_t thread;
  void *sock;
};

static void *run(void *arg) {
  kn_heartbeat_t *hb = arg;
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  for (;;) {
    if (zmq_msg_recv(&msg, hb->sock, 0) < 0) {
      if (zmq_errno() == EINTR)
        continue;
      break; /* ETERM: the context is shutting down */
    }
    int more = zmq_msg_more(&msg);
    if (zmq_msg_send(&msg, hb->sock, more ? ZMQ_SNDMORE : 0) < 0 && zmq_errno() == ETERM)
      break;
  }
  zmq_msg_close(&msg);
  int linger = 0;
  zmq_setsockopt(hb->sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_close(hb->sock);
  return NULL;
}

kn_heartbeat_t *kn_heartbeat_start(void *sock) {
  kn_heartbeat_t *hb = calloc(1, sizeof *hb);
  if (!hb)
    return NULL;
  hb->sock = sock;
  if (pthread_create(&hb->thread, NULL, run, hb) != 0) {
    free(hb);
    return NULL;
  }
  return hb;
}

void kn_heartbeat_join(kn_heartbeat_t **self_p) {
  if (!self_p || !*self_p)
    return;
  pthread_join((*self_p)->thread, NULL);
  free(*self_p);
  *self_p = NULL;
}
