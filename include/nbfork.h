/*
 * nbfork.h — the runtime a launched training function calls: the C
 * counterpart of Hugging Face Accelerate's `Accelerator`. It includes
 * nbf_display.h, the display API that lets cells and workers show rich
 * output in the notebook.
 *
 * Cells and launched workers see this header without any flag; plain C
 * programs use `pkg-config --cflags --libs nbfork`.
 *
 * Conventions (as in nccl.h):
 *  - every call that can fail returns an acc_result_t (ACC_OK == 0) or
 *    stores one in the acc_t (acc_last_error);
 *  - counts are in ELEMENTS, never bytes, unless the name says `_bytes`;
 *  - collectives BLOCK until every rank has contributed or the timeout
 *    (NBFORK_TIMEOUT_S, default 300 s) expires; they are in place;
 *  - functions returning pointers return NULL on failure; the caller owns
 *    what a `_new` returns and frees it with the matching `_destroy`,
 *    which is NULL-safe and clears the caller's pointer;
 *  - calls that return something else (an int, a size_t, a float, void)
 *    say below exactly what failure looks like; where an acc_t is at hand
 *    the reason is in acc_last_error. The library prints only where that
 *    is the call's job (acc_print, progress bars, the display API's
 *    text fallback, the Trainer's log lines and logger) and, as one
 *    line on stderr, the reason of a failure that has no acc_t to keep
 *    it (acc_new, acc_idx_read, acc_mlp_* with a NULL accelerator,
 *    nbf_display's invalid JSON or failed write).
 */
#ifndef NBFORK_H
#define NBFORK_H

#include <stddef.h>
#include <stdint.h>

#include "nbf_api.h"

#include "nbf_display.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Results                                                              */
/* ------------------------------------------------------------------ */

typedef enum {
  ACC_OK = 0,
  ACC_ERR_INVALID_ARGUMENT = 1, /* bad pointer, count, dtype or op        */
  ACC_ERR_SYSTEM = 2,           /* an OS call failed (errno kept in text)  */
  ACC_ERR_TIMEOUT = 3,          /* a peer did not answer within timeout    */
  ACC_ERR_PEER = 4,             /* a peer failed or closed its connection  */
  ACC_ERR_STORE = 5,            /* rendezvous store unreachable or refused */
  ACC_ERR_BACKEND = 6,          /* Gloo / NCCL / CUDA reported an error    */
  ACC_ERR_UNSUPPORTED = 7,      /* not built in (e.g. NCCL without CUDA)   */
  ACC_ERR_IO = 8,               /* file read/write/format error            */
  ACC_ERR_NO_MEMORY = 9,
  ACC_ERR_MISMATCH = 10 /* the ranks called different collectives (debug mode) */
} acc_result_t;

/* A static English description of `r`; never NULL. */
ACC_API const char *acc_strerror(acc_result_t r);

/* ------------------------------------------------------------------ */
/* The Accelerator                                                      */
/* ------------------------------------------------------------------ */

typedef enum { ACC_PRECISION_NO = 0, ACC_PRECISION_FP16, ACC_PRECISION_BF16 } acc_precision_t;

typedef struct {
  /* "no", "fp16" or "bf16"; NULL = ACCELERATE_MIXED_PRECISION or "no". */
  const char *mixed_precision;
  /* Micro-steps per optimizer step (Accelerate's
   * `gradient_accumulation_steps`); 0 or 1 = no accumulation. */
  int gradient_accumulation_steps;
  /* Force a gradient sync on the last batch of the data loader even when
   * the accumulation window is not full (Accelerate's
   * GradientAccumulationPlugin.sync_with_dataloader, default true: any
   * value but 0 means true; use -1 for "default"). */
  int sync_with_dataloader;
  /* Seed for acc_set_seed at creation; < 0 = do not seed. */
  long long seed;
  /* Collective timeout in seconds; 0 = NBFORK_TIMEOUT_S or 300. */
  int timeout_s;
} acc_config_t;

/* Defaults: precision from the environment, no accumulation,
 * sync_with_dataloader on, no seeding, default timeout. */
#define ACC_CONFIG_INIT                                                                            \
  { NULL, 1, -1, -1, 0 }

typedef struct acc acc_t;

