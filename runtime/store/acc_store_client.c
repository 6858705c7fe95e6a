/*
 * acc_store_client.c — client of the rendezvous store (protocol in
 * acc_store.h): a ZeroMQ DEALER, one request in flight at a time.
 *
 * Timeouts: each request polls for its answer until a deadline. When the
 * deadline passes, the socket is closed (linger 0) and a fresh one is
 * connected, so a late answer to the abandoned request can never be taken
 * for the answer to the next one (the server's ROUTER drops replies to
 * the closed socket's identity).
 */
#define _GNU_SOURCE
#include "acc_store.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "acc_internal.h"
#include "acc_store_monitor.h"
#include "nbf_util.h"

struct acc_store_client {
  void *ctx;
  void *sock;
  char endpoint[320];
  int timeout_ms;
  char err[768];
  /* CURVE (secure store): the server's public key derived from the
   * secret, and this client's random key pair */
  int secure;
  char server_pub[41], pub[41], sec[41];
  /* socket monitor: tells a refused handshake from an absent server */
  void *mon;
  unsigned mon_gen;
  acc_store_refusal_t refusal; /* why the last request got no answer */
};

int acc_store_curve_keys(const char *secret, char public_z85[41], char secret_z85[41]) {
  if (!secret || !zmq_has("curve"))
    return -1;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (EVP_Digest(secret, strlen(secret), md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
    return -1;
  char sec[41];
  if (!zmq_z85_encode(sec, md, 32) || zmq_curve_public(public_z85, sec) != 0)
    return -1;
  if (secret_z85)
    memcpy(secret_z85, sec, sizeof sec);
  return 0;
}

/* Handshake events seen by the monitor since the socket was opened. */
enum {
  MON_CONNECTED = 1,
  MON_HANDSHAKE_OK = 2,
  MON_HANDSHAKE_FAILED = 4,
  MON_DISCONNECTED = 8,
  MON_MECHANISM_MISMATCH = 16 /* one side has a secret (CURVE), the other none */
};

/* Reads every queued event. The queue must not stay full: ZeroMQ's I/O
 * thread sends monitor events blocking, holding the socket's monitor
 * lock, so with a full queue (a refused client reconnects every
 * millisecond, three events per attempt, 1000 queued at most) stopping
 * the monitor in close_socket deadlocks (seen: a rank hung in
 * runtime.store.secret_ranks_wrong). MON_DRAIN_MAX only bounds the loop
 * for a reader slower than the producer. */
#define MON_DRAIN_MAX 100000

static int drain_monitor(acc_store_client_t *c) {
  int seen = 0;
  if (!c->mon)
    return 0;
  uint16_t id;
  uint32_t value; /* for a failed handshake: ZMQ_PROTOCOL_ERROR_* */
  for (int n = 0; n < MON_DRAIN_MAX && acc__store_monitor_next(c->mon, &id, &value) == 0; n++) {
    if (id == ZMQ_EVENT_CONNECTED)
      seen |= MON_CONNECTED;
    else if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
      seen |= MON_HANDSHAKE_OK;
    else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
             id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      seen |= MON_HANDSHAKE_FAILED |
              (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? MON_MECHANISM_MISMATCH : 0);
    else if (id == ZMQ_EVENT_DISCONNECTED)
      seen |= MON_DISCONNECTED;
  }
  return seen;
}

static void close_socket(acc_store_client_t *c) {
  if (c->sock) {
    drain_monitor(c); /* an empty queue right before the stop: see drain_monitor */
    zmq_socket_monitor(c->sock, NULL, 0);
    zmq_close(c->sock);
    c->sock = NULL;
  }
  if (c->mon) {
    int zero = 0;
    zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(c->mon);
    c->mon = NULL;
  }
}

static void set_err(acc_store_client_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_err(acc_store_client_t *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
}

static int open_socket(acc_store_client_t *c) {
  c->sock = zmq_socket(c->ctx, ZMQ_DEALER);
  if (!c->sock)
    return -1;
  int zero = 0;
  zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
  if (c->secure && (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, c->server_pub, 40) != 0 ||
                    zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, c->pub, 40) != 0 ||
                    zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, c->sec, 40) != 0)) {
    zmq_close(c->sock);
    c->sock = NULL;
    return -1;
  }
  /* The monitor (events of this socket over inproc) must exist before
   * connecting so that the first handshake is seen. */
  char mon_ep[96];
  snprintf(mon_ep, sizeof mon_ep, "inproc://nbfork-store-mon-%p-%u", (void *)c, ++c->mon_gen);
  if (zmq_socket_monitor(c->sock, mon_ep,
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
                             ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
    c->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (c->mon && zmq_connect(c->mon, mon_ep) != 0) {
      zmq_close(c->mon);
      c->mon = NULL;
    }
  }
  /* Reconnect quickly while the server is not up yet: a launcher starts
   * hosting the store only after it forked the workers (it must fork
   * while single-threaded), so a worker's first connection is often
   * refused; ZeroMQ then retries after `ivl` ms, doubling up to ivl_max.
   * 20 ms here was a third of a launch's cost. */
  int ivl = 1, ivl_max = 250;
  zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
  if (zmq_connect(c->sock, c->endpoint) != 0) {
    int e = errno;
    close_socket(c);
    errno = e;
    return -1;
  }
  return 0;
}

acc_store_client_t *acc_store_client_new(const char *addr, int port, int timeout_ms) {
  return acc_store_client_new_secure(addr, port, timeout_ms, NULL);
}

acc_store_client_t *acc_store_client_new_secure(const char *addr, int port, int timeout_ms,
                                                const char *secret) {
  char err[512];
  acc_store_client_t *c = acc_store_client_open(addr, port, timeout_ms, secret, err, sizeof err);
  if (!c)
    fprintf(stderr, "nbfork store client: %s\n", err); /* documented in acc_store.h */
  return c;
}

acc_store_client_t *acc_store_client_open(const char *addr, int port, int timeout_ms,
                                          const char *secret, char *err, size_t errlen) {
  if (!addr || !*addr || port <= 0 || port > 65535) {
    snprintf(err, errlen, "bad address '%s' port %d", addr ? addr : "(null)", port);
    return NULL;
  }
  acc_store_client_t *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (strchr(addr, ':'))
    snprintf(c->endpoint, sizeof c->endpoint, "tcp://[%s]:%d", addr, port);
  else
    snprintf(c->endpoint, sizeof c->endpoint, "tcp://%s:%d", addr, port);
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 300000;
  if (secret && *secret) {
    if (acc_store_curve_keys(secret, c->server_pub, NULL) != 0 ||
        zmq_curve_keypair(c->pub, c->sec) != 0) {
      snprintf(err, errlen,
               "a rendezvous secret is set but this libzmq has no CURVE support "
               "(zmq_has(\"curve\") = 0): unset NBFORK_RDZV_SECRET or use a libzmq built with "
               "libsodium");
      free(c);
      return NULL;
    }
    c->secure = 1;
  }
  c->ctx = zmq_ctx_new();
  if (!c->ctx) {
    snprintf(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
    free(c);
    return NULL;
  }
  zmq_ctx_set(c->ctx, ZMQ_BLOCKY, 0);
  if (open_socket(c) != 0) {
    snprintf(err, errlen, "cannot connect to %s: %s", c->endpoint, zmq_strerror(errno));
    zmq_ctx_term(c->ctx);
    free(c);
    return NULL;
  }
  return c;
}

void acc_store_client_destroy(acc_store_client_t **c_p) {
  acc_store_client_t *c = NBF_TAKE(c_p);
  if (!c)
    return;
  close_socket(c);
  while (zmq_ctx_term(c->ctx) != 0 && errno == EINTR)
    ;
  free(c);
}

void acc_store_client_set_timeout(acc_store_client_t *c, int timeout_ms) {
  if (c && timeout_ms > 0)
    c->timeout_ms = timeout_ms;
}

const char *acc_store_client_error(const acc_store_client_t *c) {
  return c ? c->err : "";
}

acc_store_refusal_t acc_store_client_refusal(const acc_store_client_t *c) {
  return c ? c->refusal : ACC_STORE_ANSWERED;
}

/* The deadline of a request passed: say why in the words that help
 * (a refused handshake, a key never set, no store), and replace the
 * socket so that the late answer is never taken for the next one's. */
static acc_result_t timed_out(acc_store_client_t *c, const char *op, const char *key) {
  int seen = drain_monitor(c);
  c->refusal = ACC_STORE_ANSWERED;
  if (seen & MON_MECHANISM_MISMATCH) {
    c->refusal = c->secure ? ACC_STORE_REFUSED_OPEN_STORE : ACC_STORE_REFUSED_NEEDS_SECRET;
    set_err(c,
            "rendezvous store at %s: no answer to %s '%s' within the timeout (%d ms): the "
            "store refused this client's connection: %s. Every process of the job needs the "
            "same secret (rdzv_conf=secret=... or NBFORK_RDZV_SECRET).",
            c->endpoint, op, key, c->timeout_ms,
            c->secure ? "this client has a rendezvous secret, the store has none"
                      : "the store requires a rendezvous secret and this client has none");
  } else if ((seen & MON_HANDSHAKE_FAILED) ||
             ((seen & MON_CONNECTED) && (seen & MON_DISCONNECTED) && !(seen & MON_HANDSHAKE_OK))) {
    c->refusal = c->secure ? ACC_STORE_REFUSED_OTHER_SECRET : ACC_STORE_REFUSED_NEEDS_SECRET;
    set_err(c,
            "rendezvous store at %s: no answer to %s '%s' within the timeout (%d ms): the "
            "store refused this %s client's connection handshake: wrong or missing "
            "rendezvous secret? (every process of the job needs the same "
            "NBFORK_RDZV_SECRET)",
            c->endpoint, op, key, c->timeout_ms, c->secure ? "secret-holding" : "open");
  } else if (strcmp(op, "GET") == 0 || strcmp(op, "WAIT") == 0)
    set_err(c,
            "rendezvous store at %s: no answer to %s '%s' within the timeout (%d ms): "
            "the key was never set, or the store is not reachable (is the store running "
            "on rank 0 or in the launcher, are MASTER_ADDR/MASTER_PORT right, wrong or "
            "missing rendezvous secret?)",
            c->endpoint, op, key, c->timeout_ms);
  else
    set_err(c,
            "rendezvous store at %s: no answer to %s '%s' within the timeout (%d ms): "
            "is the store running (rank 0 or the launcher), are MASTER_ADDR/MASTER_PORT "
            "right, wrong or missing rendezvous secret?",
            c->endpoint, op, key, c->timeout_ms);
  close_socket(c); /* drop the pending request (see top of file) */
  open_socket(c);
  return ACC_ERR_TIMEOUT;
}

/* Check the arguments and send [op, key, value], waiting at most until
 * `deadline` (ms, monotonic): a DEALER whose connection was refused (a
 * handshake with another secret) has no peer to queue on, and a send
 * without a time limit would block for ever (seen: a launcher of node 1
 * hung when node 0's store had a secret and node 1 none). */
static acc_result_t send_request(acc_store_client_t *c, const char *op, const char *key,
                                 const void *val, size_t vlen, int64_t deadline) {
  if (!c || !key || !*key || (vlen && !val)) {
    if (c)
      set_err(c, "store %s: invalid argument (empty key or NULL value)", op);
    return ACC_ERR_INVALID_ARGUMENT;
  }
  c->err[0] = 0;
  if (!c->sock && open_socket(c) != 0) {
    set_err(c, "store %s '%s': cannot reconnect to %s: %s", op, key, c->endpoint,
            zmq_strerror(errno));
    return ACC_ERR_STORE;
  }
  int64_t left = deadline - nbf_now_ms();
  int sndtimeo = left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
  zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
  if (zmq_send(c->sock, op, strlen(op), ZMQ_SNDMORE) < 0) {
    if (errno == EAGAIN) /* no connection took the request in time */
      return timed_out(c, op, key);
    set_err(c, "store %s '%s': send to %s failed: %s", op, key, c->endpoint, zmq_strerror(errno));
    return ACC_ERR_STORE;
  }
  if (zmq_send(c->sock, key, strlen(key), ZMQ_SNDMORE) < 0 ||
      zmq_send(c->sock, vlen ? val : "", vlen, 0) < 0) {
    set_err(c, "store %s '%s': send to %s failed: %s", op, key, c->endpoint, zmq_strerror(errno));
    return ACC_ERR_STORE;
  }
  return ACC_OK;
}

/* Wait until `deadline` (ms, monotonic) for the answer to be readable. */
static acc_result_t wait_reply(acc_store_client_t *c, const char *op, const char *key,
                               int64_t deadline) {
  for (;;) {
    int64_t left = deadline - nbf_now_ms();
    zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&it, 1, (long)(left < 0 ? 0 : left));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0) {
      set_err(c, "store %s '%s': poll failed: %s", op, key, zmq_strerror(errno));
      return ACC_ERR_STORE;
    }
    if (rc > 0)
      return ACC_OK;
    if (nbf_now_ms() >= deadline)
      return timed_out(c, op, key);
  }
}

