/*
 * acc_store_server.c — the rendezvous store's server: a ZeroMQ ROUTER
 * served by one background thread (protocol in acc_store.h).
 *
 * Data: a flat array of (key, value) entries searched linearly — a
 * rendezvous holds a few keys per rank, so this is never the bottleneck —
 * and a list of held requests (GET/WAIT of keys not yet set) answered
 * when the key appears.
 */
#define _GNU_SOURCE
#include "acc_store.h"
#include "acc_store_monitor.h"
#include "nbf_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define STORE_MAX_ID 256

typedef struct {
  char *key;
  unsigned char *val;
  size_t len;
} store_entry_t;

typedef struct {
  unsigned char id[STORE_MAX_ID]; /* ROUTER routing id of the client */
  size_t idlen;
  int is_get; /* GET (reply with the value) or WAIT (reply "") */
  char *key;
} store_waiter_t;

struct acc_store_server {
  void *ctx;
  void *router;
  void *mon;  /* PAIR: the ROUTER's handshake failures (socket monitor) */
  int secure; /* CURVE: clients must hold the secret */
  /* refused connections, by kind (written by the serving thread, read by
   * acc_store_server_refusals from any thread) */
  unsigned refused[4];
  void *ctl_main; /* PAIR, main side: stop() sends on it */
  void *ctl_thr;  /* PAIR, thread side */
  pthread_t thread;
  int port;
  store_entry_t *entries;
  size_t nentries, capentries;
  store_waiter_t *waiters;
  size_t nwaiters, capwaiters;
  /* the distinct addresses requests came from (ZeroMQ's Peer-Address),
   * for a launcher naming a node it can no longer reach: written by the
   * serving thread, an entry before the count that publishes it */
  char peers[ACC_STORE_MAX_PEERS][64];
  unsigned npeers;
};

/* ---- entries ---- */

static store_entry_t *find_entry(acc_store_server_t *s, const char *key) {
  for (size_t i = 0; i < s->nentries; i++)
    if (strcmp(s->entries[i].key, key) == 0)
      return &s->entries[i];
  return NULL;
}

/* Set key to a copy of val; returns 0, or -1 when out of memory. */
static int put_entry(acc_store_server_t *s, const char *key, const void *val, size_t len) {
  unsigned char *copy = malloc(len + 1);
  if (!copy)
    return -1;
  if (len)
    memcpy(copy, val, len);
  copy[len] = 0;
  store_entry_t *e = find_entry(s, key);
  if (e) {
    free(e->val);
    e->val = copy;
    e->len = len;
    return 0;
  }
  if (s->nentries == s->capentries) {
    size_t cap = s->capentries ? 2 * s->capentries : 64;
    store_entry_t *n = realloc(s->entries, cap * sizeof(*n));
    if (!n) {
      free(copy);
      return -1;
    }
    s->entries = n;
    s->capentries = cap;
  }
  char *k = strdup(key);
  if (!k) {
    free(copy);
    return -1;
  }
  s->entries[s->nentries++] = (store_entry_t){k, copy, len};
  return 0;
}

static int del_entry(acc_store_server_t *s, const char *key) {
  store_entry_t *e = find_entry(s, key);
  if (!e)
    return 0;
  free(e->key);
  free(e->val);
  *e = s->entries[--s->nentries];
  return 1;
}

/* ---- replies ---- */

