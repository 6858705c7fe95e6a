/*
 * nbf_shard.h — sharded data parallel (ZeRO stages 1–3, PyTorch FSDP's
 * sharding strategies) over a model's flat buffers (acc_model_t,
 * nbf_trainer.h; included by nbfork.h after it).
 *
 * Source: Rajbhandari et al., "ZeRO: Memory Optimizations Toward
 * Training Trillion Parameter Models" (SC 2020); PyTorch FSDP's
 * ShardingStrategy; Accelerate's FullyShardedDataParallelPlugin and
 * DeepSpeedPlugin (the environment names below).
 *
 * Layout. The model's flat buffer is cut into wrap units (FSDP's
 * FlatParameter per wrapped module): for the toolkit MLP one layer
 * (weight then bias); for another acc_model_t the named tensors that
 * share a name prefix up to the last '.' and are contiguous
 * ("block.0.weight" + "block.0.bias"); without named tensors, the whole
 * buffer. Unit u of n_u elements is padded to N·s_u, s_u = ceil(n_u/N)
 * (N = world size), and rank r owns elements [r·s_u, min((r+1)·s_u, n_u))
 * of it. The optimizer (SGD or AdamW, acc_optim.c's update, torch
 * semantics) updates only the owned elements and keeps state for them.
 *
 *   stage 0  NO_SHARD (DDP): gradients all-reduced, every rank updates
 *            everything (the reference the other stages are tested
 *            against).
 *   stage 1  optimizer state sharded: gradients all-reduced (AVG), each
 *            rank updates its elements, then each unit is all-gathered.
 *   stage 2  SHARD_GRAD_OP: + each unit's gradient is reduce-scattered
 *            (AVG) as soon as the backward pass completes it. A host
 *            toolkit MLP computes a layer's gradient into one unit
 *            buffer, kept from layer to layer and step to step,
 *            reduced from a layer hook into the owned elements of the
 *            model's gradient buffer, whose other pages were returned to the OS once
 *            (madvise MADV_DONTNEED) and stay untouched (with gradient
 *            accumulation the micro-steps add into the model's buffer,
 *            as another model's backward does; its pages outside the
 *            owned elements are returned after each reduction).
 *   stage 3  FULL_SHARD: + parameters sharded: the owned elements live
 *            in a shard buffer; a toolkit MLP all-gathers each layer right
 *            before its forward and again before its backward into a unit
 *            buffer reused layer after layer (FSDP's all-gather output;
 *            the model's own buffers stay untouched). Its backward
 *            computes the layer's input gradient first, then its weight
 *            gradient into the same buffer, which is reduce-scattered
 *            into the owned gradients: a rank holds one layer's
 *            parameters or its gradient at a time (with mixed precision
 *            the layer's half-precision shadow too, released after its
 *            use), and gives the unit buffers back to the OS after each
 *            backward. Prefetch (FSDP's forward_prefetch and
 *            backward_prefetch=BACKWARD_PRE; cfg.prefetch): while layer k
 *            computes, a helper thread all-gathers the next layer (k+1 in
 *            forward, k-1 in backward) into a second unit buffer, so at
 *            most two units are held at once; the
 *            main thread waits for it before its next collective, so the
 *            collectives keep one order on every rank and the results are
 *            bitwise those without prefetch. Another acc_model_t has no
 *            layer hooks: every unit is gathered before forward_loss and
 *            released after backward (peak = the full parameters, steady
 *            state 1/N), without prefetch.
 *   HYBRID_SHARD (cfg.hybrid with stage 3; _HYBRID_SHARD_ZERO2 with
 *            stage 2; any stage >= 1 is accepted): the stage within each
 *            node, the model replicated across nodes (FSDP's hybrid
 *            strategies; DeepSpeed's ZeRO++ hpZ keeps a node-local copy of
 *            the parameters likewise). N above is then the ranks of a
 *            node; parameters are all-gathered between the node's ranks
 *            only (shared memory); a unit's gradient is reduce-scattered
 *            (SUM) within the node through shared memory, then only
 *            this rank's block is all-reduced over its replica group
 *            (the ranks with its index within the node on every node,
 *            FSDP's inter-node group: Gloo, connected by acc_shard_new
 *            through the store) and divided by the world (AVG): each
 *            rank sends 1/N of the unit between nodes. Needs the node
 *            groups of the shared-memory collectives
 *            (NBFORK_SHM_COLLECTIVES=1, the default) and nodes of equal
 *            sizes (UNSUPPORTED / INVALID_ARGUMENT otherwise). A
 *            SHARDED_STATE_DICT holds one replica's shards (see
 *            acc_shard_save_state). On a device: NCCL's node and
 *            replica communicators (ncclCommSplit of the world's, at
 *            the first collective; AVG within the node, then AVG over
 *            the replicas: a tolerance against DDP, not bits).
 *
 * Gradient accumulation (acc_config_t.gradient_accumulation_steps = k):
 * as Accelerate's, each micro-step's contribution is scaled by 1/k; the
 * gradients stay unsharded until the sync micro-step (FSDP's no_sync),
 * where they are reduced as above. Clipping by global norm: each rank
 * sums the squares of its owned gradient elements (f64), the partial
 * sums are all-reduced (SUM), norm = sqrt. fp16: the loss scale is
 * applied by the model's backward (GradScaler.scale); acc_shard_step
 * unscales the owned elements, all-reduces the inf/NaN flag (MAX) so
 * every rank skips or steps alike, then updates the scale. bf16: as f32
 * (no scaling).
 *
 * Equality with DDP (tests/runtime/test_shard.c, 1, 2 and 4 processes):
 * bit for bit for every stage, precision and accumulation wherever the
 * host collectives sum in one order every call (the update is
 * elementwise): at N <= 2 (a sum of two addends does not depend on
 * their order), and at any N through shared memory on one node (the
 * default: members' values are added in member order whatever the
 * buffer's size or algorithm, so a unit's reduce-scatter sums each
 * element as DDP's all-reduce of the whole buffer does); HYBRID_SHARD
 * over 2 nodes of 2 and of 3 ranks too (the node's sum in member order,
 * then two addends across nodes, as DDP's by node). Through Gloo (NBFORK_SHM_COLLECTIVES=0)
 * at N = 4 the tolerance is 1e-5 relative (losses; parameters: of the
 * largest parameter), measured <= 4e-7: there two DDP runs in one
 * process already differ in the last bit (Gloo's all-reduce of 4 ranks
 * does not sum in a fixed order from one call to the next), and stages
 * 2/3 reduce each unit apart (through Gloo, an all-reduce of a copy of
 * the unit keeping this rank's block, as PyTorch's Gloo backend does:
 * Gloo 0.5's recursive-halving reduce-scatter overwrote what it still
 * sent; acc_collective.c).
 * Clipping above stage 0: the norm is summed in another order (partial
 * sums per rank, then all-reduced): within 1e-5 (measured 0 here).

 * Offload (offload_optimizer_device: cpu, fsdp_offload_params: true): on
 * a CPU run the state already is in host memory: a no-op, stated by
 * acc_shard_describe. On a device, ZeRO-Offload's (Ren et al., USENIX
 * ATC 2021): the optimizer state and an f32 master copy of the owned
 * parameters in host memory, the optimizer stepping there over the owned
 * gradients copied down after the reduce (one synchronization per step),
 * the updated owned parameters copied back up; at stage 3 the parameter
 * shards themselves are host memory, copied up into the unit buffer at
 * each gather. The two DeepSpeed keys are not told apart.
 *
 * A model on a device (its parameters and gradients device memory,
 * acc_mlp_model on a GPU; both or neither, else INVALID_ARGUMENT): the
 * same stages through NCCL, the shards (stage 3's P and G, the staging
 * buffer) and the optimizer state in device memory, every copy, zeroing,
 * unscale, norm and update a device call on the accelerator's stream
 * (the host never reads device memory; the collectives wait for their
 * stream as the DDP path's do; the unscale's inf flag and the norm's sum
 * of squares are the two values read back, one synchronization each per
 * step). A device MLP runs under the same layer hooks as a host one: at
 * stage 3 each layer is gathered into one device unit buffer before its
 * forward and its backward and its gradient reduce-scattered from there,
 * and the model's full device buffers are freed while sharded (16Ψ/N +
 * 4L per rank with AdamW, f32): acc_mlp_params / acc_mlp_grads and the
 * acc_model_t given to acc_shard_new read NULL then; they are allocated
 * again to gather the whole model (acc_shard_gather_params, a FULL save,
 * acc_shard_destroy: the pointers may change, the acc_model_t follows),
 * for a checkpoint's gradients, or to accumulate over micro-steps. At
 * stage 2 on more than one rank a device MLP computes each layer's
 * gradient into one device unit buffer, kept from step to step, and
 * reduce-scatters it from there into a device buffer of the owned
 * gradients; the model's full device gradient buffer is freed while
 * sharded (acc_mlp_grads and the acc_model_t's grads read NULL; the
 * parameters stay whole): 4Ψ + 12Ψ/N + 4L per rank with AdamW, f32, the
 * host's estimate. It is allocated again (zeroed) to accumulate over
 * micro-steps (the window adds into it, reduced at the sync micro-step;
 * kept while accum_steps > 1), for a checkpoint (the owned gradients
 * copied to their places in it: the files are those of stage 2 without
 * it) and by acc_shard_destroy. No prefetch on a device. A custom device
 * model has no layer hooks: stage 3 gathers every unit before the
 * forward, its buffers stay allocated and "released" is zeroed. On a
 * device the unscale runs over the whole gradient buffer (or the owned
 * gradients' buffer: stage 3, a device MLP's stage 2; the elements a rank
 * does not own are zeros or every rank's same values, the padding zeros)
 * and the norm is summed by the device's kernel (another order than the
 * host's: a tolerance, not bits).
 * Checkpoints of a device model (MLP or custom): the same files through
 * host copies (the owned slices and gradients copied synchronously, a
 * custom model's full parameters through a host copy, the optimizer's
 * moments through its host buffers and uploaded at the next step).
 *
 * Errors follow nbfork.h (acc_result_t; the text in acc_last_error(acc)).
 */
