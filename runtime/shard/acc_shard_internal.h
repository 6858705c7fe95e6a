/*
 * acc_shard_internal.h — the sharding state shared by acc_shard.c (set
 * up, environment, memory accounting) and acc_shard_run.c (gathers,
 * reductions, the step). The layout is nbf_shard.h's.
 */
#ifndef ACC_SHARD_INTERNAL_H
#define ACC_SHARD_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "acc_internal.h"
#include "nbf_shard.h"

typedef struct {
  size_t off, n;    /* the unit in the model's flat buffers (elements) */
  size_t s;         /* elements per rank after padding to N·s (stage 0: n) */
  size_t own;       /* owned elements of this rank: clamp(n - r·s, 0, s) */
  size_t soff;      /* offset of the owned block in P, G (stage 3) */
  acc_optim_t *opt; /* over the owned elements; NULL when own == 0 */
} acc__shard_unit_t;

typedef struct acc__shard_prefetch acc__shard_prefetch_t;

struct acc_shard {
  acc_t *acc;
  acc_model_t *model;
  acc_shard_config_t cfg;
  int stage, rank, world;
  /* the shard group: this rank's index and the group's size (the world;
   * with HYBRID_SHARD the node's ranks), and the groups (nodes) */
  int srank, sworld, ngroups;
  acc__shard_prefetch_t *pf; /* stage 3 prefetch (acc_shard_prefetch.c) or NULL */
  int nunits;
  acc__shard_unit_t *units;
  float *P, *G; /* stage 3: the owned parameters and gradients, S each (G: a lean stage 2's too) */
  size_t S;
  float *buf; /* communication staging: N · max s_u */
  size_t buf_n;
  /* stages 2 and 3 with layer hooks: the unit buffers (buf_n floats each; the
   * second only with stage 3's prefetch) a layer is gathered into and its gradient
   * computed in, reused layer after layer (FSDP's all-gather output
   * buffer) and given back to the OS after each backward (host stage
   * 3's; a device's is one, device memory, kept; stage 2's is kept);
   * ubuf[ucur] is the one in use, holding the parameters of unit
   * uheld (-1: none) */
  float *ubuf[2];
  int ucur, uheld;
  /* the layer whose gradient the backward computes in ubuf[ucur] (-1:
   * none): stage 3's, and stage 2's, which has one unit buffer for this
   * only, kept from step to step */
  int ugrad;
  int dev; /* the model's buffers are device memory (acc_shard_dev.c) */
  /* a device MLP at stage 3, or at stage 2 on more than one rank: the
   * model's full device buffers (stage 2: the gradients' only; its owned
   * gradients are in G) are freed while sharded (the layers read and
   * write the unit buffer), allocated again only to gather the whole
   * model (acc_shard_gather_params, checkpoints) or to accumulate
   * gradients over micro-steps; sh->buf is then ubuf[0] */
  int lean;
  /* offload of a device model (cfg.offload; acc_shard_offload.c): the
   * optimizers step on the host over hP (the f32 master of the owned
   * elements) and hG (the owned gradients copied from the device), S
   * floats each at the units' soff; at stage 3 the parameter shards are
   * host memory (hostP: hP is P) */
  int offload, hostP;
  float *hP, *hG;
  int hooked;   /* the toolkit MLP's layer hooks are installed */
  int reduced;  /* this backward's hooks reduced every unit */
  int gathered; /* stage 3: every unit is in the model's buffer */
  double grad_norm;
  size_t peak;
  char desc[384];
};

/* Checkpoints (acc_shard_ckpt*.c, acc_shard_merge.c): the registered
 * object ACC__SHARD_MARK of the shared file (its section there is
 * "user." ACC__SHARD_MARK), and a unit's record in a shard file. */