static void reply(acc_store_server_t *s, const void *id, size_t idlen, const char *status,
                  const void *val, size_t len) {
  /* A client that timed out and closed its socket is gone: ROUTER drops
   * the message silently, which is what we want. */
  zmq_send(s->router, id, idlen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(s->router, status, strlen(status), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(s->router, val, len, ZMQ_DONTWAIT);
}

static void reply_err(acc_store_server_t *s, const void *id, size_t idlen, const char *msg) {
  reply(s, id, idlen, "ERR", msg, strlen(msg));
}

/* Answer every held request for `key` (just set). */
static void wake_waiters(acc_store_server_t *s, const char *key) {
  store_entry_t *e = find_entry(s, key);
  if (!e)
    return;
  size_t i = 0;
  while (i < s->nwaiters) {
    store_waiter_t *w = &s->waiters[i];
    if (strcmp(w->key, key) != 0) {
      i++;
      continue;
    }
    if (w->is_get)
      reply(s, w->id, w->idlen, "OK", e->val, e->len);
    else
      reply(s, w->id, w->idlen, "OK", "", 0);
    free(w->key);
    s->waiters[i] = s->waiters[--s->nwaiters];
  }
}

static int add_waiter(acc_store_server_t *s, const void *id, size_t idlen, int is_get,
                      const char *key) {
  if (s->nwaiters == s->capwaiters) {
    size_t cap = s->capwaiters ? 2 * s->capwaiters : 32;
    store_waiter_t *n = realloc(s->waiters, cap * sizeof(*n));
    if (!n)
      return -1;
    s->waiters = n;
    s->capwaiters = cap;
  }
  char *k = strdup(key);
  if (!k)
    return -1;
  store_waiter_t *w = &s->waiters[s->nwaiters++];
  memcpy(w->id, id, idlen);
  w->idlen = idlen;
  w->is_get = is_get;
  w->key = k;
  return 0;
}

/* ---- one request ---- */

static void handle(acc_store_server_t *s, const unsigned char *id, size_t idlen, const char *op,
                   const char *key, const unsigned char *val, size_t vlen) {
  if (strcmp(op, "SET") == 0) {
    if (put_entry(s, key, val, vlen) != 0) {
      reply_err(s, id, idlen, "store server out of memory");
      return;
    }
    reply(s, id, idlen, "OK", "", 0);
    wake_waiters(s, key);
  } else if (strcmp(op, "GET") == 0 || strcmp(op, "WAIT") == 0) {
    int is_get = op[0] == 'G';
    store_entry_t *e = find_entry(s, key);
    if (e)
      reply(s, id, idlen, "OK", is_get ? e->val : (const unsigned char *)"", is_get ? e->len : 0);
    else if (add_waiter(s, id, idlen, is_get, key) != 0)
      reply_err(s, id, idlen, "store server out of memory");
  } else if (strcmp(op, "ADD") == 0) {
    char buf[32], *end;
    if (vlen == 0 || vlen >= sizeof buf) {
      reply_err(s, id, idlen, "ADD needs a decimal delta");
      return;
    }
    memcpy(buf, val, vlen);
    buf[vlen] = 0;
    errno = 0;
    long long delta = strtoll(buf, &end, 10);
    if (errno || *end) {
      reply_err(s, id, idlen, "ADD needs a decimal delta");
      return;
    }
    long long cur = 0;
    store_entry_t *e = find_entry(s, key);
    if (e) {
      errno = 0;
      cur = strtoll((const char *)e->val, &end, 10);
      if (errno || *end || e->len == 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "ADD: key '%s' holds a value that is not a decimal integer", key);
        reply_err(s, id, idlen, msg);
        return;
      }
    }
    if (__builtin_add_overflow(cur, delta, &cur)) { /* tests/fuzz/fuzz_store: UB before */
      char msg[256];
      snprintf(msg, sizeof msg, "ADD: counter '%s' would leave the 64-bit range", key);
      reply_err(s, id, idlen, msg);
      return;
    }
    int n = snprintf(buf, sizeof buf, "%lld", cur);
    if (put_entry(s, key, buf, (size_t)n) != 0) {
      reply_err(s, id, idlen, "store server out of memory");
      return;
    }
    reply(s, id, idlen, "OK", buf, (size_t)n);
    wake_waiters(s, key);
  } else if (strcmp(op, "CHECK") == 0) {
    reply(s, id, idlen, "OK", find_entry(s, key) ? "1" : "0", 1);
  } else if (strcmp(op, "DEL") == 0) {
    reply(s, id, idlen, "OK", del_entry(s, key) ? "1" : "0", 1);
  } else {
    char msg[128];
    snprintf(msg, sizeof msg, "unknown store operation '%.32s'", op);
    reply_err(s, id, idlen, msg);
  }
}

/* Remember the address a request came from, once. */
static void note_peer(acc_store_server_t *s, zmq_msg_t *m) {
  const char *addr = zmq_msg_gets(m, "Peer-Address");
  unsigned n = __atomic_load_n(&s->npeers, __ATOMIC_RELAXED);
  if (!addr || !*addr || strlen(addr) >= sizeof s->peers[0] || n == ACC_STORE_MAX_PEERS)
    return;
  for (unsigned i = 0; i < n; i++)
    if (!strcmp(s->peers[i], addr))
      return;
  strcpy(s->peers[n], addr);
  __atomic_store_n(&s->npeers, n + 1, __ATOMIC_RELEASE);
}

size_t acc_store_server_peers(const acc_store_server_t *s, char (*out)[64], size_t max) {
  if (!s)
    return 0;
  unsigned n = __atomic_load_n(&s->npeers, __ATOMIC_ACQUIRE);
  size_t k = 0;
  for (; k < n && k < max; k++)
    memcpy(out[k], s->peers[k], sizeof out[k]);
  return k;
}

/* Receive one whole multipart message from the ROUTER (up to 5 frames
 * kept; more are drained) and dispatch it. */
static void serve_one(acc_store_server_t *s) {
  zmq_msg_t f[5];
  int nf = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s->router, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      break;
    }
    more = zmq_msg_more(&m);
    if (nf < 5)
      f[nf++] = m;
    else {
      zmq_msg_close(&m);
      nf = 6; /* mark: too many frames */
    }
  }
  int kept = nf > 5 ? 5 : nf;
  if (kept >= 1 && zmq_msg_size(&f[0]) <= STORE_MAX_ID) {
    const unsigned char *id = zmq_msg_data(&f[0]);
    size_t idlen = zmq_msg_size(&f[0]);
    if (nf != 4) {
      reply_err(s, id, idlen, "malformed request: expected 3 frames [op, key, value]");
    } else {
      char op[16], *key = NULL;
      size_t oplen = zmq_msg_size(&f[1]), klen = zmq_msg_size(&f[2]);
      if (oplen == 0 || oplen >= sizeof op || klen == 0 || memchr(zmq_msg_data(&f[2]), 0, klen) ||
          !(key = malloc(klen + 1))) {
        reply_err(s, id, idlen, "malformed request: bad op or key");
      } else {
        memcpy(op, zmq_msg_data(&f[1]), oplen);
        op[oplen] = 0;
        memcpy(key, zmq_msg_data(&f[2]), klen);
        key[klen] = 0;
        note_peer(s, &f[1]);
        handle(s, id, idlen, op, key, zmq_msg_data(&f[3]), zmq_msg_size(&f[3]));
      }
      free(key);
    }
  }
  for (int i = 0; i < kept; i++)
    zmq_msg_close(&f[i]);
}

