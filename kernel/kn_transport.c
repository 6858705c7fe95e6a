/* kn_transport.c — ZeroMQ sockets of the kernel (see kn_transport.h). */
#include "kn_transport.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kn_auth.h"
#include "kn_heartbeat.h"
#include "kn_log.h"
#include "nbf_util.h"

#define KN_LINGER_MS 1000
#define KN_IOPUB_HWM 10000 /* messages queued per subscriber before PUB drops */

struct kn_transport {
  void *ctx;
  void *sock[KN_CH_COUNT];
  int fd[KN_CH_COUNT];        /* ZMQ_FD of each socket */
  bool unknown[KN_CH_COUNT];  /* used or signalled since ZMQ_EVENTS was last read */
  bool readable[KN_CH_COUNT]; /* ZMQ_EVENTS had ZMQ_POLLIN, when !unknown */
  kn_dump_cache_t parent;     /* the last parent header's JSON (kn_message.h) */
  kn_heartbeat_t *hb;
  kn_auth_t *auth;
};

const char *kn_channel_name(kn_channel_t ch) {
  static const char *const names[KN_CH_COUNT] = {"shell", "control", "stdin", "iopub"};
  return (ch >= 0 && ch < KN_CH_COUNT) ? names[ch] : "?";
}

static void *make_socket(kn_transport_t *t, const kn_connection_t *c, int type,
                         kn_port_index_t port, char *err, size_t err_len) {
  char ep[600];
  if (kn_connection_endpoint(c, port, ep, sizeof ep) != KN_OK) {
    snprintf(err, err_len, "endpoint for %s is too long", kn_connection_port_name(port));
    return NULL;
  }
  void *s = zmq_socket(t->ctx, type);
  if (!s) {
    snprintf(err, err_len, "zmq_socket: %s", zmq_strerror(zmq_errno()));
    return NULL;
  }
  int linger = KN_LINGER_MS, one = 1;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  if (type == ZMQ_ROUTER)
    zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
  if (type == ZMQ_PUB) {
    int hwm = KN_IOPUB_HWM;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  }
  if (strchr(c->ip, ':') && strcmp(c->transport, "tcp") == 0)
    zmq_setsockopt(s, ZMQ_IPV6, &one, sizeof one);
  if (zmq_bind(s, ep) != 0) {
    snprintf(err, err_len, "cannot bind %s to %s: %s", kn_connection_port_name(port), ep,
             zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  kn_log(KN_LOG_DEBUG, "%s bound to %s", kn_connection_port_name(port), ep);
  return s;
}

static kn_result_t io_send(void *self, kn_channel_t ch, const kn_msg_t *m);
static kn_result_t io_recv(void *self, kn_channel_t ch, kn_msg_t **out);

kn_transport_t *kn_transport_new(const kn_connection_t *c, char *err, size_t err_len) {
  kn_transport_t *t = calloc(1, sizeof *t);
  void *hb_sock = NULL;
  if (!t) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  t->auth = kn_auth_new(c->signature_scheme, c->key, c->key_len);
  if (!t->auth) {
    snprintf(err, err_len, "OpenSSL cannot provide %s", c->signature_scheme);
    goto fail;
  }
  t->ctx = zmq_ctx_new();
  if (!t->ctx) {
    snprintf(err, err_len, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    goto fail;
  }
  static const struct {
    kn_channel_t ch;
    int type;
    kn_port_index_t port;
  } spec[] = {{KN_CH_SHELL, ZMQ_ROUTER, KN_PORT_SHELL},
              {KN_CH_CONTROL, ZMQ_ROUTER, KN_PORT_CONTROL},
              {KN_CH_STDIN, ZMQ_ROUTER, KN_PORT_STDIN},
              {KN_CH_IOPUB, ZMQ_PUB, KN_PORT_IOPUB}};
  for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
    kn_channel_t ch = spec[i].ch;
    if (!(t->sock[ch] = make_socket(t, c, spec[i].type, spec[i].port, err, err_len)))
      goto fail;
    size_t fd_len = sizeof t->fd[ch];
    if (zmq_getsockopt(t->sock[ch], ZMQ_FD, &t->fd[ch], &fd_len) != 0) {
      snprintf(err, err_len, "ZMQ_FD: %s", zmq_strerror(zmq_errno()));
      goto fail;
    }
    t->unknown[ch] = true;
  }
  if (!(hb_sock = make_socket(t, c, ZMQ_REP, KN_PORT_HB, err, err_len)))
    goto fail;
  if (!(t->hb = kn_heartbeat_start(hb_sock))) {
    snprintf(err, err_len, "cannot start the heartbeat thread");
    zmq_close(hb_sock);
    goto fail;
  }
  return t;
fail:
  kn_transport_destroy(&t);
  return NULL;
}

void kn_transport_destroy(kn_transport_t **self_p) {
  kn_transport_t *t = NBF_TAKE(self_p);
  if (!t)
    return;
  for (int i = 0; i < KN_CH_COUNT; i++)
    if (t->sock[i])
      zmq_close(t->sock[i]);
  if (t->ctx) {
    zmq_ctx_shutdown(t->ctx); /* wakes the heartbeat thread with ETERM */
    kn_heartbeat_join(&t->hb);
    zmq_ctx_term(t->ctx); /* waits up to the linger for queued replies */
  }
  kn_auth_destroy(&t->auth);
  kn_dump_cache_clear(&t->parent);
  free(t);
}

kn_io_t kn_transport_io(kn_transport_t *t) {
  kn_io_t io = {io_send, io_recv, t};
  return io;
}

void *kn_transport_socket(kn_transport_t *t, kn_channel_t ch) {
  return (ch >= 0 && ch < KN_CH_COUNT) ? t->sock[ch] : NULL;
}

int kn_transport_fd(kn_transport_t *t, kn_channel_t ch) {
  return (ch >= 0 && ch < KN_CH_COUNT && t->sock[ch]) ? t->fd[ch] : -1;
}

void kn_transport_signalled(kn_transport_t *t, kn_channel_t ch) {
  if (ch >= 0 && ch < KN_CH_COUNT)
    t->unknown[ch] = true;
}

bool kn_transport_readable(kn_transport_t *t, kn_channel_t ch) {
  if (ch < 0 || ch >= KN_CH_COUNT || !t->sock[ch])
    return false;
  if (t->unknown[ch]) {
    uint32_t ev = 0; /* ZMQ_EVENTS processes the socket's commands: it resets the fd */
    size_t len = sizeof ev;
    if (zmq_getsockopt(t->sock[ch], ZMQ_EVENTS, &ev, &len) != 0)
      return true; /* let the receive report the error */
    t->readable[ch] = (ev & ZMQ_POLLIN) != 0;
    t->unknown[ch] = false;
  }
  return t->readable[ch];
}

static kn_result_t io_send(void *self, kn_channel_t ch, const kn_msg_t *m) {
  kn_transport_t *t = self;
  t->unknown[ch] = true; /* zmq_send may process commands: the fd's edge with them */
  kn_frames_t frames = {0};
  kn_result_t r;
  if (ch == KN_CH_IOPUB && m->ids.n == 0) {
    /* PUB topic frame: "kernel.<session>.<msg_type>" (as ipykernel). */
    char topic[256];
    const char *session = json_string_value(json_object_get(m->header, "session"));
    snprintf(topic, sizeof topic, "kernel.%s.%s", session ? session : "", kn_msg_type(m));
    if ((r = kn_frames_push(&frames, topic, strlen(topic))) != KN_OK)
      return r;
  }
  if ((r = kn_msg_serialize_cached(m, t->auth, &t->parent, &frames)) != KN_OK) {
    kn_frames_clear(&frames);
    return r;
  }
  r = KN_OK;
  for (size_t i = 0; i < frames.n; i++) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.n ? ZMQ_SNDMORE : 0);
    if (zmq_send(t->sock[ch], frames.v[i].data, frames.v[i].len, flags) < 0) {
      kn_log(KN_LOG_WARN, "dropped %s on %s: %s", kn_msg_type(m), kn_channel_name(ch),
             zmq_strerror(zmq_errno()));
      r = KN_ERR_ZMQ;
      break;
    }
  }
  kn_frames_clear(&frames);
  return r;
}

