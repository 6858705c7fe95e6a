/*
 * acc_store_monitor.h — one event of a ZeroMQ socket monitor, for the
 * store's client (why a handshake failed) and server (what it refused).
 *
 * ZeroMQ's monitor protocol (v1, zmq_socket_monitor): frame 1 holds the
 * event id (16 bits) and a value (32 bits; for a failed handshake the
 * ZMQ_PROTOCOL_ERROR_*), frame 2 the endpoint, which is read and dropped.
 */
#ifndef ACC_STORE_MONITOR_H
#define ACC_STORE_MONITOR_H

#include <stdint.h>
#include <string.h>
#include <zmq.h>

/* Read the next queued event of monitor socket `mon` without waiting:
 * 0 with *id and *value set (0 where the frame is short), -1 when none
 * is queued. */
static inline int acc__store_monitor_next(void *mon, uint16_t *id, uint32_t *value) {
  zmq_msg_t ev;
  zmq_msg_init(&ev);
  if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&ev);
    return -1;
  }
  *id = 0;
  *value = 0;
  if (zmq_msg_size(&ev) >= 2)
    memcpy(id, zmq_msg_data(&ev), 2);
  if (zmq_msg_size(&ev) >= 6)
    memcpy(value, (const char *)zmq_msg_data(&ev) + 2, 4);
  int more = zmq_msg_more(&ev);
  zmq_msg_close(&ev);
  while (more) { /* the endpoint frame */
    zmq_msg_init(&ev);
    more = zmq_msg_recv(&ev, mon, 0) < 0 ? 0 : zmq_msg_more(&ev);
    zmq_msg_close(&ev);
  }
  return 0;
}

#endif