/* Receive [status, value]; on ACC_OK, *rval (if rval) is a malloc'd
 * NUL-terminated copy of the value and *rlen (if rlen) its length. */
static acc_result_t read_reply(acc_store_client_t *c, const char *op, const char *key, void **rval,
                               size_t *rlen) {
  zmq_msg_t st, v;
  zmq_msg_init(&st);
  zmq_msg_init(&v);
  acc_result_t res = ACC_OK;
  if (zmq_msg_recv(&st, c->sock, 0) < 0 || !zmq_msg_more(&st) || zmq_msg_recv(&v, c->sock, 0) < 0) {
    set_err(c, "store %s '%s': malformed reply from %s", op, key, c->endpoint);
    res = ACC_ERR_STORE;
    goto out;
  }
  while (zmq_msg_more(&v)) { /* drain unexpected extra frames */
    zmq_msg_close(&v);
    zmq_msg_init(&v);
    if (zmq_msg_recv(&v, c->sock, 0) < 0)
      break;
  }
  if (zmq_msg_size(&st) != 2 || memcmp(zmq_msg_data(&st), "OK", 2) != 0) {
    set_err(c, "rendezvous store at %s refused %s '%s': %.*s", c->endpoint, op, key,
            (int)zmq_msg_size(&v), (const char *)zmq_msg_data(&v));
    res = ACC_ERR_STORE;
    goto out;
  }
  if (rval) {
    size_t n = zmq_msg_size(&v);
    char *copy = malloc(n + 1);
    if (!copy) {
      set_err(c, "store %s '%s': out of memory for %zu bytes", op, key, n);
      res = ACC_ERR_NO_MEMORY;
      goto out;
    }
    if (n)
      memcpy(copy, zmq_msg_data(&v), n);
    copy[n] = 0;
    *rval = copy;
    if (rlen)
      *rlen = n;
  }
out:
  zmq_msg_close(&st);
  zmq_msg_close(&v);
  return res;
}

