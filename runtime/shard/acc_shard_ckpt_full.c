/*
 * acc_shard_ckpt_full.c — FSDP's FULL_STATE_DICT of a sharded run
 * (nbf_shard.h, acc_shard_save_state / acc_shard_load_state in
 * acc_shard_ckpt.c): the parameters gathered (stage 3) and the optimizer's
 * moments all-gathered into one optimizer over all parameters on rank 0,
 * written by acc_save_state in its own format (so DDP resumes from it),
 * with the mark registered; a load at any world size takes every rank's
 * owned slices from it. A device MLP's parameters go through
 * acc_save_state's device copy, a custom device model's through a host
 * copy registered as "nbfork.params", the moments through Gloo on host
 * staging.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_shard_ckpt_internal.h"

#define PARAMS_ITEM "nbfork.params" /* a model without layer sizes */

/* Start of rank r's slice within a unit. */
static size_t slice_start(int stage, int r, size_t s) {
  return stage ? (size_t)r * s : 0;
}

/* An optimizer over all of the model's parameters with the shard's kind
 * and settings (the FULL state dict's layout). */
static acc_optim_t *full_optim(acc_shard_t *sh) {
  const acc_shard_config_t *c = &sh->cfg;
  acc_model_t *m = sh->model;
  return c->adamw
             ? acc_adamw_new(m->params, m->grads, m->num_params, c->lr, c->beta1, c->beta2, c->eps,
                             c->weight_decay)
             : acc_sgd_new(m->params, m->grads, m->num_params, c->lr, c->momentum, c->weight_decay);
}

/* Unit u's moment `which` (host memory, also for a device model) of
 * every rank into full + u->off (rank 0 only; full NULL elsewhere),
 * through the host buffer `stage` (sworld * max s_u floats). Collective
 * above stage 0. */
static acc_result_t gather_state(acc_shard_t *sh, const acc__shard_unit_t *u, int which,
                                 float *full, float *stage) {
  const float *own = u->own ? acc__shard_ck_own_state(sh, u, which) : NULL;
  if (sh->stage == 0) {
    if (full && own)
      memcpy(full + u->off, own, u->n * sizeof(float));
    return ACC_OK;
  }
  float *mine = stage + (size_t)sh->srank * u->s;
  memset(mine, 0, u->s * sizeof(float));
  if (own)
    memcpy(mine, own, u->own * sizeof(float));
  ACC_CHECK(acc__shard_all_gather(sh, mine, stage, u->s));
  if (full)
    memcpy(full + u->off, stage, u->n * sizeof(float));
  return ACC_OK;
}

/* Rank 0's optimizer over all parameters holding the gathered state. */
static acc_result_t gather_optim(acc_shard_t *sh, const acc__ckpt_optim_rec_t *o,
                                 acc_optim_t **full) {
  acc__optim_view_t fv = {0};
  if (sh->rank == 0) {
    if (!(*full = full_optim(sh)))
      return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
    ACC_CHECK(acc__optim_view(sh->acc, *full, &fv));
    acc__optim_hparams_t hp = {o->lr,  o->momentum, o->weight_decay, o->beta1, o->beta2,
                               o->eps, o->t};
    acc__optim_restore(*full, &hp);
  }
  /* the moments are host memory: so is their staging (sh->buf is a
   * device model's device memory) */
  float *stage = sh->buf; /* NULL at stage 0, which needs none */
  if (sh->dev && !(stage = malloc((sh->buf_n ? sh->buf_n : 1) * sizeof(float))))
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
  acc_result_t r = ACC_OK;
  for (int w = 1; w <= 2 && r == ACC_OK; w++) {
    if ((w == 1 && !o->has_m) || (w == 2 && !o->has_v))
      continue;
    for (int i = 0; r == ACC_OK && i < sh->nunits; i++)
      r = gather_state(sh, &sh->units[i], w, sh->rank == 0 ? (w == 1 ? fv.m : fv.v) : NULL, stage);
  }
  if (stage != sh->buf)
    free(stage);
  return r;
}

/* A custom model's full parameters as the checkpoint's PARAMS_ITEM
 * (registered): its buffer, or on a device a host copy (*host, the
 * caller frees it), filled from the device now when `save`, copied up
 * by the caller after a load. */
