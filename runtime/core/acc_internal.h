/*
 * acc_internal.h — the Accelerator's state and helpers shared by the
 * runtime's files. Not installed.
 */
#ifndef ACC_INTERNAL_H
#define ACC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "acc_check.h"
#include "acc_rng.h"
#include "acc_store.h"
#include "nbf_rankstate.h"
#include "nbfork.h"

typedef struct acc_gloo acc_gloo_t;
typedef struct acc_nccl acc_nccl_t;
typedef struct acc_node acc_node_t;
typedef struct acc_charts acc_charts_t;

struct acc {
  /* place in the world (environment, read once in acc_new) */
  int rank, local_rank, world, local_world;
  int device;   /* -1 = CPU */
  void *stream; /* cudaStream_t device collectives follow (acc_set_stream); NULL = default */
  acc_precision_t precision;
  int timeout_ms;
  char master_addr[256];
  int master_port;
  char run_id[128];
  char key_prefix[192]; /* "<run_id>/<generation>/" for store keys */

  /* gradient accumulation (Accelerate's GradientState) */
  int accum_steps;          /* >= 1 */
  int sync_with_dataloader; /* 0/1 */
  int step;                 /* micro-step counter, Accelerate's `step` */
  int sync_gradients;
  float *accum_prev; /* buffer after the previous micro-step (k > 1) */
  size_t accum_prev_n;
  int accum_prev_zero;   /* accum_prev is all zeros (start of a window) */
  float *accum_prev_dev; /* accum_prev of device gradients (acc_device.c) */
  size_t accum_prev_dev_n;
  float *dev_scratch; /* 16 device floats: the unscale flag, the grad norm (acc_device.c) */

  /* fp16 dynamic loss scaler (GradScaler; acc_scaler.c) */
  float scale;                 /* current loss scale, 2^16 at start      */
  float growth_factor;         /* 2                                      */
  float backoff_factor;        /* 0.5                                    */
  int growth_interval;         /* 2000                                   */
  int growth_tracker;          /* consecutive steps without inf/NaN      */
  int found_inf;               /* the last unscale found inf/NaN         */
  const float *unscaled_grads; /* buffer unscaled since the last update */

  /* RNG (acc_set_seed) */
  acc_rng_t rng;

  /* process group */
  acc_store_server_t *store_server; /* rank 0 when no launcher hosts it */
  acc_store_client_t *store;
  acc_gloo_t *gloo;
  /* issue 24: host collectives by node, through shared memory within a
   * node (acc_node.c, acc_shm.h; NULL: Gloo only) */
  acc_node_t *node;
  acc_nccl_t *nccl;
  int broken;             /* a collective failed: the group cannot be used again */
  unsigned rebuilt_epoch; /* the last acc_rebuild_process_groups epoch it rebuilt for */
  char gloo_host[256];    /* the address its Gloo device listens on (join_group)       */
  /* issue 21/27: collectives are numbered (1 = the first; every rank
   * counts alike), recorded in this rank's state page (nbf_rankstate.h)
   * and, by default, fatal when they fail (acc_set_errhandler) */
  uint64_t coll_seq;
  int errors_return;          /* ACC_ERRORS_RETURN */
  int debug_ops;              /* ACCELERATE_DEBUG_MODE: compare each call first */
  nbf_rankstate_t *rankstate; /* this rank's record (NULL: not launched by nbfork) */
  int allreduce_algo;         /* acc_gloo_algo_t; 0 = by size (acc_gloo_choose_algo) */
  /* gradient buckets of the model toolkit (acc_mlp_backward_xent):
   * 0 = none (acc_backward all-reduces the flat buffer), 1 = per bucket,
   * blocking, 2 = per bucket on the worker thread, overlapping the rest
   * of the backward pass */
  int grad_buckets;
  const float *grads_synced; /* buffer the model already all-reduced ... */
  size_t grads_synced_n;     /* ... and its length: acc_backward skips it */

  /* objects saved with acc_save_state (acc_register_for_checkpointing) */
  struct acc_ckpt_item *ckpt_items;
  int nckpt_items;