#define ACC__SHARD_MARK "nbfork.state_dict"
typedef struct {
  int32_t type, world, stage, nunits; /* acc_state_dict_type_t, ... */
  uint64_t num_params;
  /* the shard group's size and the groups (HYBRID_SHARD: ranks per node,
   * nodes; else world, 1): a SHARDED checkpoint holds sworld shards */
  int32_t sworld, ngroups;
} acc__shard_mark_t;
/* The mark in section `name` of f into *mk: 1, or 0 when there is none
 * or its size fits no version (the first, without sworld / ngroups, was
 * 24 bytes: read as one group of the world). */
static inline int acc__shard_mark_get(const acc__ckpt_file_t *f, const char *name,
                                      acc__shard_mark_t *mk) {
  size_t b;
  const void *d = acc__ckpt_find(f, name, &b);
  if (!d || (b != sizeof *mk && b != offsetof(acc__shard_mark_t, sworld)))
    return 0;
  *mk = (acc__shard_mark_t){0};
  memcpy(mk, d, b);
  if (b < sizeof *mk)
    mk->sworld = mk->world, mk->ngroups = 1;
  return 1;
}
typedef struct {
  uint64_t off, n, s, own;
} acc__shard_unit_rec_t;

/* The owned parameters / gradients of unit u (own elements). */
float *acc__shard_own_params(acc_shard_t *sh, const acc__shard_unit_t *u);
float *acc__shard_own_grads(acc_shard_t *sh, const acc__shard_unit_t *u);
/* Zero n floats at p and give their whole pages back to the OS. */
void acc__shard_release(float *p, size_t n);
/* Host or device memory (acc_shard_dev.c; sh->dev): n floats copied,
 * zeroed, released (host: pages given back; device: zeroed), allocated
 * zeroed (NULL with the error set), freed; the device calls are
 * asynchronous on the accelerator's stream. On a device, the offloaded
 * parameter shards (sh->hostP: within P) are host memory: a copy from or
 * to them crosses to the device. The errors are set in acc. */
acc_result_t acc__shard_copy(acc_shard_t *sh, float *dst, const float *src, size_t n);
acc_result_t acc__shard_zero(acc_shard_t *sh, float *p, size_t n);
acc_result_t acc__shard_drop(acc_shard_t *sh, float *p, size_t n);
float *acc__shard_alloc(acc_shard_t *sh, size_t n);
void acc__shard_free(acc_shard_t *sh, float **p);
/* A lean device MLP's full parameter (what 0) or gradient (1) device
 * buffer allocated zeroed (keep 1; nothing when it exists) or freed
 * (keep 0), the model's pointer (sh->model->params / grads) following;
 * ACC_OK and nothing to do unless sh->lean, for stage 2's parameters
 * (never freed) or to free a buffer already freed. */
acc_result_t acc__shard_whole(acc_shard_t *sh, int what, int keep);
/* Offload (acc_shard_offload.c; nothing unless sh->offload). new: the
 * host buffers, hP filled from the device (after layout, before the
 * optimizers); pull: hP again from the owned parameters on the device
 * (after a checkpoint's load); free: NULL-safe. opt_params / opt_grads:
 * what unit u's optimizer updates (hP, hG when offloaded, else the owned
 * elements). step: the owned gradients to the host, every optimizer's
 * step there, the updated parameters back (not at stage 3: P is host
 * memory). */
acc_result_t acc__shard_offload_new(acc_shard_t *sh);
acc_result_t acc__shard_offload_pull(acc_shard_t *sh);
void acc__shard_offload_free(acc_shard_t *sh);
float *acc__shard_opt_params(acc_shard_t *sh, const acc__shard_unit_t *u);
float *acc__shard_opt_grads(acc_shard_t *sh, const acc__shard_unit_t *u);
acc_result_t acc__shard_offload_step(acc_shard_t *sh);
/* Offload: n floats between host and device memory on the accelerator's
 * stream (to_device 1: src is host memory); waiting for that stream. */
acc_result_t acc__shard_offload_copy(acc_shard_t *sh, float *dst, const float *src, size_t n,
                                     int to_device);
