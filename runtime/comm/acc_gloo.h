/*
 * acc_gloo.h — the C face of the thin C++ shim over Gloo (acc_gloo.cc):
 * a full-mesh process group over Gloo's TCP transport and the host-buffer
 * collectives. Every C++ exception is caught inside the shim and turned
 * into an acc_result_t plus an English message in `err`:
 *   ACC_ERR_TIMEOUT  Gloo's "Timed out ..." / store timeouts
 *   ACC_ERR_PEER     connection closed/reset by a peer
 *   ACC_ERR_STORE    the rendezvous store refused a request
 *   ACC_ERR_BACKEND  anything else Gloo or the C++ runtime threw
 * After any failure of a collective the shim closes all connections
 * (so the other ranks fail fast instead of waiting for their timeout) and
 * the group must not be used again. Internal.
 */
#ifndef ACC_GLOO_H
#define ACC_GLOO_H

#include <stddef.h>

#include "acc_reduce.h"
#include "acc_store.h"
#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_gloo acc_gloo_t;

/* Create Gloo's TCP device listening on `hostname` (an address of this
 * host) and connect the full mesh of `size` ranks through `store` (keys
 * under `key_prefix`), waiting at most `timeout_ms`, plus a second mesh
 * in Gloo's synchronous pair mode for the buffer-based all-reduces
 * (busy-polling its sockets when busy_poll != 0: lowest latency, but it
 * spins a core while waiting), connected at the first repeated
 * all-reduce. `store` is borrowed and must stay valid until
 * acc_gloo_destroy (that second mesh rendezvouses through it). BLOCKS
 * until every rank connected. */
acc_result_t acc_gloo_connect(acc_gloo_t **out, int rank, int size, const char *hostname,
                              acc_store_client_t *store, const char *key_prefix, int timeout_ms,
                              int busy_poll, char *err, size_t errlen);

/* The rank whose connection the group's last failed collective lost
 * (a closed or reset connection; a timeout when the peer's address
 * tells), or -1 when unknown. For the rank's state record. */
int acc_gloo_lost_peer(const acc_gloo_t *g);

/* A group of some of the world's ranks: world_rank[i] (size entries) is
 * the world rank of group rank i, which error texts name instead of i
 * (acc_gloo_lost_peer still answers the group rank). */
void acc_gloo_set_world_ranks(acc_gloo_t *g, const int *world_rank, int size);

/* Collectives of the synchronous mesh that busy-polled / slept in
 * blocking reads so far (acc_gloo_poll.h; tests). */
void acc_gloo_poll_counts(const acc_gloo_t *g, long *polled, long *slept);

/* The store given to acc_gloo_connect is about to go: no second mesh
 * will be connected through it any more. */
void acc_gloo_release_store(acc_gloo_t *g);

/* Close connections and free. NULL-safe; clears *g_p. */
void acc_gloo_destroy(acc_gloo_t **g_p);

/* In-place all-reduce of `count` elements of `esz` bytes with `fn`. */
acc_result_t acc_gloo_all_reduce(acc_gloo_t *g, void *buf, size_t count, size_t esz,
                                 acc_reduce_fn fn, char *err, size_t errlen);

/* In-place all-reduce through Gloo's buffer-based halving-doubling
 * algorithm (Thakur, Rabenseifner & Gropp 2005), cached per (count,
 * dtype, op) with its own buffer (the data is copied in and out, so the
 * choice never depends on addresses, which differ between ranks): 5-10x
 * less time than the options-based ring for the
 * 10^4-10^6 element buffers of gradient all-reduces, because its buffers
 * are registered once. SUM, MAX, MIN (AVG: SUM, the caller divides) of
 * f32, f64, i32, i64 only: returns ACC_ERR_UNSUPPORTED otherwise, and the
 * caller falls back to acc_gloo_all_reduce. Every rank must make the same
 * sequence of calls (the cache evicts in the same order everywhere). */
acc_result_t acc_gloo_all_reduce_cached(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                        acc_op_t op, char *err, size_t errlen);

/* The all-reduce algorithms of Gloo the shim can run. The first three
 * are Gloo's buffer-based algorithms, cached per (count, dtype, op)
 * so their pair buffers are registered once (f32, f64, i32, i64 only;
 * other dtypes run ACC_GLOO_RING); the last two go through
 * gloo::allreduce(AllreduceOptions) as PyTorch's ProcessGroupGloo does. */
typedef enum {
  ACC_GLOO_AUTO = 0,         /* acc_gloo_choose_algo by size              */
  ACC_GLOO_HALVING_DOUBLING, /* gloo::AllreduceHalvingDoubling (cached)   */
  ACC_GLOO_RING_CHUNKED,     /* gloo::AllreduceRingChunked (cached)       */
  ACC_GLOO_RING_CACHED,      /* gloo::AllreduceRing (cached)              */
  ACC_GLOO_RING,             /* AllreduceOptions, RING (PyTorch's choice) */
  ACC_GLOO_BCUBE             /* AllreduceOptions, BCUBE                   */
} acc_gloo_algo_t;

/* In-place all-reduce of `count` elements with `algo` (AVG = SUM; the
 * caller divides). Every rank must use the same algorithm. */
acc_result_t acc_gloo_all_reduce_algo(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                      acc_op_t op, acc_gloo_algo_t algo, char *err, size_t errlen);

/* Queue an in-place all-reduce (algorithm by size; AVG divides after the
 * sum) on the group's worker thread and return at once; jobs run in
 * queue order, so every rank must queue the same sequence. The buffer
 * must not be touched until acc_gloo_wait. Every synchronous call of
 * this shim first waits for the queue to drain. */
acc_result_t acc_gloo_all_reduce_async(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                       acc_op_t op, char *err, size_t errlen);

/* Wait for every queued all-reduce; the first failure of any of them
 * (after which the others were skipped and the group is closed). */
acc_result_t acc_gloo_wait(acc_gloo_t *g, char *err, size_t errlen);

/* The algorithm ACC_GLOO_AUTO runs for a buffer of `bytes` bytes (chosen
 * from measurements, see acc_gloo.cc); the same on every rank. */
acc_gloo_algo_t acc_gloo_choose_algo(const acc_gloo_t *g, size_t bytes);

/* Short English name ("halving-doubling", "ring", ...). */
const char *acc_gloo_algo_name(acc_gloo_algo_t algo);

/* Broadcast `bytes` bytes of `buf` from `root`. */
acc_result_t acc_gloo_broadcast(acc_gloo_t *g, void *buf, size_t bytes, int root, char *err,
                                size_t errlen);

/* Gather `bytes` bytes from every rank into recv (size*bytes, rank-major).
 * `send` may equal recv + rank*bytes (in place). */
acc_result_t acc_gloo_all_gather(acc_gloo_t *g, const void *send, void *recv, size_t bytes,
                                 char *err, size_t errlen);

/* Barrier across all ranks. */
acc_result_t acc_gloo_barrier(acc_gloo_t *g, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ACC_GLOO_H */