/* Send [op, key, value] and wait until `deadline` (ms, monotonic) for
 * [status, value]. On ACC_OK, *rval (if rval) is a malloc'd NUL-terminated
 * copy of the reply value. */
static acc_result_t request(acc_store_client_t *c, const char *op, const char *key, const void *val,
                            size_t vlen, int64_t deadline, void **rval, size_t *rlen) {
  ACC_CHECK(send_request(c, op, key, val, vlen, deadline));
  ACC_CHECK(wait_reply(c, op, key, deadline));
  c->refusal = ACC_STORE_ANSWERED;
  return read_reply(c, op, key, rval, rlen);
}

acc_result_t acc_store_set(acc_store_client_t *c, const char *key, const void *value, size_t len) {
  if (!c)
    return ACC_ERR_INVALID_ARGUMENT;
  return request(c, "SET", key, value, len, nbf_now_ms() + c->timeout_ms, NULL, NULL);
}

acc_result_t acc_store_get(acc_store_client_t *c, const char *key, void **value, size_t *len) {
  if (!c || !value)
    return ACC_ERR_INVALID_ARGUMENT;
  *value = NULL;
  if (len)
    *len = 0;
  return request(c, "GET", key, NULL, 0, nbf_now_ms() + c->timeout_ms, value, len);
}