  /* live charts (acc_log_scalar) */
  acc_charts_t *charts;

  char err[1024];
};

/*
 * Error discipline of libnbfork.
 *
 * - Every call that can fail returns an acc_result_t (NCCL's
 *   ncclResult_t); the place that detects the failure stores one message
 *   saying what failed, where and why with acc__set_error ("rank R:
 *   ..."), and every caller above it passes the code up unchanged. That
 *   message is the breadcrumb: the user reads it with acc_last_error.
 * - Helpers without an acc_t (the store client, the Gloo shim, NCCL)
 *   keep their text in their own object or in an `err` buffer the caller
 *   gives them; the acc_* function that called them copies it in.
 * - Constructors (acc_new, acc_mlp_new, ...) return NULL on failure; the
 *   one that has an acc stores the reason there, acc_new (which has none
 *   to return) writes it as one line on stderr.
 * - The library does not print otherwise, except where printing is the
 *   function's documented job (acc_print, progress bars, nbf_display's
 *   fallback to stdout, the Trainer's log lines and its logger
 *   acc_trainer_log) and the documented one-line reasons of the
 *   NULL-returning helpers (acc_idx_read, acc_mlp_*) which have nowhere
 *   else to put them, and acc_new's one-line warning when rank 0 hosts
 *   a store without a secret on every interface (it is no error, and
 *   the user must see it before anyone joins), and the two lines of a
 *   failed collective that ends its rank (ACC_ERRORS_ARE_FATAL, the
 *   default: acc_collective.c's coll_fatal). What the launcher needs to
 *   know travels in the rank's state record (nbf_rankstate.h), never as
 *   text.
 *
 * ACC_CHECK and ACC_CHECK_GOTO (acc_check.h) pass a code up.
 */

/* Store `code` and a printf-formatted message ("rank R: ...") as the
 * last error of `acc`; returns `code`. */