static kn_result_t io_recv(void *self, kn_channel_t ch, kn_msg_t **out) {
  kn_transport_t *t = self;
  void *s = t->sock[ch];
  *out = NULL;
  size_t n = 0, cap = 0;
  zmq_msg_t *parts = NULL;
  kn_result_t r = KN_OK;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      zmq_msg_t *p = realloc(parts, cap * sizeof *p);
      if (!p) {
        r = KN_ERR_NOMEM;
        break;
      }
      parts = p;
    }
    zmq_msg_init(&parts[n]);
    if (zmq_msg_recv(&parts[n], s, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
      int e = zmq_errno();
      zmq_msg_close(&parts[n]);
      r = (n == 0 && (e == EAGAIN || e == EINTR)) ? KN_ERR_AGAIN : KN_ERR_ZMQ;
      /* EAGAIN: ZeroMQ drained the socket's mailbox and found no message;
       * the next one signals the fd. Anything else: ask again. */
      t->unknown[ch] = !(n == 0 && e == EAGAIN);
      t->readable[ch] = false;
      break;
    }
    n++;
    t->unknown[ch] = true; /* more may be queued; the receive may have taken the fd's edge */
    if (!zmq_msg_more(&parts[n - 1]))
      break;
  }
  if (r == KN_OK) {
    kn_span_t *spans = malloc(n * sizeof *spans);
    if (!spans)
      r = KN_ERR_NOMEM;
    else {
      for (size_t i = 0; i < n; i++) {
        spans[i].data = zmq_msg_data(&parts[i]);
        spans[i].len = zmq_msg_size(&parts[i]);
      }
      char why[256];
      r = kn_msg_parse(spans, n, t->auth, out, why, sizeof why);
      if (r == KN_ERR_AUTH || r == KN_ERR_PROTOCOL)
        kn_log(KN_LOG_WARN, "dropped a message on %s: %s", kn_channel_name(ch), why);
      free(spans);
    }
  }
  for (size_t i = 0; i < n; i++)
    zmq_msg_close(&parts[i]);
  free(parts);
  return r;
}