acc_result_t acc_store_wait(acc_store_client_t *c, const char *const *keys, size_t nkeys,
                            int timeout_ms) {
  if (!c || (nkeys && !keys))
    return ACC_ERR_INVALID_ARGUMENT;
  int64_t deadline = nbf_now_ms() + (timeout_ms > 0 ? timeout_ms : c->timeout_ms);
  for (size_t i = 0; i < nkeys; i++) {
    ACC_CHECK(request(c, "WAIT", keys[i], NULL, 0, deadline, NULL, NULL));
  }
  return ACC_OK;
}

acc_result_t acc_store_add(acc_store_client_t *c, const char *key, int64_t delta, int64_t *result) {
  if (!c)
    return ACC_ERR_INVALID_ARGUMENT;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%" PRId64, delta);
  void *rv = NULL;
  acc_result_t r = request(c, "ADD", key, buf, (size_t)n, nbf_now_ms() + c->timeout_ms, &rv, NULL);
  if (r == ACC_OK && result)
    *result = strtoll(rv, NULL, 10);
  free(rv);
  return r;
}

acc_result_t acc_store_check(acc_store_client_t *c, const char *key, int *exists) {
  if (!c || !exists)
    return ACC_ERR_INVALID_ARGUMENT;
  void *rv = NULL;
  acc_result_t r = request(c, "CHECK", key, NULL, 0, nbf_now_ms() + c->timeout_ms, &rv, NULL);
  *exists = r == ACC_OK && ((char *)rv)[0] == '1';
  free(rv);
  return r;
}

acc_result_t acc_store_delete(acc_store_client_t *c, const char *key) {
  if (!c)
    return ACC_ERR_INVALID_ARGUMENT;
  return request(c, "DEL", key, NULL, 0, nbf_now_ms() + c->timeout_ms, NULL, NULL);
}