acc_result_t acc__set_error(acc_t *acc, acc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Local IPv4/IPv6 address this host uses to reach `host` (MASTER_ADDR),
 * as text in `out`; "127.0.0.1" for loopback. Returns 0 or -1. */
int acc__local_addr_for(const char *host, char *out, size_t outlen);

/* Display API helpers (nbf_display.c). 1 when NBFORK_DISPLAY_FD names
 * an open fd. */
int nbf__display_attached(void);

/* Charts (acc_chart.c): draw pending points and free the series. */
/* Pick this rank's CUDA device (acc_device.c): -1 (CPU) with
 * ACCELERATE_USE_CPU or no GPU, else LOCAL_RANK (Accelerate's
 * cuda:LOCAL_RANK), or LOCAL_RANK mod count with NBFORK_SHARE_GPU.
 * 0, or -1 with the error in acc. Initializes CUDA when built with it. */
int acc__select_device(acc_t *acc);
/* acc_backward's accumulation step on device gradients (k = accum_steps
 * > 1), with the previous micro-step's buffer in device memory. */
acc_result_t acc__accumulate_device(acc_t *acc, float *grads, size_t n);
/* The accelerator's device scratch (16 floats, allocated at the first
 * call and kept: a training step allocates nothing); NULL with the error
 * in acc. */
float *acc__device_scratch(acc_t *acc);
/* Frees the accelerator's device buffers (acc_destroy). */
void acc__device_free(acc_t *acc);

void acc__charts_flush(acc_t *acc);
void acc__charts_free(acc_t *acc);

/* The sampler of `rank` in a world of `world` (acc_sampler_new reads
 * them from the accelerator); tests simulate every rank with it. */
acc_sampler_t *acc__sampler_new_for(int rank, int world, size_t n, size_t batch_size, int shuffle,
                                    unsigned long long seed);

/* Force the Gloo all-reduce algorithm of host buffers (acc_gloo_algo_t;
 * 0 = the runtime's choice by size). For benchmarks (bench/allreduce);
 * every rank must set the same. */
void acc__set_allreduce_algo(acc_t *acc, int algo);
/* 1 when dtype/op are values of nbfork.h's enums: the collectives'
 * argument checks, and the guards of the reduction and NCCL tables that
 * are indexed by them (comm/). */
static inline int acc_dtype_valid(acc_dtype_t dtype) {
  return (unsigned)dtype <= (unsigned)ACC_I64;
}
static inline int acc_op_valid(acc_op_t op) {
  return (unsigned)op <= (unsigned)ACC_MIN;
}

/* Gradient buckets (see grad_buckets): all-reduce (AVG) `n` floats of a
 * bucket now (mode 1) or on the worker thread (mode 2); wait for all
 * queued buckets. Errors as acc_all_reduce. */
acc_result_t acc__all_reduce_bucket(acc_t *acc, float *buf, size_t n);
acc_result_t acc__wait_buckets(acc_t *acc);

/* acc_destroy's barrier (every rank leaves together): numbered and
 * recorded like acc_wait_for_everyone, so that a rank waiting in it
 * while its peers are in another collective shows as such in the
 * launcher's report; its failure is returned, never fatal. */
acc_result_t acc__final_barrier(acc_t *acc);
/* Rebuild the group when acc_rebuild_process_groups asked for an epoch
 * it has not rebuilt for yet (every collective calls this first). ACC_OK
 * when nothing was due or the new group is up; else the error (stored). */
acc_result_t acc__rebuild_if_due(acc_t *acc);
/* The epoch acc_rebuild_process_groups asked for last (0: none): a group
 * made after it is in step (acc_new). acc_rebuild.c, as the two above. */
unsigned acc__rebuild_epoch(void);
/* NBFORK_GLOO_BUSY_POLL, or its default for this node (acc_rebuild.c). */
int acc__gloo_busy_poll(const acc_t *acc);

/* Join the group by node, unless NBFORK_SHM_COLLECTIVES=0: the ranks
 * exchange their shared-memory cards through the store (O(N) messages,
 * rank 0 collects and publishes them), each maps its node's workspaces
 * (acc_shm.h) and, with several nodes, one leader per node connects to
 * the other leaders through Gloo (listening on `host`), so that host
 * collectives go node-local through shared memory and between nodes
 * through the leaders. Returns 1 when that group is up (no mesh of every
 * rank is needed), 0 when the caller must connect Gloo's full mesh
 * instead (disabled, or some rank cannot map its node's workspaces: all
 * decide alike), -1 on failure (acc->err says why). acc_node.c. */
int acc__node_connect(acc_t *acc, const char *host);
void acc__node_release_store(acc_t *acc); /* the store is about to go */
void acc__node_destroy(acc_t *acc);

/* The host collectives by node (acc->node set): as the public calls,
 * errors TIMEOUT, PEER (a member or node died or failed), MISMATCH (the
 * ranks of a node called different collectives), with the text in err.
 * leaving = 1: acc_destroy's barrier. */
acc_result_t acc__node_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                  acc_op_t op, char *err, size_t errlen);
acc_result_t acc__node_broadcast(acc_t *acc, void *buf, size_t bytes, int root, char *err,
                                 size_t errlen);
acc_result_t acc__node_all_gather(acc_t *acc, const void *send, void *recv, size_t bytes, char *err,
                                  size_t errlen);
acc_result_t acc__node_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                      acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen);
acc_result_t acc__node_barrier(acc_t *acc, int leaving, char *err, size_t errlen);
/* HYBRID_SHARD's groups (nbf_shard.h): this rank's node has `members`
 * ranks, this one is member `me` (rank order), of `nnodes` nodes.
 * Returns 0, 1 when the nodes differ in size, -1 without node groups
 * (shared memory off or not set up). */
int acc__node_shape(const acc_t *acc, int *members, int *me, int *nnodes);
/* All-gather among the members of this rank's node only (shared memory):
 * recv gets members * bytes, member-major. */
acc_result_t acc__node_local_all_gather(acc_t *acc, const void *send, void *recv, size_t bytes,
                                        char *err, size_t errlen);
/* The same as a collective of the group (recorded, checked, fatal or
 * returned as acc_all_gather's); acc_collective.c. Every rank calls it:
 * each node gathers its own members' blocks. */