#ifndef NBF_SHARD_H
#define NBF_SHARD_H

#include <stddef.h>

#include "nbf_trainer.h" /* acc_model_t (nbf_trainer.h includes this file last) */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ACC_SHARD_FROM_ENV = -1, /* read the launcher's environment (below)  */
  ACC_SHARD_NO_SHARD = 0,  /* DDP; ZeRO stage 0; FSDP NO_SHARD (3)     */
  ACC_SHARD_OPTIMIZER = 1, /* ZeRO stage 1                             */
  ACC_SHARD_GRAD_OP = 2,   /* ZeRO stage 2; FSDP SHARD_GRAD_OP (2)     */
  ACC_SHARD_FULL = 3       /* ZeRO stage 3; FSDP FULL_SHARD (1)        */
} acc_shard_stage_t;

typedef struct {
  /* ZeRO stage 0..3, or ACC_SHARD_FROM_ENV: ACCELERATE_USE_FSDP=true with
   * FSDP_SHARDING_STRATEGY (1|FULL_SHARD -> 3, 2|SHARD_GRAD_OP -> 2,
   * 3|NO_SHARD -> 0, 4|HYBRID_SHARD -> 3 hybrid, 5|_HYBRID_SHARD_ZERO2 ->
   * 2 hybrid) and FSDP_OFFLOAD_PARAMS,
   * or ACCELERATE_USE_DEEPSPEED=true with ACCELERATE_DEEPSPEED_ZERO_STAGE
   * (0..3) and ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE (none|cpu);
   * neither: stage 0. */
  int stage;
  int offload; /* keep the sharded state in host memory (see above)   */
  int adamw;   /* 1 = AdamW (lr, beta1, beta2, eps, weight_decay),
                  0 = SGD (lr, momentum, weight_decay)                 */
  float lr, beta1, beta2, eps, weight_decay, momentum;
  double max_grad_norm; /* > 0: clip by global norm; 0 = no clipping    */
  int hybrid;           /* 1 = HYBRID_SHARD: shard within each node only   */
  /* stage 3 with a toolkit MLP: ACC_SHARD_PREFETCH_FORWARD |
   * ACC_SHARD_PREFETCH_BACKWARD, 0 = none (the default, as Accelerate's
   * FullyShardedDataParallelPlugin: backward_prefetch NO_PREFETCH,
   * forward_prefetch False); with ACC_SHARD_FROM_ENV,
   * FSDP_BACKWARD_PREFETCH=BACKWARD_PRE|BACKWARD_POST and
   * FSDP_FORWARD_PREFETCH=true set their bit. A prefetch holds a second
   * layer: at most 4L bytes more (acc_shard_estimate_bytes). */
  int prefetch;
} acc_shard_config_t;

