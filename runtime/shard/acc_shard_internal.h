/*
 * acc_shard_internal.h — the sharding state shared by acc_shard.c (set
 * up, environment, memory accounting) and acc_shard_run.c (gathers,
 * reductions, the step). The layout is nbf_shard.h's.
 */
#ifndef ACC_SHARD_INTERNAL_H
#define ACC_SHARD_INTERNAL_H

#include "acc_internal.h"
#include "nbf_shard.h"

typedef struct {
  size_t off, n;    /* the unit in the model's flat buffers (elements) */
  size_t s;         /* elements per rank after padding to N·s (stage 0: n) */
  size_t own;       /* owned elements of this rank: clamp(n - r·s, 0, s) */
  size_t soff;      /* offset of the owned block in P, G (stage 3) */
  acc_optim_t *opt; /* over the owned elements; NULL when own == 0 */
} acc__shard_unit_t;

struct acc_shard {
  acc_t *acc;
  acc_model_t *model;
  acc_shard_config_t cfg;
  int stage, rank, world;
  int nunits;
  acc__shard_unit_t *units;
  float *P, *G; /* stage 3: the owned parameters and gradients, S each */
  size_t S;
  float *buf; /* communication staging: N · max s_u */
  size_t buf_n;
  int hooked;   /* the toolkit MLP's layer hooks are installed */
  int reduced;  /* this backward's hooks reduced every unit */
  int gathered; /* stage 3: every unit is in the model's buffer */
  double grad_norm;
  size_t peak;
  char desc[256];
};

/* The owned parameters / gradients of unit u (own elements). */
float *acc__shard_own_params(acc_shard_t *sh, const acc__shard_unit_t *u);
float *acc__shard_own_grads(acc_shard_t *sh, const acc__shard_unit_t *u);
/* Zero n floats at p and give their whole pages back to the OS. */
void acc__shard_release(float *p, size_t n);
/* Record the current model-state bytes into the peak. */
void acc__shard_sample(acc_shard_t *sh);
/* All-gather unit u into the model's parameter buffer. */
acc_result_t acc__shard_gather_unit(acc_shard_t *sh, const acc__shard_unit_t *u);
/* The layer hook of a toolkit MLP (acc__mlp_unit_hook_fn). */
int acc__shard_mlp_hook(void *user, int phase, int layer, size_t offset, size_t n);

#endif /* ACC_SHARD_INTERNAL_H */