/* Count the handshakes the ROUTER refused, by kind (acc_store.h). Reads
 * every queued event: ZeroMQ's I/O thread blocks on a full monitor queue
 * (see acc_store_client.c's drain_monitor), and an intruder reconnecting
 * in a loop must not stall the store. */
static void count_refusals(acc_store_server_t *s) {
  uint16_t id;
  uint32_t value;
  while (acc__store_monitor_next(s->mon, &id, &value) == 0) {
    int kind = -1;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
        value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
      kind = s->secure ? ACC_STORE_REFUSED_NEEDS_SECRET : ACC_STORE_REFUSED_OPEN_STORE;
    else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
             value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
      kind = ACC_STORE_REFUSED_OTHER_SECRET;
    else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
             id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
      kind = ACC_STORE_ANSWERED; /* slot 0: malformed or unknown */
    if (kind >= 0)
      __atomic_add_fetch(&s->refused[kind], 1, __ATOMIC_RELAXED);
  }
}

void acc_store_server_refusals(const acc_store_server_t *s, acc_store_refusals_t *out) {
  memset(out, 0, sizeof *out);
  if (!s)
    return;
  out->malformed = __atomic_load_n(&s->refused[ACC_STORE_ANSWERED], __ATOMIC_RELAXED);
  out->no_secret = __atomic_load_n(&s->refused[ACC_STORE_REFUSED_NEEDS_SECRET], __ATOMIC_RELAXED);
  out->unexpected_secret =
      __atomic_load_n(&s->refused[ACC_STORE_REFUSED_OPEN_STORE], __ATOMIC_RELAXED);
  out->other_secret =
      __atomic_load_n(&s->refused[ACC_STORE_REFUSED_OTHER_SECRET], __ATOMIC_RELAXED);
}