enum { ACC_SHARD_PREFETCH_FORWARD = 1, ACC_SHARD_PREFETCH_BACKWARD = 2 };

/* Stage from the environment, AdamW(1e-3, 0.9, 0.999, 1e-8, 0.01), no
 * clipping: torch.optim.AdamW's defaults; not hybrid; no prefetch. */
#define ACC_SHARD_CONFIG_INIT                                                                      \
  { ACC_SHARD_FROM_ENV, 0, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f, 0.0, 0, 0 }

typedef struct acc_shard acc_shard_t;

/* Shard `model` (whose parameters must be equal on every rank, as
 * acc_mlp_new leaves them) across the ranks of `acc`. For a toolkit MLP
 * (model->mlp) it installs the layer hooks; the model must not be driven
 * by another optimizer meanwhile. Collective (every rank, the same
 * config). Errors: INVALID_ARGUMENT (NULL, stage outside 0..3, bad
 * hyper-parameters, an environment value not understood — named;
 * HYBRID_SHARD over nodes of unequal sizes), UNSUPPORTED (HYBRID_SHARD
 * without shared-memory node groups), NO_MEMORY; with HYBRID_SHARD over
 * several nodes, the errors of connecting the replica group (TIMEOUT,
 * PEER, STORE). */
ACC_API acc_shard_t *acc_shard_new(acc_t *acc, acc_model_t *model, const acc_shard_config_t *cfg);
/* Removes the hooks, gathers the full parameters into the model's buffer
 * (collective with stage 3, so every rank must call it) and frees the
 * state. NULL-safe; clears *sh_p. */