acc_result_t acc__local_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                                   acc_dtype_t dtype);
/* HYBRID_SHARD's gradient reduction (FSDP's HYBRID_SHARD): send holds
 * members * count elements (member-major); the sum (op) over this rank's
 * node is reduce-scattered through shared memory (recv: this member's
 * count elements; recv may be send + me * count), then all-reduced over
 * the replica group (acc_node_hybrid.c: the ranks with this member index
 * on every node, Gloo) with AVG dividing by the world once at the end.
 * Errors as acc__node_reduce_scatter's, plus those of connecting the
 * replica group at its first use. */
acc_result_t acc__node_hybrid_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                             acc_dtype_t dtype, acc_op_t op, char *err,
                                             size_t errlen);
/* Connect this rank's replica group now (every rank of the world calls
 * it: acc_shard_new with HYBRID_SHARD), so that its failure is set-up's,
 * not a step's. ACC_OK with one node or without node groups. */
acc_result_t acc__node_replica_connect(acc_t *acc);
/* The payload bytes this rank handed to Gloo between nodes so far (the
 * leaders' collectives and the replica group's): the traffic a test
 * compares; 0 without node groups. */
uint64_t acc__node_cross_bytes(const acc_t *acc);
/* This rank's node (numbered by lowest rank) and member index: 0, or -1
 * without node groups (NCCL's split by node: acc_collective.c hands them
 * to acc_nccl_split). */
int acc__node_place(const acc_t *acc, int *node, int *me);
/* The same reduction as a collective of the group (recorded, checked,
 * fatal or returned as acc_reduce_scatter's; acc_collective.c): on the
 * host as above; device buffers through NCCL's node and replica
 * communicators (acc_nccl.h). Every rank calls it. */
acc_result_t acc__hybrid_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                        acc_dtype_t dtype, acc_op_t op);
/* After a failure: the rank it lost (or -1); wake this node's members. */
int acc__node_lost_rank(const acc_t *acc);
void acc__node_abort(acc_t *acc);

/* "shared memory", "shared memory + gloo between nodes" or "gloo": the
 * path of host collectives. */
const char *acc__host_path(const acc_t *acc);

/* Shared-memory waits that slept without spinning (acc_shm.h); 0 without
 * shared memory. */
long acc__shm_waits_slept_at_once(const acc_t *acc);

/* Host collectives of the synchronous Gloo mesh that busy-polled / slept
 * so far (0 and 0 without a Gloo group). */
void acc__gloo_poll_counts(const acc_t *acc, long *polled, long *slept);

/* Name of the algorithm acc_all_reduce runs for `bytes` bytes of f32. */
const char *acc__allreduce_algo_name(const acc_t *acc, size_t bytes);

/* Mixed precision: default GradScaler settings (acc_scaler.c); round `n`
 * f32 values in place to the nearest fp16/bf16 value (acc_half.c; no-op
 * for ACC_PRECISION_NO). */
void acc__scaler_init(acc_t *acc);
void acc__round_half(acc_precision_t p, float *x, size_t n);
/* g *= inv for `n` host floats in one pass; 1 when any element of the
 * SCALED gradients was inf/NaN (exponent bits all ones), else 0
 * (acc_half.c, the host kernels; acc_scaler.c and the host-staging
 * fallback of device gradients use it). */
int acc__unscale_host(float *restrict g, size_t n, float inv);

/* Checkpoints (acc_checkpoint.c) reach into the model, the optimizer
 * and the RNGs through these. */
struct acc_ckpt_item {
  char name[64];
  void *data;
  size_t bytes;
};
typedef struct {
  float lr, momentum, weight_decay, beta1, beta2, eps;
  long long t; /* steps taken */
} acc__optim_hparams_t;
typedef struct {
  int kind; /* 0 SGD, 1 AdamW */
  size_t n;
  acc__optim_hparams_t hp;
  float *m, *v; /* the optimizer's own buffers (n floats each, or NULL) */
} acc__optim_view_t;
/* Pointers into `o` and a copy of its scalars. */
/* A device optimizer's state is first copied to the host buffers (a
 * failed copy: ACC_ERR_BACKEND in acc, *v not filled). */