/* Create the Accelerator of this process. Reads its place in the world
 * from the environment the launcher sets (the names torch and Accelerate
 * use): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT, ACCELERATE_MIXED_PRECISION; without them it is a single
 * process of world size 1 and nothing touches the network. With
 * WORLD_SIZE > 1 it joins the process group (rendezvous through the store
 * at MASTER_ADDR:MASTER_PORT, then a Gloo full mesh, then a barrier),
 * which BLOCKS until every rank arrived or the timeout. When no nbfork
 * launcher hosts the store (NBFORK_STORE_HOSTED unset or 0), rank 0
 * hosts it, so programs started by hand work. With WORLD_SIZE > 1,
 * SIGPIPE is ignored if it had its default action (a dead peer must give
 * an error, not kill the process).
 *
 * Other environment variables (defaults in brackets):
 *   NBFORK_TIMEOUT_S      rendezvous and collective timeout, seconds [300]
 *   NBFORK_RUN_ID         prefix of this run's store keys ["run"]
 *   NBFORK_STORE_HOSTED   1 = the launcher hosts the store [0]
 *   NBFORK_GLOO_HOSTNAME  address Gloo listens on [the local address that
 *                         routes to MASTER_ADDR; 127.0.0.1 for loopback]
 *   NBFORK_GLOO_BUSY_POLL 1 = all-reduces up to 4 MiB busy-poll their
 *                         sockets, as MPI and NCCL do (faster on cores the
 *                         ranks have to themselves; much slower when other
 *                         work shares them: set 0 there) [1 when the
 *                         node's ranks do not outnumber its CPUs]
 *   NBFORK_GRAD_BUCKETS   0, 1, 2: gradient buckets of acc_mlp_backward_xent
 *                         (see there) [0]
 *   NBFORK_RDZV_SECRET    shared secret of the job's rendezvous store:
 *                         when set, the store (hosted by rank 0 or the
 *                         launcher) talks only to clients presenting it
 *                         (ZeroMQ CURVE, keys derived from SHA-256 of the
 *                         secret); every process of the job needs the same
 *                         value, else rendezvous fails within the timeout
 *                         with "wrong or missing rendezvous secret?" [unset:
 *                         open store]
 *   ACCELERATE_USE_CPU    true = never use a GPU [false]. Otherwise, when
 *                         built with CUDA and a GPU is visible, the rank
 *                         uses device LOCAL_RANK (this initializes CUDA in
 *                         the calling process).
 * `cfg` may be NULL (= ACC_CONFIG_INIT). Returns NULL on failure after
 * printing the reason to stderr as one line (rank, step, cause); the
 * same text is acc_last_error(NULL) in the calling thread. */
ACC_API acc_t *acc_new(const acc_config_t *cfg);

/* Leave the process group and free everything: draws pending charts,
 * stops the store if this rank hosts it, then waits at a barrier for the
 * other ranks (skipped after a failed collective) so no rank closes a
 * connection a peer still reads. Every rank must call it. NULL-safe;
 * clears *acc_p. */
ACC_API void acc_destroy(acc_t **acc_p);

ACC_API int acc_rank(const acc_t *acc);       /* global rank, 0..world-1  */
ACC_API int acc_local_rank(const acc_t *acc); /* rank within this node    */
ACC_API int acc_world_size(const acc_t *acc); /* number of processes      */
ACC_API int acc_local_world_size(const acc_t *acc);
ACC_API int acc_is_main_process(const acc_t *acc); /* rank == 0                */
ACC_API int acc_is_local_main_process(const acc_t *acc);
/* -1 = CPU; otherwise the CUDA device index this rank uses
 * (LOCAL_RANK; LOCAL_RANK mod the GPU count with NBFORK_SHARE_GPU). */
ACC_API int acc_device(const acc_t *acc);

/* The stream contract of device collectives. `stream` is a cudaStream_t
 * of this rank's device (passed as void *, so this header needs no CUDA
 * header); NULL (the default) = the legacy default stream, where
 * kernels launched without a stream argument run.
 *
 * Every collective on device buffers (acc_all_reduce, acc_broadcast,
 * acc_all_gather, acc_reduce_scatter; acc_backward on a device gradient)
 * is ORDERED AFTER all work enqueued on that stream before the call: the
 * runtime records a CUDA event on it and makes NCCL's own stream wait
 * for the event (cudaEventRecord + cudaStreamWaitEvent, as llm.c orders
 * its NCCL stream after its compute stream), so a buffer written by a
 * kernel or cudaMemsetAsync on the stream is reduced after it is written,
 * without a device synchronization. The collectives are BLOCKING: they
 * return when the result is in device memory (or at the timeout,
 * NBFORK_TIMEOUT_S), so work enqueued afterwards on any stream sees it.
 * Work on OTHER streams is not ordered: synchronize it first or pass its
 * stream here. Errors: INVALID_ARGUMENT (acc NULL), UNSUPPORTED (a
 * non-NULL stream in a build without CUDA); a stream of another device
 * or a destroyed one makes the next device collective fail with BACKEND.
 * The accelerator does not own the stream: destroy it after the last
 * collective (or acc_set_stream(acc, NULL) first). */
ACC_API acc_result_t acc_set_stream(acc_t *acc, void *stream);
/* The stream set by acc_set_stream (NULL: the default stream). */
ACC_API void *acc_get_stream(const acc_t *acc);
ACC_API acc_precision_t acc_mixed_precision(const acc_t *acc);
/* Text of the last error stored in `acc` ("" when none). With acc NULL:
 * the last error of this thread's calls made without an accelerator (a
 * failed acc_new, acc_to_f16(NULL, ...), ...), "" when none. Valid until
 * the next failing call on the same acc (or thread). */