ACC_API void acc_shard_destroy(acc_shard_t **sh_p);

/* model->forward_loss with the parameters gathered as the stage needs;
 * the loss of this rank's batch (NaN on failure: acc_last_error). */
ACC_API float acc_shard_forward_loss(acc_shard_t *sh, const float *x, const int64_t *labels,
                                     int batch, int training);
/* model->backward, then Accelerate's backward for the stage: the
 * accumulation scaling, and on sync micro-steps the reduction (all-reduce
 * for stages 0/1, reduce-scatter per unit for 2/3). Call once per
 * micro-step between acc_accumulate_begin and acc_accumulate_end.
 * Errors: INVALID_ARGUMENT (backward failed), the collectives'. */
ACC_API acc_result_t acc_shard_backward(acc_shard_t *sh);
/* On a sync micro-step: unscale (fp16), clip, update the owned
 * elements, zero the gradients, all-gather the parameters (stages 1/2).
 * Returns 1 when the parameters were updated, 0 when skipped (not a sync
 * micro-step, or fp16 inf/NaN on any rank), -1 on error. */
ACC_API int acc_shard_step(acc_shard_t *sh);
/* The global gradient norm of the last step (before clipping), NaN
 * before the first. */
ACC_API double acc_shard_grad_norm(const acc_shard_t *sh);
/* A negative lr is ignored. */
ACC_API void acc_shard_set_lr(acc_shard_t *sh, float lr);
/* Gather every unit into the model's buffer (FSDP's FULL_STATE_DICT
 * view: for acc_save_state, evaluation by hand); a no-op below stage 3.
 * Collective. The pages stay until the next forward releases them. */