acc_result_t acc__optim_view(acc_t *acc, acc_optim_t *o, acc__optim_view_t *v);
/* Set the scalars of `o` (lr, ..., t). */
void acc__optim_restore(acc_optim_t *o, const acc__optim_hparams_t *hp);
/* The update alone (host or device), whatever the accumulation position
 * and the precision: the caller unscaled and checked the gradients
 * (sharding). 1, or -1 on a device error (in acc). */
int acc__optim_step_raw(acc_t *acc, acc_optim_t *o);
/* The sum of squares of n host floats in f64 (eight lanes, then
 * pairwise): clip_grad_norm's, the Trainer's and sharding's. */
double acc__sumsq(const float *g, size_t n);
/* Bytes of state the optimizer holds (momentum, moments). */
size_t acc__optim_state_bytes(const acc_optim_t *o);
/* acc_backward's scaling of this micro-step's contribution by
 * 1/gradient_accumulation_steps, without the all-reduce (sharding
 * reduce-scatters instead). Errors: NO_MEMORY, a device error. */
acc_result_t acc__accumulate_scale(acc_t *acc, float *grads, size_t n);
/* Forget the registered object `name` (the Trainer's state, when the
 * Trainer is destroyed before the accelerator); no-op when absent. */
void acc__unregister_for_checkpointing(acc_t *acc, const char *name);
/* Checkpoint file I/O for the sharded checkpoints (acc_checkpoint.c's
 * format: header, CRC-32, named sections). kind: 0 shared, 1 rank,
 * 2 shard (acc_shard_ckpt.c). */
typedef struct {
  int32_t kind, has_m, has_v, pad;
  uint64_t n;
  float lr, momentum, weight_decay, beta1, beta2, eps;
  int64_t t;
} acc__ckpt_optim_rec_t; /* the "optim" section */
typedef struct {
  unsigned char *buf; /* whole file (owned: free it) */
  size_t len;
  const unsigned char *payload;
  size_t plen;
} acc__ckpt_file_t;
typedef struct {
  const char *name;
  const void *data;
  size_t bytes;
} acc__ckpt_sec_t;
/* DIR (created) / FILE written atomically with the sections in order. */
acc_result_t acc__ckpt_write(acc_t *acc, const char *dir, const char *file, uint32_t kind,
                             uint32_t rank, const acc__ckpt_sec_t *s, int n);
/* Every rank learns whether any rank failed (r != OK anywhere), by one
 * all-reduce; the local error text is kept. Returns r where it failed,
 * else the first failed rank's code with "WHAT failed on rank R (see that
 * rank's error)AFTER" (collective: every rank calls it; world 1: r). */
acc_result_t acc__ckpt_agree(acc_t *acc, acc_result_t r, const char *what, const char *after);
/* Read and check (magic, version, kind, CRC, section table) PATH. */
acc_result_t acc__ckpt_read(acc_t *acc, const char *path, uint32_t kind, acc__ckpt_file_t *f);
/* The section `name`, or NULL (unaligned: memcpy records out). */
const void *acc__ckpt_find(const acc__ckpt_file_t *f, const char *name, size_t *bytes);
/* The section at *off (advanced past it), its name (NUL-terminated) and
 * size; NULL at the end. */
const void *acc__ckpt_next(const acc__ckpt_file_t *f, size_t *off, char name[33], size_t *bytes);
/* acc_shard_backward after the model's backward ran (the Trainer's
 * training_step): the stage's reduction (runtime/shard/acc_shard_run.c). */
acc_result_t acc__shard_reduce(acc_shard_t *sh);
/* acc_load_state; rank_file 0 skips the per-rank files (RNG states,
 * accumulation position, gradients: resuming at another world size). */
acc_result_t acc__load_state_ex(acc_t *acc, const char *dir, acc_mlp_t *model, acc_optim_t *opt,
                                int rank_file);
