/*
 * acc_store.h — the rendezvous store: a small key/value server over
 * ZeroMQ (the role of torch.distributed's TCPStore), used by the runtime to
 * exchange Gloo pair addresses and the NCCL unique id, and by the launcher
 * for multi-node rendezvous. Internal to nbfork (not installed).
 *
 * Wire protocol (ZeroMQ multipart messages):
 *   client DEALER -> server ROUTER, 3 frames:  [op, key, value]
 *   server ROUTER -> client DEALER, 2 frames:  [status, value]
 *   status is "OK" or "ERR" (then value is an English message).
 *
 *   op      key   value            reply value
 *   SET     key   bytes            ""                 (overwrites)
 *   GET     key   ""               the bytes          (server holds the
 *                                                      reply until key exists)
 *   WAIT    key   ""               ""                 (held until key exists)
 *   ADD     key   decimal delta    decimal new value  (missing key = 0; the
 *                                                      value is stored as text)
 *   CHECK   key   ""               "1" or "0"         (never blocks)
 *   DEL     key   ""               "1" or "0"         (whether it existed)
 *
 * Keys are byte strings without NUL; callers prefix them per run
 * (NBFORK_RUN_ID) so runs sharing a store never mix.
 *
 * Security: with a shared secret (acc_store_server_start_secure,
 * acc_store_client_new_secure; the runtime reads NBFORK_RDZV_SECRET) the
 * connection uses ZeroMQ's CURVE mechanism (CurveZMQ: Curve25519 key
 * exchange, then every frame encrypted and authenticated): the server's
 * key pair is derived from SHA-256(secret) (the 32 bytes are its secret
 * key, zmq_curve_public gives the public one), so only a client that
 * knows the secret knows the server's public key and can complete the
 * handshake; clients use a fresh random key pair. A client without the
 * secret, or with another one, never gets an answer: its requests time
 * out with an error that says "wrong or missing rendezvous secret?".
 * Without a secret (NULL or "") the store is open, as before.
 *
 * Threads and fork(): the server owns a ZeroMQ context (an I/O thread) and
 * one serving thread. A process that fork()s must have no threads, so the
 * launcher starts the server AFTER forking its workers and stops it BEFORE
 * forking again.
 */
#ifndef ACC_STORE_H
#define ACC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "nbfork.h" /* acc_result_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Server                                                               */
/* ------------------------------------------------------------------ */

typedef struct acc_store_server acc_store_server_t;

/* Bind a ZeroMQ ROUTER at tcp://BIND_ADDR:PORT and serve requests from a
 * background thread. `bind_addr` NULL or "" or "*" = all interfaces;
 * `port` 0 = an ephemeral port (read it with acc_store_server_port).
 * Returns NULL on failure with an English message in `err` (`errlen`
 * bytes, may be NULL), e.g. "port 29500 is already in use ...".
 * Should the serving thread's zmq_poll fail later (not expected), it
 * stops serving and writes one line on stderr: it has no caller to
 * return the error to, and clients then time out naming the store.
 * Caller owns the result: acc_store_server_stop. */
acc_store_server_t *acc_store_server_start(const char *bind_addr, int port, char *err,
                                           size_t errlen);

/* As acc_store_server_start, accepting only clients that present
 * `secret` (CURVE, see the top of this file); `secret` NULL or "" = open.
 * Fails (NULL, reason in err) when libzmq was built without CURVE. */
acc_store_server_t *acc_store_server_start_secure(const char *bind_addr, int port,
                                                  const char *secret, char *err, size_t errlen);

/* Connections the store refused since it started, by kind: clients
 * without the secret (the store has one), clients with a secret (the
 * store has none), clients with another secret, and the rest (random
 * bytes, a broken or replayed handshake). The launcher of node 0 names
 * them when a node does not arrive. The kind is known only when the store
 * read the client's greeting: a client that saw the mismatch first and
 * hung up counts as malformed (a rank retries many times, so the real
 * kind shows). Counted by the serving thread as ZeroMQ reports them:
 * a refusal may show a few ms late. NULL-safe (all 0). */
typedef struct {
  unsigned no_secret, unexpected_secret, other_secret, malformed;
} acc_store_refusals_t;
void acc_store_server_refusals(const acc_store_server_t *srv, acc_store_refusals_t *out);

/* The distinct network addresses (ZeroMQ's Peer-Address: "10.0.0.2",
 * no port) requests came from since the server started, the first `max`
 * (ACC_STORE_MAX_PEERS are kept) copied into out; returns how many. Node 0's
 * launcher probes them after a failed multi-node launch (ln_probe.h).
 * Callable from any thread while the server runs. NULL-safe (0). */
#define ACC_STORE_MAX_PEERS 64
size_t acc_store_server_peers(const acc_store_server_t *srv, char (*out)[64], size_t max);