static void *serve(void *arg) {
  acc_store_server_t *s = arg;
  for (;;) {
    zmq_pollitem_t items[3] = {
        {s->router, 0, ZMQ_POLLIN, 0}, {s->ctl_thr, 0, ZMQ_POLLIN, 0}, {s->mon, 0, ZMQ_POLLIN, 0}};
    int rc = zmq_poll(items, s->mon ? 3 : 2, -1);
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      if (errno == ETERM)
        break;
      fprintf(stderr, "nbfork store: zmq_poll failed: %s\n", zmq_strerror(errno));
      break;
    }
    if (items[1].revents & ZMQ_POLLIN)
      break; /* stop request */
    if (items[0].revents & ZMQ_POLLIN)
      serve_one(s);
    if (s->mon && (items[2].revents & ZMQ_POLLIN))
      count_refusals(s);
  }
  return NULL;
}

static void free_state(acc_store_server_t *s) {
  for (size_t i = 0; i < s->nentries; i++) {
    free(s->entries[i].key);
    free(s->entries[i].val);
  }
  free(s->entries);
  for (size_t i = 0; i < s->nwaiters; i++)
    free(s->waiters[i].key);
  free(s->waiters);
}

static void close_sockets(acc_store_server_t *s) {
  int zero = 0;
  if (s->router && s->mon) {
    count_refusals(s); /* an empty queue right before the stop (see there) */
    zmq_socket_monitor(s->router, NULL, 0);
  }
  void *socks[4] = {s->router, s->ctl_main, s->ctl_thr, s->mon};
  for (int i = 0; i < 4; i++)
    if (socks[i]) {
      zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof zero);
      zmq_close(socks[i]);
    }
  s->router = s->ctl_main = s->ctl_thr = s->mon = NULL;
}

/* The monitor of the ROUTER's handshakes (count_refusals), before the
 * bind so that no refusal is missed. Without it the store still serves;
 * it only cannot say why a node never arrived. */