ACC_API acc_result_t acc_shard_gather_params(acc_shard_t *sh);

/* Checkpoints (Accelerate's save_state under FSDP; FSDP's
 * StateDictType). `type`:
 *   ACC_FULL_STATE_DICT: the parameters (stage 3: gathered) and the
 *     optimizer state (each unit's owned slices all-gathered) are written
 *     by rank 0 as acc_save_state writes a DDP run's: DIR/nbfork_state.bin
 *     holds model.params and one optimizer over all parameters, so a
 *     plain acc_mlp + acc_adamw_new (or acc_sgd_new) over
 *     acc_mlp_num_params loads it with acc_load_state; rank R writes
 *     DIR/nbfork_rank<R>.bin (RNG, accumulation position, gradients).
 *     Peak extra memory on rank 0: the full parameters and optimizer
 *     state (as FSDP's rank0_only gather).
 *   ACC_SHARDED_STATE_DICT: nbfork_state.bin holds no parameters; rank R
 *     writes DIR/nbfork_shard<R>.bin: its owned parameter and optimizer
 *     slices, the unit table, its gradient buffer (a save inside an
 *     accumulation window resumes exactly). `nbfork merge-weights`
 *     (acc_shard_merge_weights) turns it into a FULL_STATE_DICT one.
 *     HYBRID_SHARD (as FSDP's hybrid sharded state dict): the nodes hold
 *     identical replicas, so R is the shard rank (0 .. ranks per node - 1)
 *     and shard R is written by the lowest rank of shard rank R (rank 0's
 *     node); every other rank writes DIR/nbfork_grads<rank>.bin (its
 *     gradient buffer only). On resume every node's rank of shard rank R
 *     reads shard R. The marks record the stage, world size, ranks per
 *     node and nodes.
 *   ACC_STATE_DICT_FROM_ENV: FSDP_STATE_DICT_TYPE (FULL_STATE_DICT, the
 *     default, or SHARDED_STATE_DICT; set by the launcher from
 *     fsdp_state_dict_type or %launch state_dict_type=).
 * Registered objects (acc_register_for_checkpointing) and the loss
 * scaler are saved either way. Collective. Errors: acc_save_state's;
 * INVALID_ARGUMENT (type or FSDP_STATE_DICT_TYPE not understood). */
typedef enum {
  ACC_STATE_DICT_FROM_ENV = -1,
  ACC_FULL_STATE_DICT = 0,
  ACC_SHARDED_STATE_DICT = 1
} acc_state_dict_type_t;
ACC_API acc_result_t acc_shard_save_state(acc_shard_t *sh, const char *dir, int type);
/* Restore a checkpoint of either type (recognized from its files) into
 * `sh`, collective. A SHARDED one needs the same world size, stage,
 * model and shard groups (HYBRID_SHARD's nodes of the same size, or
 * none) (INVALID_ARGUMENT naming both setups otherwise: resume from a
 * FULL one, or merge it first); a FULL one loads at any world size and
 * stage (each rank takes its owned slices) — at the saving world size
 * with the per-rank RNG states, accumulation position and gradients,
 * else without them (resume at a step boundary). At the same world size
 * a CPU run continues bit for bit. A plain acc_save_state checkpoint of
 * the same MLP and optimizer kind is a FULL one. Nothing changes unless
 * every rank can load. Errors: acc_load_state's. */