/* The TCP port the server listens on (useful after port 0). */
int acc_store_server_port(const acc_store_server_t *srv);

/* Stop serving: wakes the thread, joins it, closes the socket and
 * terminates the server's ZeroMQ context, so the process has no thread of
 * the server left afterwards. Requests still held (GET/WAIT of missing
 * keys) are dropped: their clients time out. NULL-safe; clears *srv_p. */
void acc_store_server_stop(acc_store_server_t **srv_p);

/* ------------------------------------------------------------------ */
/* Client                                                               */
/* ------------------------------------------------------------------ */

typedef struct acc_store_client acc_store_client_t;

/* A client of the store at tcp://ADDR:PORT (ADDR a host name or IP),
 * presenting `secret` to a secure store (CURVE, see the top of this
 * file; NULL or "" = plain client). Connecting is lazy (ZeroMQ retries in
 * the background), so the server may start later; every request waits at
 * most `timeout_ms` (> 0; <= 0 means 300000) for its answer. Returns NULL
 * only when ZeroMQ cannot create the socket, the address is malformed or
 * a secret is given to a libzmq without CURVE: then err[errlen] says why
 * (one line, no newline). Caller owns the result:
 * acc_store_client_destroy. */
acc_store_client_t *acc_store_client_open(const char *addr, int port, int timeout_ms,
                                          const char *secret, char *err, size_t errlen);

/* acc_store_client_open without a secret / with one, for callers that
 * have nowhere to keep the reason: on failure they print it as one line
 * on stderr ("nbfork store client: ...") and return NULL. */
acc_store_client_t *acc_store_client_new(const char *addr, int port, int timeout_ms);
acc_store_client_t *acc_store_client_new_secure(const char *addr, int port, int timeout_ms,
                                                const char *secret);

/* Derive the store's CURVE key pair from `secret` (SHA-256 of its bytes
 * = the secret key): Z85 text, 40 characters + NUL each. Returns 0, or -1
 * when CURVE is unavailable. `secret_z85` may be NULL. */
int acc_store_curve_keys(const char *secret, char public_z85[41], char secret_z85[41]);

/* Close the client. NULL-safe; clears *c_p. */
void acc_store_client_destroy(acc_store_client_t **c_p);

/* Change the per-request timeout (ms, > 0). */
void acc_store_client_set_timeout(acc_store_client_t *c, int timeout_ms);

/* Text of the last error of this client ("" when none). */
const char *acc_store_client_error(const acc_store_client_t *c);

/* Why the last request got no answer, as far as the connection's
 * handshake tells (ZeroMQ's socket monitor): the launcher's rendezvous
 * says from it which side of a secret mismatch this node is on. */
typedef enum {
  ACC_STORE_ANSWERED = 0,         /* answered, or no handshake was refused  */
  ACC_STORE_REFUSED_NEEDS_SECRET, /* the store has a secret, this client none */
  ACC_STORE_REFUSED_OPEN_STORE,   /* this client has a secret, the store none */
  ACC_STORE_REFUSED_OTHER_SECRET  /* both have one: not the same             */
} acc_store_refusal_t;
acc_store_refusal_t acc_store_client_refusal(const acc_store_client_t *c);

/* Set `key` to `len` bytes of `value` (value may be NULL when len == 0).
 * Errors: INVALID_ARGUMENT, TIMEOUT (no answer within the timeout),
 * STORE (the server refused; text in acc_store_client_error). */
acc_result_t acc_store_set(acc_store_client_t *c, const char *key, const void *value, size_t len);

/* Get the value of `key`, BLOCKING until some client sets it or the
 * timeout expires. On ACC_OK *value is a malloc'd copy of *len bytes
 * followed by a NUL byte (caller frees it with free()). Errors: as
 * acc_store_set, NO_MEMORY. */
acc_result_t acc_store_get(acc_store_client_t *c, const char *key, void **value, size_t *len);

/* Block until every one of the `nkeys` keys exists, or `timeout_ms`
 * (<= 0 = the client's timeout) expires for all of them together.
 * Errors: as acc_store_set. */
acc_result_t acc_store_wait(acc_store_client_t *c, const char *const *keys, size_t nkeys,
                            int timeout_ms);

/* Atomically add `delta` to the counter `key` (missing = 0) and return
 * the new value in *result (may be NULL). Errors: as acc_store_set
 * (STORE when the key holds something that is not a decimal integer). */
acc_result_t acc_store_add(acc_store_client_t *c, const char *key, int64_t delta, int64_t *result);

/* *exists = 1 when `key` is set, else 0; never blocks server-side. */
acc_result_t acc_store_check(acc_store_client_t *c, const char *key, int *exists);

/* Delete `key` (no error when it does not exist). */
acc_result_t acc_store_delete(acc_store_client_t *c, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* ACC_STORE_H */