static void open_monitor(acc_store_server_t *s) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://nbfork-store-mon-%p", (void *)s);
  if (zmq_socket_monitor(s->router, ep,
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
    return;
  s->mon = zmq_socket(s->ctx, ZMQ_PAIR);
  if (s->mon && zmq_connect(s->mon, ep) != 0) {
    zmq_close(s->mon);
    s->mon = NULL;
  }
  if (!s->mon)
    zmq_socket_monitor(s->router, NULL, 0);
}

acc_store_server_t *acc_store_server_start(const char *bind_addr, int port, char *err,
                                           size_t errlen) {
  return acc_store_server_start_secure(bind_addr, port, NULL, err, errlen);
}

acc_store_server_t *acc_store_server_start_secure(const char *bind_addr, int port,
                                                  const char *secret, char *err, size_t errlen) {
  char dummy[8];
  if (!err) {
    err = dummy;
    errlen = sizeof dummy;
  }
  if (errlen)
    err[0] = 0;
  if (port < 0 || port > 65535) {
    snprintf(err, errlen, "store: port %d out of range (0..65535)", port);
    return NULL;
  }
  char pub[41], sec[41];
  const int secure = secret && *secret;
  if (secure && acc_store_curve_keys(secret, pub, sec) != 0) {
    snprintf(err, errlen,
             "store: a rendezvous secret is set but this libzmq has no CURVE support "
             "(zmq_has(\"curve\") = 0): unset NBFORK_RDZV_SECRET or use a libzmq built with "
             "libsodium");
    return NULL;
  }
  if (!bind_addr || !*bind_addr || strcmp(bind_addr, "0.0.0.0") == 0)
    bind_addr = "*";
  acc_store_server_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "store: out of memory");
    return NULL;
  }
  char ep[320], ctl[64];
  if (port == 0)
    snprintf(ep, sizeof ep, "tcp://%s:*", bind_addr);
  else
    snprintf(ep, sizeof ep, "tcp://%s:%d", bind_addr, port);
  snprintf(ctl, sizeof ctl, "inproc://nbfork-store-ctl-%p", (void *)s);

  s->ctx = zmq_ctx_new();
  if (!s->ctx) {
    snprintf(err, errlen, "store: zmq_ctx_new failed: %s", zmq_strerror(errno));
    free(s);
    return NULL;
  }
  int zero = 0;
  zmq_ctx_set(s->ctx, ZMQ_BLOCKY, 0);
  s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
  s->ctl_main = zmq_socket(s->ctx, ZMQ_PAIR);
  s->ctl_thr = zmq_socket(s->ctx, ZMQ_PAIR);
  if (!s->router || !s->ctl_main || !s->ctl_thr) {
    snprintf(err, errlen, "store: zmq_socket failed: %s", zmq_strerror(errno));
    goto fail;
  }
  zmq_setsockopt(s->router, ZMQ_LINGER, &zero, sizeof zero);
  if (secure) {
    int one = 1;
    if (zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, sec, 40) != 0) {
      snprintf(err, errlen, "store: cannot enable CURVE: %s", zmq_strerror(errno));
      goto fail;
    }
  }
  memset(sec, 0, sizeof sec);
  s->secure = secure;
  open_monitor(s);
  if (zmq_bind(s->router, ep) != 0) {
    int e = errno;
    if (e == EADDRINUSE)
      snprintf(err, errlen,
               "store: port %d is already in use on %s (%s): another run or program holds it; "
               "choose another port (use_port=..., MASTER_PORT) or stop the other program",
               port, bind_addr, zmq_strerror(e));
    else
      snprintf(err, errlen, "store: cannot listen on %s: %s", ep, zmq_strerror(e));
    goto fail;
  }
  char last[320];
  size_t lastlen = sizeof last;
  if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, last, &lastlen) == 0) {
    const char *colon = strrchr(last, ':');
    s->port = colon ? atoi(colon + 1) : port;
  } else {
    s->port = port;
  }
  if (zmq_bind(s->ctl_thr, ctl) != 0 || zmq_connect(s->ctl_main, ctl) != 0) {
    snprintf(err, errlen, "store: control socket: %s", zmq_strerror(errno));
    goto fail;
  }
  int rc = pthread_create(&s->thread, NULL, serve, s);
  if (rc != 0) {
    snprintf(err, errlen, "store: pthread_create: %s", NBF_STRERROR(rc));
    goto fail;
  }
  return s;

fail:
  close_sockets(s);
  zmq_ctx_term(s->ctx);
  free(s);
  return NULL;
}

int acc_store_server_port(const acc_store_server_t *srv) {
  return srv ? srv->port : -1;
}

void acc_store_server_stop(acc_store_server_t **srv_p) {
  acc_store_server_t *s = NBF_TAKE(srv_p);
  if (!s)
    return;
  while (zmq_send(s->ctl_main, "STOP", 4, 0) < 0 && errno == EINTR)
    ;
  pthread_join(s->thread, NULL);
  close_sockets(s);
  while (zmq_ctx_term(s->ctx) != 0 && errno == EINTR)
    ;
  free_state(s);
  free(s);
}