/* Layer sizes of `m`: *nlayers layers, sizes[0..nlayers]. */
const int *acc__mlp_sizes(const acc_mlp_t *m, int *nlayers);
/* The rows acc_mlp_forward accepts at most (acc_mlp_new's max_batch). */
int acc__mlp_max_batch(const acc_mlp_t *m);
/* A per-layer hook of acc_mlp_backward_xent on the host (LOMO's fused
 * update, acc_lomo.c): called once per layer, last layer first, when the
 * layer's gradient (weight then bias: `n` elements from `offset` of the
 * grads buffer) is complete and its input gradient computed, so it may
 * change the layer's parameters. Nonzero stops backward (NaN returned;
 * the hook sets the error). NULL removes it. */
typedef int (*acc__mlp_layer_hook_fn)(void *user, int layer, size_t offset, size_t n);
void acc__mlp_set_layer_hook(acc_mlp_t *m, acc__mlp_layer_hook_fn fn, void *user);
/* The model's host buffer of parameters (what 0) or gradients (1),
 * refreshed from the device model when it has one (synchronous); NULL on
 * a device error (in acc_last_error). For checkpoints. */
float *acc__mlp_host(acc_mlp_t *m, int what);
/* Hooks around each layer's use in an acc_mlp_t, on the host or a device
 * (sharding, runtime/shard/acc_shard.c): FWD_BEGIN before layer l's forward reads
 * its parameters (weight then bias: `n` elements from `offset`), FWD_END
 * after, BWD_BEGIN before its backward reads them, BWD_END when its
 * gradient is complete (after the LOMO layer hook). While a hook is set
 * the backward of a layer computes its input gradient first, then calls
 * BWD_WEIGHTS_DONE (its parameters are not read again by this backward),
 * then computes its weight gradient, so that a sharded model never holds
 * a layer's gathered parameters and its full gradient at once. Nonzero
 * stops the pass (the hook sets the error). Under mixed precision the
 * layer's half shadow is refreshed after FWD_BEGIN and BWD_BEGIN. NULL
 * removes it and every unit view (below); gradient buckets are off while
 * it is set. */
enum {
  ACC__UNIT_FWD_BEGIN = 0,
  ACC__UNIT_FWD_END,
  ACC__UNIT_BWD_BEGIN,
  ACC__UNIT_BWD_END,
  ACC__UNIT_BWD_WEIGHTS_DONE
};
typedef int (*acc__mlp_unit_hook_fn)(void *user, int phase, int layer, size_t offset, size_t n);
void acc__mlp_set_unit_hook(acc_mlp_t *m, acc__mlp_unit_hook_fn fn, void *user);
/* A unit view (from a unit hook): layer l's forward and backward read its
 * parameters (weight then bias, `n` elements) from `params` instead of
 * the model's buffer, and its backward adds its gradient into `grads`
 * instead; NULL = the model's buffer. Lets a sharded model gather a layer
 * into a reused buffer (no page of the model's buffers touched). */
void acc__mlp_set_unit_view(acc_mlp_t *m, int l, const float *params, float *grads);
/* The model's host buffer (params what = 0, grads 1, the half shadow 2:
 * NULL before the first half-precision forward) without copying
 * from the device: to fill before acc__mlp_upload. */
float *acc__mlp_host_buffer(acc_mlp_t *m, int what);
/* After writing acc__mlp_host's buffer: copy it to the device model
 * (ACC_OK and nothing to do on the host). */
acc_result_t acc__mlp_upload(acc_mlp_t *m, int what);
/* A device model's full parameter (what 0) or gradient (1) buffer freed
 * (keep 0) or allocated zeroed (keep 1; nothing when it exists): stage 3
 * of a sharded device MLP holds its shards and one gathered layer only,
 * the layers reading unit views. The pointer may change: acc_mlp_params
 * / acc_mlp_grads say where it is (NULL while freed). ACC_OK on the host
 * (nothing to do); else the device error, set in the model's acc. */
acc_result_t acc__mlp_dev_buffer(acc_mlp_t *m, int what, int keep);
/* The RNG of `acc`, or the process-wide one when acc is NULL. */
acc_rng_t *acc__rng(acc_t *acc);

#endif /* ACC_INTERNAL_H */