ACC_API const char *acc_last_error(const acc_t *acc);

/* ------------------------------------------------------------------ */
/* Collectives (host buffers: Gloo; device buffers: NCCL)               */
/* ------------------------------------------------------------------ */

typedef enum { ACC_F32 = 0, ACC_F64, ACC_F16, ACC_BF16, ACC_I32, ACC_I64 } acc_dtype_t;
typedef enum { ACC_SUM = 0, ACC_AVG, ACC_MAX, ACC_MIN } acc_op_t;

/* Size of one element of `dtype` in bytes (0 for an unknown dtype). */
ACC_API size_t acc_dtype_size(acc_dtype_t dtype);

/* In-place all-reduce of `count` elements of `buf` across all ranks.
 * AVG divides the sum by the world size (integers: truncating).
 * Blocks; every rank must call it with the same count/dtype/op.
 * With ACCELERATE_DEBUG_MODE on, every collective first compares op,
 * dtype, count, root and sequence number across ranks (Accelerate's
 * verify_operation): a difference is MISMATCH on every rank, naming each
 * rank's call. Errors: INVALID_ARGUMENT, TIMEOUT, PEER, BACKEND, MISMATCH
 * (fatal by default: acc_set_errhandler). */
ACC_API acc_result_t acc_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                    acc_op_t op);

/* Broadcast `count` elements from rank `root` into every rank's `buf`. */
ACC_API acc_result_t acc_broadcast(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                   int root);

/* Gather `count` elements from each rank: `recv` holds world*count
 * elements, rank r's contribution at offset r*count. */
ACC_API acc_result_t acc_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                                    acc_dtype_t dtype);

/* Reduce world*count elements of `send` across ranks and leave rank r
 * with block r (count elements) in `recv`. */
ACC_API acc_result_t acc_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                        acc_dtype_t dtype, acc_op_t op);

/* Barrier (Accelerate's wait_for_everyone). */
ACC_API acc_result_t acc_wait_for_everyone(acc_t *acc);

/* What a failed collective does (MPI's error handlers,
 * MPI_Comm_set_errhandler). A collective fails when the group does:
 * TIMEOUT, PEER, BACKEND, MISMATCH, or any call on a group an earlier
 * failure broke; argument errors (INVALID_ARGUMENT: nothing was sent)
 * are always returned.
 *   ACC_ERRORS_ARE_FATAL (the default, MPI_ERRORS_ARE_FATAL): the rank
 *     writes one line on stderr naming the collective, its sequence
 *     number and the cause, records it for the launcher's report
 *     (NBFORK_RANKSTATE_FD) and ends with _exit(1) — C code that ignores
 *     a return code no longer trains on alone (PyTorch raises).
 *   ACC_ERRORS_RETURN (MPI_ERRORS_RETURN): the collective returns the
 *     error; the caller must check every result.
 * NBFORK_COLLECTIVE_ERRORS=fatal|return sets the default of acc_new.
 * Errors: INVALID_ARGUMENT (acc NULL or an unknown handler). */
typedef enum { ACC_ERRORS_ARE_FATAL = 0, ACC_ERRORS_RETURN = 1 } acc_errhandler_t;
ACC_API acc_result_t acc_set_errhandler(acc_t *acc, acc_errhandler_t handler);

/* Have every accelerator of this process rebuild its process group at
 * its next collective: a new Gloo full mesh through the same rendezvous
 * store, its keys under "<run id>/<acc's generation>/rebuild-<epoch>/",
 * then one all-reduce (MAX) that agrees on the sequence numbers. For a
 * group whose collective was cut short (an interrupted `%%ranks` cell:
 * the executor's rank workers call this on every rank with the same
 * `epoch`, 1, 2, ... as the cuts happen; across nodes the cut cell's
 * number, agreed by the nodes' executors), so that the next collective
 * does not meet its peers' half-sent messages. Every rank of the group
 * must call it with the same epoch before its next collective.
 * The old connections are abandoned, not closed (the cut call may hold
 * their locks): each rebuild leaks their sockets, Gloo's thread and its
 * cached buffers. A rebuilt group that had failed (ACC_ERR_PEER) is
 * usable again once every peer rebuilt. A device (NCCL) communicator
 * is aborted (ncclCommAbort) and made anew, under the new keys, at the
 * next device collective. Cheap: no I/O until the next collective. */
ACC_API void acc_rebuild_process_groups(unsigned epoch);

/* ------------------------------------------------------------------ */
/* Seeding and printing                                                 */
/* ------------------------------------------------------------------ */

/* Seed the runtime's RNG (used by the sampler, initializers, dropout)
 * and libc's rand(); the same seed gives the same sequence on every run.
 * With per_rank != 0 each rank gets seed + rank. `acc` may be NULL (the
 * process-wide RNG). Cannot fail. */