acc_result_t acc__shard_offload_wait(acc_shard_t *sh);
/* Checkpoints: n floats between a host buffer and `buf` (the model's or
 * the shards'; to_host 1: buf -> host). On a device: synchronous, after
 * the device's pending work (acc_optim_cuda_copy). */
acc_result_t acc__shard_host_copy(acc_shard_t *sh, float *host, float *buf, size_t n, int to_host);
/* The step's pieces over the owned gradients: unscale by inv (1 when an
 * element was inf/NaN, 0 when none, -1 on a device error); the f64 sum
 * of squares; g *= coef. */
int acc__shard_unscale(acc_shard_t *sh, float inv);
acc_result_t acc__shard_owned_sumsq(acc_shard_t *sh, double *ss);
acc_result_t acc__shard_owned_scale(acc_shard_t *sh, float coef);
/* Record the current model-state bytes into the peak. */
void acc__shard_sample(acc_shard_t *sh);
/* All-gather unit u into the model's parameter buffer (staging through
 * sh->buf). */
acc_result_t acc__shard_gather_unit(acc_shard_t *sh, const acc__shard_unit_t *u);
/* All-gather unit u into dst (sworld * u->s floats: the unit, then its
 * padding): a unit buffer (stage 3's hooks, the prefetch helper). */
acc_result_t acc__shard_gather_into(acc_shard_t *sh, const acc__shard_unit_t *u, float *dst);
/* Whether unit u has no padding (n = sworld * s): then it is gathered
 * into and reduce-scattered from the model's buffer in place. */
int acc__shard_unpadded(const acc_shard_t *sh, const acc__shard_unit_t *u);
/* All-gather `count` floats of each member of the shard group (the world,
 * or the node with HYBRID_SHARD) into recv, member-major. */
acc_result_t acc__shard_all_gather(acc_shard_t *sh, const float *send, float *recv, size_t count);
/* Reduce-scatter (AVG) sworld * count floats at send into this rank's
 * count at recv (recv may be send + srank * count): over the world, or
 * with HYBRID_SHARD summed within the node and all-reduced over the
 * replica group (FSDP's HYBRID_SHARD: 1/members of the unit crosses
 * between nodes per rank). */
acc_result_t acc__shard_reduce_scatter(acc_shard_t *sh, const float *send, float *recv,
                                       size_t count);

/* Stage 3 prefetch (acc_shard_prefetch.c): a helper thread that gathers
 * one unit at a time while the caller computes. new: NULL on failure
 * (acc->err set). start: gather unit `u` into `dst` (a unit buffer;
 * nothing else may be pending). wait: until the pending gather, if any,
 * is done; its result (the helper's error is in acc->err; reported
 * once); *unit_out (may be NULL) = the unit the last gather left in its
 * buffer, or -1; take = 1 forgets it (the caller uses or drops it). job:
 * the unit handed over and not waited for yet, or -1 (for the memory
 * accounting). Only one collective runs at a time: the caller waits
 * before its own. NULL-safe. */
acc__shard_prefetch_t *acc__shard_pf_new(acc_shard_t *sh);
void acc__shard_pf_destroy(acc__shard_prefetch_t **pf_p);
void acc__shard_pf_start(acc__shard_prefetch_t *pf, int u, float *dst);
acc_result_t acc__shard_pf_wait(acc__shard_prefetch_t *pf, int *unit_out, int take);
int acc__shard_pf_job(acc__shard_prefetch_t *pf);
/* Stage 3: drop a prefetched unit, give the unit buffers' pages back,
 * and release every unit's parameter pages when all were gathered (a
 * device model's zeroed; the error of a device call). Stage 2 of a lean
 * device MLP: its full gradient buffer freed unless it accumulates. */
acc_result_t acc__shard_release_all(acc_shard_t *sh);
/* The layer hook of a toolkit MLP (acc__mlp_unit_hook_fn). */
int acc__shard_mlp_hook(void *user, int phase, int layer, size_t offset, size_t n);

#endif /* ACC_SHARD_INTERNAL_H */