static acc_result_t params_item(acc_shard_t *sh, float **host, int save) {
  acc_model_t *m = sh->model;
  float *p = m->params;
  *host = NULL;
  if (m->mlp)
    return ACC_OK; /* acc_save_state writes the toolkit MLP itself */
  if (sh->dev) {
    if (!(p = *host = malloc(m->num_params * sizeof(float))))
      return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY,
                            "checkpoint: no host memory for a copy of the %zu parameters",
                            m->num_params);
    if (save)
      ACC_CHECK(acc__shard_host_copy(sh, p, m->params, m->num_params, 1));
  }
  return acc_register_for_checkpointing(sh->acc, PARAMS_ITEM, p, m->num_params * sizeof(float));
}

acc_result_t acc__shard_save_full(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  acc_model_t *m = sh->model;
  acc__ckpt_optim_rec_t o;
  ACC_CHECK(acc_shard_gather_params(sh));           /* stage 3: the full parameters */
  acc_result_t r = acc__shard_ck_optim_rec(sh, &o); /* rank 0 owns the start of every unit */
  acc_optim_t *full = NULL;
  if (r == ACC_OK)
    r = gather_optim(sh, &o, &full);
  r = acc__ckpt_agree(acc, r, "acc_shard_save_state", "");
  mark_t mk = acc__shard_ck_mark(sh, ACC_FULL_STATE_DICT);
  float *hp = NULL; /* a custom device model's parameters, on the host */
  if (r == ACC_OK)
    r = params_item(sh, &hp, 1);
  if (r == ACC_OK)
    r = acc_register_for_checkpointing(acc, ACC__SHARD_MARK, &mk, sizeof mk);
  if (r == ACC_OK)
    r = acc_save_state(acc, dir, m->mlp, full);
  acc__unregister_for_checkpointing(acc, ACC__SHARD_MARK);
  acc__unregister_for_checkpointing(acc, PARAMS_ITEM);
  free(hp);
  acc_optim_destroy(&full);
  if (r == ACC_OK) { /* the marker says FULL; an older SHARDED save's file is stale */
    char p[4200];
    acc__shard_ck_shard_path(p, sizeof p, dir, sh->rank);
    unlink(p);
    acc__shard_ck_grads_path(p, sizeof p, dir, sh->rank);
    unlink(p);
  }
  return r;
}

/* ---- loading ---------------------------------------------------------- */

/* Stage 3: the owned slices of the model's (full) buffer into P, then its
 * pages released; stages 1/2 keep the full buffer. */
static acc_result_t take_params(acc_shard_t *sh) {
  if (sh->stage < 3)
    return ACC_OK;
  for (int i = 0; i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    ACC_CHECK(acc__shard_copy(sh, sh->P + u->soff,
                              sh->model->params + u->off + (size_t)sh->srank * u->s, u->own));
  }
  sh->gathered = 1;
  return acc__shard_release_all(sh);
}

acc_result_t acc__shard_load_full(acc_shard_t *sh, const char *dir, const mark_t *mk, int found) {
  acc_t *acc = sh->acc;
  acc_model_t *m = sh->model;
  acc_optim_t *full = full_optim(sh);
  if (!full)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_shard_load_state: no memory");
  float *hp = NULL; /* a custom device model's parameters, on the host */
  acc_result_t r = params_item(sh, &hp, 0);
  /* the per-rank files belong to the saving world size only */
  int rank_files = !found || mk->world == sh->world;
  if (r == ACC_OK)
    r = acc__load_state_ex(acc, dir, m->mlp, full, rank_files);
  acc__unregister_for_checkpointing(acc, PARAMS_ITEM);
  if (r == ACC_OK && hp)
    r = acc__shard_host_copy(sh, hp, m->params, m->num_params, 0);
  free(hp);
  acc__optim_view_t fv;
  if (r == ACC_OK)
    r = acc__optim_view(acc, full, &fv);
  for (int i = 0; r == ACC_OK && i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    if (!u->opt)
      continue;
    size_t at = u->off + slice_start(sh->stage, sh->srank, u->s);
    acc__optim_view_t uv;
    if ((r = acc__optim_view(acc, u->opt, &uv)) != ACC_OK)
      break;
    if (uv.m && fv.m)
      memcpy(uv.m, fv.m + at, u->own * sizeof(float));
    if (uv.v && fv.v)
      memcpy(uv.v, fv.v + at, u->own * sizeof(float));
    acc__optim_restore(u->opt, &fv.hp);
  }
  if (r == ACC_OK)
    r = take_params(sh);
  acc_optim_destroy(&full);
  return r;
}