ACC_API void acc_set_seed(acc_t *acc, unsigned long long seed, int per_rank);
/* Next value of the runtime RNG: uniform in [0, 1). */
ACC_API double acc_rand_uniform(acc_t *acc);
/* Standard normal sample (Box-Muller). */
ACC_API double acc_rand_normal(acc_t *acc);

/* printf on the main process only (Accelerate's accelerator.print);
 * flushes so the line reaches the notebook at once. Returns printf's
 * result (characters written, negative on an output error); 0 on other
 * ranks and when fmt is NULL. `acc` may be NULL (prints). */
ACC_API int acc_print(const acc_t *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ */
/* Data: IDX files, distributed sampler, metrics                        */
/* ------------------------------------------------------------------ */

/* An IDX (MNIST format) tensor, as read from a possibly gzip'd file. */
typedef struct {
  int ndim;          /* 1..4                                  */
  int dims[4];       /* dims[0] = number of items             */
  size_t count;      /* product of dims (elements)            */
  unsigned char *u8; /* data when the type is ubyte (0x08)    */
} acc_idx_t;

/* Read `path` (gzip or plain). Only ubyte (0x08) data is supported.
 * Returns NULL and prints why (path, offset, magic) on failure.
 * Caller owns the result: acc_idx_destroy. */
ACC_API acc_idx_t *acc_idx_read(const char *path);
ACC_API void acc_idx_destroy(acc_idx_t **idx_p);

/* Memory kept across re-runs of a notebook cell. Re-running a cell gives
 * its globals their initial values again, so a data cell that mallocs
 * leaks its previous load on every "Run All"; with acc_keep it finds it.
 * Returns the block kept under `name` when it has `size` bytes (*fresh =
 * 0: already filled), else frees the block of another size (if any) and
 * keeps a new zeroed one (*fresh = 1: fill it). `fresh` may be NULL.
 * Kept until acc_keep_free(name) or the process ends; forked workers
 * inherit the blocks (copy-on-write). NULL with acc_last_error set when
 * name is NULL or empty, size is 0, or memory is short. Thread-safe. */
ACC_API void *acc_keep(const char *name, size_t size, int *fresh);
/* Free the block kept under `name` (nothing when there is none). */
ACC_API void acc_keep_free(const char *name);
/* The block kept under `name` without creating one: its data, and its
 * size in bytes in *size (when size is not NULL); NULL when none is kept
 * (acc_last_error untouched). For `%ranks pull/push` (ex_ranks.c). */
ACC_API void *acc_keep_find(const char *name, size_t *size);

/* PyTorch's DistributedSampler with Accelerate's even_batches: the
 * indices 0..n-1, shuffled by (seed + epoch) when shuffle != 0, padded by
 * repeating from the start so the total is a multiple of
 * world_size * batch_size, and dealt so rank r gets a disjoint shard of
 * the same length on every rank. Dealing is by batch, as Accelerate's
 * BatchSamplerShard does: global batch g (positions g*batch_size ..
 * (g+1)*batch_size-1 of the padded order) goes to rank g % world_size.
 * `acc` may be NULL (one process). Returns NULL when n or batch_size is 0
 * or out of memory. */
typedef struct acc_sampler acc_sampler_t;

ACC_API acc_sampler_t *acc_sampler_new(const acc_t *acc, size_t n, size_t batch_size, int shuffle,
                                       unsigned long long seed);
ACC_API void acc_sampler_destroy(acc_sampler_t **s_p);
/* Reshuffle for `epoch` (same result on every rank). */
ACC_API void acc_sampler_set_epoch(acc_sampler_t *s, int epoch);
/* Number of batches this rank iterates per epoch (same on every rank). */
ACC_API size_t acc_sampler_num_batches(const acc_sampler_t *s);
/* Indices of batch `b` of this rank: *len = batch_size (padding makes
 * every batch full). Pointer valid until the next set_epoch or destroy;
 * NULL (and *len = 0) when b >= acc_sampler_num_batches. */
ACC_API const size_t *acc_sampler_batch(const acc_sampler_t *s, size_t b, size_t *len);
/* The dataset size n given at creation (padding excluded): pass it to
 * acc_gather_for_metrics. */
ACC_API size_t acc_sampler_dataset_size(const acc_sampler_t *s);

/* Accelerate's gather_for_metrics: gather `count` int64 values per rank
 * (one per sample of one sampler batch, so count = batch_size, e.g.
 * predictions or labels) from all ranks into `out`
 * (world*count elements, rank-major, ordered like the sampler's global
 * order) and drop the padding duplicates the sampler added on the LAST
 * batch. `is_last_batch` says whether this is the final batch of the
 * epoch; `dataset_size` the true number of samples. Returns the number of
 * valid elements written to `out` (≤ world*count), or (size_t)-1 on error:
 * acc NULL, a NULL buffer, or the all-gather failed (then its reason is
 * in acc_last_error). */
ACC_API size_t acc_gather_for_metrics(acc_t *acc, const int64_t *values, size_t count, int64_t *out,
                                      int is_last_batch, size_t dataset_size);

/* ------------------------------------------------------------------ */
/* Gradient accumulation (Accelerate's accumulate / sync_gradients)     */
/* ------------------------------------------------------------------ */

/* Start a micro-step. `is_last_batch` forces a sync when the config's
 * sync_with_dataloader is on. Sets acc_sync_gradients. Both calls cannot
 * fail; with acc NULL they do nothing. */
ACC_API void acc_accumulate_begin(acc_t *acc, int is_last_batch);
ACC_API void acc_accumulate_end(acc_t *acc);
/* 1 when this micro-step ends an accumulation window (the optimizer
 * should step and zero the gradients), else 0. Always 1 without
 * accumulation. */
ACC_API int acc_sync_gradients(const acc_t *acc);

/* Accelerate's backward for a flat f32 gradient buffer of `n` elements
 * into which the caller just ADDED this micro-step's gradients: scales
 * this micro-step's contribution by 1/gradient_accumulation_steps (the
 * runtime keeps the buffer as it was after the previous micro-step to
 * tell the new part apart; O(n) extra memory only when accumulating) and,
 * on sync steps only, all-reduces (AVG) the buffer across ranks. No
 * communication on non-sync steps. Call it once per micro-step, between
 * acc_accumulate_begin and acc_accumulate_end; zero the buffer after the
 * optimizer step. Errors: as acc_all_reduce. */
ACC_API acc_result_t acc_backward(acc_t *acc, float *grads, size_t n);

/* ------------------------------------------------------------------ */
/* Mixed precision (Accelerate's mixed_precision = no | fp16 | bf16)    */
/* ------------------------------------------------------------------ */

/* Convert `n` elements between f32 and IEEE fp16 / bfloat16 (uint16_t
 * bit patterns), rounding to nearest, ties to even (as torch's .half()
 * and .bfloat16(); fp16 overflow gives +-inf, NaN stays NaN). Host
 * buffers on the CPU (F16C instructions when present); device buffers,
 * when acc_device(acc) >= 0, by CUDA kernels (synchronous). `acc` may be
 * NULL (host only; no CUDA call is ever made then, so it is safe in a
 * notebook cell before %launch). dst and src must not overlap.
 * Errors: INVALID_ARGUMENT (NULL buffer), BACKEND (CUDA failed). */
ACC_API acc_result_t acc_to_f16(const acc_t *acc, uint16_t *dst, const float *src, size_t n);
ACC_API acc_result_t acc_from_f16(const acc_t *acc, float *dst, const uint16_t *src, size_t n);
ACC_API acc_result_t acc_to_bf16(const acc_t *acc, uint16_t *dst, const float *src, size_t n);
ACC_API acc_result_t acc_from_bf16(const acc_t *acc, float *dst, const uint16_t *src, size_t n);

/* fp16 dynamic loss scaling, with the semantics of PyTorch's GradScaler
 * (torch.cuda.amp.GradScaler, used by Accelerate for fp16):
 *  - the loss is multiplied by the scale S before the backward pass, so
 *    small gradients do not flush to zero in fp16: acc_mlp_backward_xent
 *    does it; code computing its own gradients multiplies d(loss) by
 *    acc_loss_scale(acc);
 *  - before the optimizer step the gradients are multiplied by 1/S and
 *    checked: on inf/NaN the step is SKIPPED and S *= 0.5 (backoff);
 *    after 2000 consecutive clean steps S *= 2 (growth);
 *  - S starts at 2^16 = 65536.
 * acc_optim_step does all of this; the calls below are for a custom
 * optimizer (call acc_unscale_gradients, step only when it returned 1,
 * then acc_update_loss_scale) or to inspect the scaler. With precision
 * no or bf16 the scale is 1 and nothing is scaled. */

/* The current loss scale S (1.0 unless the precision is fp16). */
ACC_API float acc_loss_scale(const acc_t *acc);

/* GradScaler(init_scale, growth_factor, backoff_factor, growth_interval);
 * defaults 65536, 2, 0.5, 2000. Resets the count of clean steps.
 * Errors: INVALID_ARGUMENT unless init_scale > 0, growth_factor > 1,
 * 0 < backoff_factor < 1, growth_interval >= 1. */
ACC_API acc_result_t acc_set_grad_scaler(acc_t *acc, float init_scale, float growth_factor,
                                         float backoff_factor, int growth_interval);

/* GradScaler.unscale_ (Accelerate's unscale_gradients): multiply the `n`
 * f32 gradients (host, or device when acc_device >= 0) by 1/S. Returns 1
 * when all were finite (the optimizer may step), 0 when some were inf/NaN
 * (skip the step), -1 on error (acc_last_error). A second call on the
 * same buffer before acc_update_loss_scale does nothing (as GradScaler).
 * No-op returning 1 unless the precision is fp16. */
ACC_API int acc_unscale_gradients(acc_t *acc, float *grads, size_t n);

/* GradScaler.update: back off (found_inf != 0) or count a clean step and
 * grow every growth_interval clean steps. No-op unless fp16. */
ACC_API void acc_update_loss_scale(acc_t *acc, int found_inf);

/* Consecutive clean steps counted towards the next growth. */
ACC_API int acc_loss_scale_growth_tracker(const acc_t *acc);

/* 1 when the last optimizer step was skipped because the gradients held
 * inf/NaN (Accelerate's optimizer_step_was_skipped), else 0. */
ACC_API int acc_optimizer_step_was_skipped(const acc_t *acc);

/* ------------------------------------------------------------------ */
/* A small model toolkit on one flat parameter buffer                   */
/* ------------------------------------------------------------------ */

/* A multi-layer perceptron: Linear → ReLU → ... → Linear, f32, row-major,
 * all parameters in one flat buffer `params` (and gradients in `grads`)
 * so a single all-reduce covers the model.
 *
 * Mixed precision follows the accelerator given to acc_mlp_new (which must
 * outlive the model), as torch.autocast does for nn.Linear: with fp16 or
 * bf16 the inputs and weights of every matrix product are rounded to the
 * half type (accumulation in f32), each layer's outputs and gradients are
 * rounded to it, the softmax cross-entropy runs in f32, and the master
 * parameters and the gradient buffer stay f32; with fp16 the loss is
 * scaled by acc_loss_scale (so fp16 overflow shows up as inf gradients,
 * which acc_optim_step skips). */
typedef struct acc_mlp acc_mlp_t;

/* sizes[0] = inputs, sizes[nlayers] = outputs; weights Kaiming-uniform
 * (PyTorch nn.Linear default) from the accelerator's RNG. `acc` may be
 * NULL (one process, f32). With world size > 1 the initial parameters
 * are broadcast from rank 0 (collective). Returns NULL on bad sizes, out
 * of memory or a failed broadcast; the reason is in acc_last_error(acc),
 * or on stderr when acc is NULL.
 *
 * The other acc_mlp_* calls report errors the same way (acc_last_error
 * of the model's accelerator, else stderr). */
/* On a device (acc_device(acc) >= 0, nbfork built with a CUDA compiler)
 * the model lives there: parameters, gradients and the optimizers' state
 * in flat device buffers; products through cublasGemmEx with f32
 * accumulation (f32 inputs with precision "no"; fp16/bf16 inputs on
 * tensor cores from the f32 master weights under mixed precision, with
 * the roundings above); bias, ReLU, softmax cross-entropy and the updates
 * in CUDA kernels; inputs and labels staged through pinned host memory;
 * all of it on the accelerator's stream (acc_set_stream), so
 * acc_backward's NCCL all-reduce is ordered after it. Gradients match the
 * CPU model's within 1e-4 (f32), 5e-3 (fp16), 2e-2 (bf16) of the largest
 * one (tests/runtime/test_mlp_gpu.c). acc_mlp_params/acc_mlp_grads then
 * return DEVICE pointers (for acc_backward, acc_sgd_new, cudaMemcpy;
 * never dereference them on the host); acc_mlp_forward still returns
 * host logits and acc_mlp_backward_xent the loss (each copied back: one
 * synchronization of the stream), while acc_mlp_forward_async and
 * acc_mlp_backward_xent_async (below) keep both on the device until
 * acc_mlp_logits / acc_mlp_loss asks for them. Checkpoints copy the
 * device state to and from the host. A device model needs cuBLAS
 * (libcublas.so of the toolkit nbfork was built with, opened on the
 * first model): without it acc_mlp_new fails (ACC_ERR_BACKEND, naming
 * the library; no host fallback), and ACCELERATE_USE_CPU=1 trains on
 * the CPU instead. */
ACC_API acc_mlp_t *acc_mlp_new(acc_t *acc, const int *sizes, int nlayers, int max_batch);
ACC_API void acc_mlp_destroy(acc_mlp_t **m_p);
ACC_API size_t acc_mlp_num_params(const acc_mlp_t *m);
/* The flat parameter / gradient buffers (num_params floats each), owned
 * by the model: host memory, or device memory for a model on a device
 * (above). */
ACC_API float *acc_mlp_params(acc_mlp_t *m);
ACC_API float *acc_mlp_grads(acc_mlp_t *m);
/* Forward `batch` rows of x (batch × sizes[0]); returns logits
 * (batch × sizes[nlayers]), owned by the model, valid until next call.
 * NULL when m or x is NULL, batch is not in 1..max_batch, or no memory
 * for the half-precision buffers. */
ACC_API const float *acc_mlp_forward(acc_mlp_t *m, const float *x, int batch);
/* Softmax cross-entropy of the last forward against `labels` (batch
 * int64 class indices); mean over the batch. ADDS d(loss)/d(params) into
 * the gradient buffer. Returns the loss; NaN (gradients untouched) when
 * there was no forward or a label is not in 0..sizes[nlayers]-1. A
 * failed bucket all-reduce (below) leaves its error in acc_last_error and
 * the next acc_backward returns it.
 *
 * Gradient buckets (NBFORK_GRAD_BUCKETS, with world size > 1 and no
 * gradient accumulation): 1 = each layer's gradient is all-reduced
 * (average) as soon as the backward pass has produced it, as DDP's
 * buckets do; 2 = the same on a communication thread, in blocks of
 * ~256 KiB, overlapping the rest of the backward pass (the weight
 * gradient is then computed in row blocks: equal to rounding, not bit
 * for bit, to 0 and 1). The buffer is then already averaged when this
 * returns and acc_backward does not all-reduce it again. 0 (default) =
 * acc_backward all-reduces the whole buffer at once. Measured on 2 CPU
 * processes on 2 cores (784-256-10, batch 64): 0: 4.74 ms/step, 1: 4.86,
 * 2: 5.58 — each rank has one core, so the communication thread takes
 * time from the backward pass instead of hiding behind it, and more,
 * smaller all-reduces cost more round trips. */
ACC_API float acc_mlp_backward_xent(acc_mlp_t *m, const int64_t *labels);
/* argmax of each row of the last forward's logits into `pred` (batch).
 * Does nothing before the first forward. */
ACC_API void acc_mlp_predict(const acc_mlp_t *m, int64_t *pred);
ACC_API void acc_mlp_zero_grad(acc_mlp_t *m);

/* A training step that waits for nothing (a device model): as
 * acc_mlp_forward and acc_mlp_backward_xent, but the logits and the loss
 * stay where the model is, so a loop that reads the loss only when it
 * logs it (as PyTorch's loss.item()) does not synchronize with the
 * device each step. On the host they are the same computation.
 *
 * acc_mlp_forward_async: forward `batch` rows of x (batch × sizes[0]
 * f32; the caller may reuse x on return: a device model stages it).
 * Errors: INVALID_ARGUMENT (NULL, batch not in 1..max_batch), NO_MEMORY,
 * BACKEND (a CUDA/cuBLAS failure); the text in acc_last_error.
 * acc_mlp_logits: the last forward's logits (batch × sizes[nlayers],
 * host memory owned by the model, valid until the next forward); a
 * device model copies them back at the first call after a forward (one
 * stream synchronization). NULL before any forward or on a failed copy.
 * acc_mlp_backward_xent_async: ADDS d(loss)/d(params) of the last
 * forward into the gradient buffer (with fp16, of the loss times
 * acc_loss_scale); the labels are checked on the host first (a label not
 * in 0..sizes[nlayers]-1: INVALID_ARGUMENT naming its row, gradients
 * untouched). Errors also BACKEND; a failed bucket all-reduce as
 * acc_mlp_backward_xent.
 * acc_mlp_loss: the mean loss of the last backward (either kind); a
 * device model reads it back at the first call after a backward (one
 * stream synchronization). NaN before any backward or after a failed
 * one. */
ACC_API acc_result_t acc_mlp_forward_async(acc_mlp_t *m, const float *x, int batch);
ACC_API const float *acc_mlp_logits(acc_mlp_t *m);
ACC_API acc_result_t acc_mlp_backward_xent_async(acc_mlp_t *m, const int64_t *labels);
ACC_API float acc_mlp_loss(acc_mlp_t *m);

/* SGD with momentum (PyTorch torch.optim.SGD semantics) or AdamW
 * (Loshchilov & Hutter 2019; torch.optim.AdamW semantics) over `n`
 * parameters and their gradients (borrowed, not copied). NULL on a NULL
 * buffer, n == 0, a negative lr/momentum/weight_decay/eps, a beta outside
 * [0, 1), or out of memory. */
typedef struct acc_optim acc_optim_t;
ACC_API acc_optim_t *acc_sgd_new(float *params, float *grads, size_t n, float lr, float momentum,
                                 float weight_decay);
ACC_API acc_optim_t *acc_adamw_new(float *params, float *grads, size_t n, float lr, float beta1,
                                   float beta2, float eps, float weight_decay);
/* One optimizer step (Accelerate's AcceleratedOptimizer.step). Returns 1
 * when the parameters were updated, 0 when the step was skipped: on a
 * micro-step that does not sync gradients (acc_sync_gradients == 0), or
 * with fp16 mixed precision when the gradients hold inf/NaN. With fp16 it
 * runs GradScaler's unscale_ (the gradient buffer is divided by the loss
 * scale in place), step (skipped on inf/NaN) and update (see "Mixed
 * precision" above). `acc` may be NULL (always steps). Returns -1 when
 * a device step or the fp16 unscale failed (a CUDA error: the error is
 * in acc_last_error, the loss scale unchanged); opt NULL: 0. */
ACC_API int acc_optim_step(acc_t *acc, acc_optim_t *opt);
/* Zero the optimizer's gradient buffer, but only on sync micro-steps
 * (Accelerate's AcceleratedOptimizer.zero_grad); `acc` may be NULL. */
ACC_API void acc_optim_zero_grad(acc_t *acc, acc_optim_t *opt);
/* A negative lr is ignored. */
ACC_API void acc_optim_set_lr(acc_optim_t *opt, float lr);
ACC_API void acc_optim_destroy(acc_optim_t **opt_p);

/* ------------------------------------------------------------------ */
/* Checkpoints (Accelerate's save_state / load_state)                   */
/* ------------------------------------------------------------------ */

/* Save the training state into directory `dir` (created if missing):
 *  - by the main process, in DIR/nbfork_state.bin: the model's parameters
 *    (and layer sizes), the optimizer's hyper-parameters, step count and
 *    momentum / Adam moments, the fp16 loss scaler (scale, clean-step
 *    count, settings) and every object registered with
 *    acc_register_for_checkpointing;
 *  - by every rank R, in DIR/nbfork_rank<R>.bin: its RNG states (the
 *    accelerator's and the one used with acc == NULL), its gradient
 *    accumulation position (micro-step counter and the open window's
 *    buffer) and the model's gradient buffer.
 * `model` and `opt` may be NULL (not saved). Each file is replaced
 * atomically (temporary file, fsync, rename, fsync of the directory): a
 * crash leaves the previous checkpoint or the new one. Not saved: libc's
 * rand() state, the sampler (it is a function of seed and epoch: register
 * your epoch/batch counters), the data. Collective with world size > 1
 * (every rank calls it; it returns when all files are written, with the
 * same result on every rank). Errors: INVALID_ARGUMENT, IO (the message
 * names the path and the system error), NO_MEMORY, and the collectives'. */
ACC_API acc_result_t acc_save_state(acc_t *acc, const char *dir, acc_mlp_t *model,
                                    acc_optim_t *opt);

/* Restore what acc_save_state saved in `dir` into the accelerator,
 * `model` and `opt` (each may be NULL: not restored), and the registered
 * objects. The main process reads nbfork_state.bin and broadcasts it
 * (other nodes need not share the file system for it); each rank reads
 * its own nbfork_rank<R>.bin. Everything is checked first (file format,
 * CRC-32, model layer sizes, optimizer kind and size, registered object
 * sizes) and nothing is changed unless every rank can load: a CPU run
 * resumed this way continues bit for bit as if never interrupted.
 * Collective with world size > 1. Errors: IO (missing, truncated or
 * corrupt file: the message names it), INVALID_ARGUMENT (the checkpoint
 * is of another model/optimizer), NO_MEMORY, the collectives'. */
ACC_API acc_result_t acc_load_state(acc_t *acc, const char *dir, acc_mlp_t *model,
                                    acc_optim_t *opt);

/* Accelerate's register_for_checkpointing: save `bytes` bytes at `data`
 * under `name` (1..24 characters) with every acc_save_state and restore
 * them with acc_load_state (the main process's copy; the size must match
 * on load). Use it for loop counters (epoch, batch), a custom model's
 * parameters, a scheduler's state. Registering a name again replaces it.
 * The memory is borrowed until acc_destroy. At most 64 objects. */
ACC_API acc_result_t acc_register_for_checkpointing(acc_t *acc, const char *name, void *data,
                                                    size_t bytes);

/* ------------------------------------------------------------------ */
/* Progress and live charts (through the display API)                   */
/* ------------------------------------------------------------------ */

/* A progress bar drawn on the main process only, updated in place in the
 * notebook (update_display_data), with rate and ETA, like tqdm; on a
 * terminal it is drawn on stderr. NULL only when out of memory; drawing
 * errors are ignored (a progress bar must not stop training). */
typedef struct acc_progress acc_progress_t;
ACC_API acc_progress_t *acc_progress_new(const acc_t *acc, const char *desc, size_t total);
/* Advance by `n` and optionally set a postfix text (e.g. "loss=0.31"). */
ACC_API void acc_progress_update(acc_progress_t *p, size_t n, const char *postfix);
ACC_API void acc_progress_destroy(acc_progress_t **p_p); /* draws the final state */

/* Append (step, value) to the series `name` and redraw a live line chart
 * (SVG) in place on the main process. Values from other ranks are ignored
 * (log what you all-reduced). Out of memory drops the point; drawing
 * errors are ignored, as for progress bars. */
ACC_API void acc_log_scalar(acc_t *acc, const char *name, long step, double value);
/* Redraw the charts now if points were logged since the last redraw
 * (redraws are rate-limited to a few per second; acc_destroy flushes). */
ACC_API void acc_log_flush(acc_t *acc);

#ifdef __cplusplus
}
#endif

/* The Trainer (Transformers' names) on the API above. */
#include "nbf_trainer.h"

#endif /* NBFORK_H */