ACC_API acc_result_t acc_shard_load_state(acc_shard_t *sh, const char *dir);
/* `nbfork merge-weights CKPT OUT` (Accelerate's merge-weights): read the
 * SHARDED_STATE_DICT checkpoint CKPT (every nbfork_shard<R>.bin; one
 * replica's with HYBRID_SHARD) and
 * write into directory OUT the FULL_STATE_DICT checkpoint that
 * acc_shard_save_state would have written at the same point:
 * OUT/nbfork_state.bin (parameters, optimizer state, loss scaler,
 * registered objects) and OUT/nbfork_rank0.bin (rank 0's RNG states,
 * accumulation position and gradients), loadable by acc_load_state at
 * world size 1 or acc_shard_load_state at any. Not collective (`acc`
 * only carries the error). Errors: IO (a missing, corrupt or
 * inconsistent file, named), INVALID_ARGUMENT (CKPT is not sharded),
 * NO_MEMORY. */
ACC_API acc_result_t acc_shard_merge_weights(acc_t *acc, const char *ckpt, const char *out);

ACC_API int acc_shard_stage(const acc_shard_t *sh);
/* One line describing the setup ("ZeRO stage 3 (FULL_SHARD) on 4 ranks,
 * 3 units, 2.1 MB of 8.4 MB owned; offload: no-op on CPU"). */
ACC_API const char *acc_shard_describe(const acc_shard_t *sh);

/* Model-state bytes of this rank, measured: the resident pages
 * (mincore) of the model's parameter, gradient and half-shadow buffers
 * plus the shard buffers, the unit buffers of stages 2 and 3 (the one a prefetch is
 * filling counted whole) and the optimizer's state (a device model: the
 * device bytes of the same: its whole buffers while allocated, a device
 * staging buffer, not what is offloaded to host memory); not a host
 * model's collective staging (sh->buf, transport buffers). `peak` = the largest
 * value seen at the sample points (after acc_shard_new, each layer hook,
 * each backward and step); current otherwise. */
ACC_API size_t acc_shard_state_bytes(const acc_shard_t *sh, int peak);

/* Bytes per rank of parameters + gradients + optimizer state that the
 * runtime keeps for `num_params` parameters (largest unit `largest`
 * elements) on `world` ranks at `stage`: f32 master parameters and
 * gradients, AdamW's two moments (adamw != 0) or one SGD momentum:
 *   stage 0: (8 + k)Ψ      stage 1: 8Ψ + kΨ/N
 *   stage 2: 4Ψ + (4 + k)Ψ/N + 4L (N > 1)    (L = the largest unit)
 *   stage 3: (8 + k)Ψ/N + 4L                  (k = 8 AdamW, 4 SGD)
 * (4L: one unit buffer; stage 2's holds a layer's gradient until its
 * reduce-scatter and is kept between steps, stage 3's a layer's
 * parameters, then its gradient, given back after each backward; a
 * model without layer hooks holds the layer's gradient in its own
 * buffer instead, 4L(N-1)/N at stage 2)
 * plus 4Ψ for the half shadow with mixed precision below stage
 * 3, 4L at stage 3. Stage 3's prefetch on more than one rank adds the
 * second unit buffer (4L): the estimate is that of cfg.prefetch = 0.
 * With HYBRID_SHARD, N is the ranks of a node.
 * The ZeRO paper's mixed-precision figures (fp16 parameters and
 * gradients, f32 master and moments) are acc_shard_paper_bytes. */
ACC_API double acc_shard_estimate_bytes(size_t num_params, size_t largest, int world, int stage,
                                        int adamw, int mixed);
/* Rajbhandari et al. 2020, Adam with mixed precision: 16Ψ, 4Ψ + 12Ψ/N,
 * 2Ψ + 14Ψ/N, 16Ψ/N for stages 0..3. */
ACC_API double acc_shard_paper_bytes(size_t num_params, int world, int stage);

#ifdef __cplusplus
}
#endif

#endif /* NBF_SHARD_H */
