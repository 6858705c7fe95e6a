/*
 * acc_shard_ckpt.c — checkpoints of a sharded run (nbf_shard.h): FSDP's
 * FULL_STATE_DICT (gathered, written by rank 0 in acc_save_state's
 * format) and SHARDED_STATE_DICT (each rank its owned slices, in
 * nbfork_shard<R>.bin), the load of either, and merge-weights.
 *
 * The shared file nbfork_state.bin of both carries a registered object
 * "nbfork.state_dict" (mark_t: type, world size, stage) so a load knows
 * what it reads; a plain acc_save_state checkpoint has none and is read
 * as a FULL one.
 *
 * nbfork_shard<R>.bin, R the shard rank (acc_checkpoint.c's format,
 * kind 2): sections shard.meta (mark_t), shard.units (unit_rec_t per
 * unit), shard.params (the owned elements of every unit, in unit order),
 * optim (acc__ckpt_optim_rec_t with n = all parameters), shard.m /
 * shard.v (owned moments, when the optimizer has them), model.grads (the
 * writing rank's whole gradient buffer), shard.rank (that rank, int32),
 * model.sizes (a toolkit MLP's layer sizes).
 *
 * HYBRID_SHARD (as FSDP's hybrid state dict): every node holds the same
 * replica, so one replica's shards are the checkpoint. Shard R is written
 * by the lowest rank of shard rank R (rank 0's node in practice) and read
 * by every rank of shard rank R; the other ranks write only their
 * gradients (the local sums of an unfinished accumulation window) into
 * nbfork_grads<rank>.bin (shard.meta, model.grads). The marks record the
 * shard group's size and the nodes, so a resume under another layout is
 * refused by name.
 *
 * A device model (a toolkit MLP or a custom acc_model_t on a GPU): the
 * same files, written from and read into host copies — the MLP's
 * parameters through acc_save_state's device copy (FULL), a custom
 * model's through a host copy registered as "nbfork.params" (FULL), the
 * owned slices and the gradients through acc__shard_host_copy (SHARDED),
 * the optimizer's moments through its host buffers (acc__optim_view;
 * uploaded at the next step after a load), the FULL moments gathered
 * through Gloo on host staging. Offloaded shards are host memory
 * already; after a load the offloaded master copy is refreshed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acc_shard_internal.h"
#include "nbf_param.h"

#define MARK "nbfork.state_dict"
#define PARAMS_ITEM "nbfork.params" /* a model without layer sizes (FULL) */

typedef acc__shard_mark_t mark_t;

typedef acc__shard_unit_rec_t unit_rec_t;

static void shard_path(char *out, size_t len, const char *dir, int rank) {
  snprintf(out, len, "%s/nbfork_shard%d.bin", dir, rank);
}

/* HYBRID_SHARD: a rank's gradients when another rank wrote its shard. */
static void grads_path(char *out, size_t len, const char *dir, int rank) {
  snprintf(out, len, "%s/nbfork_grads%d.bin", dir, rank);
}

static mark_t mark_of(const acc_shard_t *sh, int type) {
  return (mark_t){type,       sh->world,  sh->stage, sh->nunits, sh->model->num_params,
                  sh->sworld, sh->ngroups};
}

static acc_result_t type_from_env(acc_t *acc, int *type) {
  const char *v = nbf_param_str(NBF_P_FSDP_STATE_DICT_TYPE);
  /* Accelerate's numbers: 1 FULL, 2 LOCAL, 3 SHARDED */
  if (!v || !*v || !strcasecmp(v, "FULL_STATE_DICT") || !strcmp(v, "1"))
    *type = ACC_FULL_STATE_DICT;
  else if (!strcasecmp(v, "SHARDED_STATE_DICT") || !strcmp(v, "3"))
    *type = ACC_SHARDED_STATE_DICT;
  else
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "FSDP_STATE_DICT_TYPE=%s: expected FULL_STATE_DICT or "
                          "SHARDED_STATE_DICT (LOCAL_STATE_DICT is not implemented)",
                          v);
  return ACC_OK;
}

static size_t own_total(const acc_shard_t *sh) {
  size_t t = 0;
  for (int i = 0; i < sh->nunits; i++)
    t += sh->units[i].own;
  return t;
}

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

/* The optimizer record of this rank (hyper-parameters, step count) with
 * n = all parameters; from the first unit it owns part of. */
static acc_result_t optim_rec(acc_shard_t *sh, acc__ckpt_optim_rec_t *o) {
  const acc_shard_config_t *c = &sh->cfg;
  *o = (acc__ckpt_optim_rec_t){c->adamw,
                               c->adamw || c->momentum > 0,
                               c->adamw,
                               0,
                               sh->model->num_params,
                               c->lr,
                               c->momentum,
                               c->weight_decay,
                               c->beta1,
                               c->beta2,
                               c->eps,
                               0};
  for (int i = 0; i < sh->nunits; i++) {
    if (!sh->units[i].opt)
      continue;
    acc__optim_view_t v;
    ACC_CHECK(acc__optim_view(sh->acc, sh->units[i].opt, &v));
    *o = (acc__ckpt_optim_rec_t){
        v.kind,   v.m != NULL,   v.v != NULL,       0,          sh->model->num_params,
        v.hp.lr,  v.hp.momentum, v.hp.weight_decay, v.hp.beta1, v.hp.beta2,
        v.hp.eps, v.hp.t};
    break;
  }
  return ACC_OK;
}

/* which: 0 parameters, 1 first moment (m), 2 second (v) of unit u's
 * owned elements; NULL when the optimizer has no such buffer. */
static float *own_state(acc_shard_t *sh, const acc__shard_unit_t *u, int which) {
  if (which == 0)
    return acc__shard_own_params(sh, u);
  acc__optim_view_t v;
  if (!u->opt || acc__optim_view(sh->acc, u->opt, &v) != ACC_OK)
    return NULL;
  return which == 1 ? v.m : v.v;
}

/* ---- SHARDED_STATE_DICT ---------------------------------------------- */

static acc_result_t write_shard(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  acc_model_t *m = sh->model;
  size_t tot = own_total(sh), nu = (size_t)sh->nunits;
  acc__ckpt_optim_rec_t o;
  ACC_CHECK(optim_rec(sh, &o));
  mark_t mk = mark_of(sh, ACC_SHARDED_STATE_DICT);
  int32_t me = sh->rank;
  float *st[3] = {malloc(tot * sizeof(float) + 4), o.has_m ? malloc(tot * sizeof(float) + 4) : NULL,
                  o.has_v ? malloc(tot * sizeof(float) + 4) : NULL};
  unit_rec_t *ur = malloc(nu * sizeof *ur);
  acc_result_t r = ACC_OK;
  if (!st[0] || (o.has_m && !st[1]) || (o.has_v && !st[2]) || !ur)
    r = acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
  float *grads = sh->dev ? malloc(m->num_params * sizeof(float)) : m->grads;
  if (r == ACC_OK && !grads)
    r = acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
  if (r == ACC_OK && grads != m->grads) /* a device model's: a host copy */
    r = acc__shard_host_copy(sh, grads, m->grads, m->num_params, 1);
  for (size_t i = 0, at = 0; r == ACC_OK && i < nu; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    ur[i] = (unit_rec_t){u->off, u->n, u->s, u->own};
    for (int w = 0; r == ACC_OK && w < 3; w++) {
      float *src = st[w] && u->own ? own_state(sh, u, w) : NULL;
      if (src && w == 0) /* the parameters: host or device memory */
        r = acc__shard_host_copy(sh, st[w] + at, src, u->own, 1);
      else if (src)
        memcpy(st[w] + at, src, u->own * sizeof(float));
    }
    at += u->own;
  }
  int nl = 0;
  const int *sizes = m->mlp ? acc__mlp_sizes(m->mlp, &nl) : NULL;
  acc__ckpt_sec_t secs[9] = {{"shard.meta", &mk, sizeof mk},
                             {"shard.units", ur, nu * sizeof *ur},
                             {"shard.params", st[0], tot * sizeof(float)},
                             {"optim", &o, sizeof o},
                             {"model.grads", grads, m->num_params * sizeof(float)},
                             {"shard.rank", &me, sizeof me}};
  int n = 6;
  if (st[1])
    secs[n++] = (acc__ckpt_sec_t){"shard.m", st[1], tot * sizeof(float)};
  if (st[2])
    secs[n++] = (acc__ckpt_sec_t){"shard.v", st[2], tot * sizeof(float)};
  if (sizes)
    secs[n++] = (acc__ckpt_sec_t){"model.sizes", sizes, (size_t)(nl + 1) * sizeof(int)};
  char name[64];
  snprintf(name, sizeof name, "nbfork_shard%d.bin", sh->srank);
  if (r == ACC_OK)
    r = acc__ckpt_write(acc, dir, name, 2, (uint32_t)sh->srank, secs, n);
  for (int w = 0; w < 3; w++)
    free(st[w]);
  free(ur);
  if (grads != m->grads)
    free(grads);
  return r;
}

/* HYBRID_SHARD, a rank that does not write its shard: its gradients. */
static acc_result_t write_grads(acc_shard_t *sh, const char *dir) {
  mark_t mk = mark_of(sh, ACC_SHARDED_STATE_DICT);
  acc__ckpt_sec_t secs[2] = {
      {"shard.meta", &mk, sizeof mk},
      {"model.grads", sh->model->grads, sh->model->num_params * sizeof(float)}};
  char name[64];
  snprintf(name, sizeof name, "nbfork_grads%d.bin", sh->rank);
  return acc__ckpt_write(sh->acc, dir, name, 2, (uint32_t)sh->rank, secs, 2);
}

/* Whether this rank writes its shard: the lowest rank of its shard rank
 * (every rank without HYBRID_SHARD). Collective with HYBRID_SHARD. */
static acc_result_t writes_shard(acc_shard_t *sh, int *writes) {
  *writes = 1;
  if (sh->ngroups == 1)
    return ACC_OK;
  int64_t mine = sh->srank, *all = malloc((size_t)sh->world * sizeof *all);
  if (!all)
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
  acc_result_t r = acc_all_gather(sh->acc, &mine, all, 1, ACC_I64);
  for (int q = 0; r == ACC_OK && q < sh->rank; q++)
    if (all[q] == mine)
      *writes = 0;
  free(all);
  return r;
}

static acc_result_t save_sharded(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  mark_t mk = mark_of(sh, ACC_SHARDED_STATE_DICT);
  int writes;
  ACC_CHECK(writes_shard(sh, &writes));
  ACC_CHECK(acc_register_for_checkpointing(acc, MARK, &mk, sizeof mk));
  acc_result_t r = acc_save_state(acc, dir, NULL, NULL); /* scaler, objects, RNG, accumulation */
  acc__unregister_for_checkpointing(acc, MARK);
  ACC_CHECK(r);
  r = writes ? write_shard(sh, dir) : write_grads(sh, dir);
  return acc__ckpt_agree(acc, r, "acc_shard_save_state", "");
}

/* ---- FULL_STATE_DICT -------------------------------------------------- */

/* Unit u's moment `which` (host memory, also for a device model) of
 * every rank into full + u->off (rank 0 only; full NULL elsewhere),
 * through the host buffer `stage` (sworld * max s_u floats). Collective
 * above stage 0. */
static acc_result_t gather_state(acc_shard_t *sh, const acc__shard_unit_t *u, int which,
                                 float *full, float *stage) {
  const float *own = u->own ? own_state(sh, u, which) : NULL;
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

static acc_result_t save_full(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  acc_model_t *m = sh->model;
  acc__ckpt_optim_rec_t o;
  ACC_CHECK(acc_shard_gather_params(sh)); /* stage 3: the full parameters */
  acc_result_t r = optim_rec(sh, &o);     /* rank 0 owns the start of every unit */
  acc_optim_t *full = NULL;
  if (r == ACC_OK)
    r = gather_optim(sh, &o, &full);
  r = acc__ckpt_agree(acc, r, "acc_shard_save_state", "");
  mark_t mk = mark_of(sh, ACC_FULL_STATE_DICT);
  float *hp = NULL; /* a custom device model's parameters, on the host */
  if (r == ACC_OK)
    r = params_item(sh, &hp, 1);
  if (r == ACC_OK)
    r = acc_register_for_checkpointing(acc, MARK, &mk, sizeof mk);
  if (r == ACC_OK)
    r = acc_save_state(acc, dir, m->mlp, full);
  acc__unregister_for_checkpointing(acc, MARK);
  acc__unregister_for_checkpointing(acc, PARAMS_ITEM);
  free(hp);
  acc_optim_destroy(&full);
  if (r == ACC_OK) { /* the marker says FULL; an older SHARDED save's file is stale */
    char p[4200];
    shard_path(p, sizeof p, dir, sh->rank);
    unlink(p);
    grads_path(p, sizeof p, dir, sh->rank);
    unlink(p);
  }
  return r;
}

/* A lean device MLP (stage 3; its full device buffers freed while
 * sharded) after a checkpoint: the parameters' buffer freed again unless
 * gathered, the gradients' unless it held an accumulation window before
 * (had_grads) or accumulates; r passed through. */
static acc_result_t lean_after(acc_shard_t *sh, int had_grads, acc_result_t r) {
  acc_result_t rr = sh->gathered ? ACC_OK : acc__shard_whole(sh, 0, 0);
  if (rr == ACC_OK && !had_grads && sh->acc->accum_steps == 1)
    rr = acc__shard_whole(sh, 1, 0);
  return r != ACC_OK ? r : rr;
}

acc_result_t acc_shard_save_state(acc_shard_t *sh, const char *dir, int type) {
  if (!sh)
    return ACC_ERR_INVALID_ARGUMENT;
  if (type == ACC_STATE_DICT_FROM_ENV)
    ACC_CHECK(type_from_env(sh->acc, &type));
  if (type != ACC_SHARDED_STATE_DICT && type != ACC_FULL_STATE_DICT)
    return acc__set_error(sh->acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_shard_save_state: type %d is neither ACC_FULL_STATE_DICT nor "
                          "ACC_SHARDED_STATE_DICT",
                          type);
  const int had = sh->model->grads != NULL; /* the file holds the gradients */
  ACC_CHECK(acc__shard_whole(sh, 1, 1));
  acc_result_t r = type == ACC_SHARDED_STATE_DICT ? save_sharded(sh, dir) : save_full(sh, dir);
  return lean_after(sh, had, r);
}

/* ---- loading ---------------------------------------------------------- */

/* The marker of DIR's shared file, read by rank 0 and broadcast; *found 0
 * for a plain acc_save_state checkpoint (or an unreadable file: the load
 * names it). */
static acc_result_t read_mark(acc_shard_t *sh, const char *dir, mark_t *mk, int *found) {
  int64_t w[1 + (sizeof *mk + 7) / 8] = {0};
  if (sh->rank == 0) {
    char p[4200];
    snprintf(p, sizeof p, "%s/nbfork_state.bin", dir);
    acc__ckpt_file_t f;
    char keep[sizeof sh->acc->err];
    memcpy(keep, sh->acc->err, sizeof keep);
    if (acc__ckpt_read(sh->acc, p, 0, &f) == ACC_OK) {
      mark_t got;
      if (acc__shard_mark_get(&f, "user." MARK, &got)) {
        w[0] = 1;
        memcpy(&w[1], &got, sizeof got);
      }
      free(f.buf);
    }
    memcpy(sh->acc->err, keep, sizeof keep);
  }
  if (sh->world > 1)
    ACC_CHECK(acc_broadcast(sh->acc, w, sizeof w / sizeof *w, ACC_I64, 0));
  *found = (int)w[0];
  memcpy(mk, &w[1], sizeof *mk);
  return ACC_OK;
}

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

static acc_result_t load_full(acc_shard_t *sh, const char *dir, const mark_t *mk, int found) {
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

/* A SHARDED checkpoint's mark (from `path`) against the live setup: the
 * same stage, world, shard groups (HYBRID_SHARD's nodes) and model. */
static acc_result_t check_layout(acc_shard_t *sh, const mark_t *m, const char *path) {
  mark_t mk = *m, live = mark_of(sh, ACC_SHARDED_STATE_DICT);
  if (mk.world == live.world && mk.stage == live.stage && mk.num_params == live.num_params &&
      mk.nunits == live.nunits && mk.sworld == live.sworld && mk.ngroups == live.ngroups)
    return ACC_OK;
  return acc__set_error(sh->acc, ACC_ERR_INVALID_ARGUMENT,
                        "%s was saved by ZeRO stage %d on %d ranks sharded in %d group%s of %d "
                        "(%llu parameters, %d units); this run is stage %d on %d ranks sharded "
                        "in %d group%s of %d (%zu parameters, %d units): a SHARDED_STATE_DICT "
                        "resumes the same setup only (groups: HYBRID_SHARD's nodes; save a "
                        "FULL_STATE_DICT, or `nbfork merge-weights` it, to change it)",
                        path, mk.stage, mk.world, mk.ngroups, mk.ngroups == 1 ? "" : "s", mk.sworld,
                        (unsigned long long)mk.num_params, mk.nunits, sh->stage, sh->world,
                        sh->ngroups, sh->ngroups == 1 ? "" : "s", sh->sworld, sh->model->num_params,
                        sh->nunits);
}

/* A file's shard.meta against the live setup (check_layout). */
static acc_result_t check_mark(acc_shard_t *sh, const acc__ckpt_file_t *f, const char *path) {
  mark_t mk;
  if (!acc__shard_mark_get(f, "shard.meta", &mk))
    return acc__set_error(sh->acc, ACC_ERR_IO, "%s: no shard.meta section", path);
  return check_layout(sh, &mk, path);
}

/* Check this rank's shard file against the live setup. */
static acc_result_t check_shard(acc_shard_t *sh, const acc__ckpt_file_t *f, const char *path) {
  acc_t *acc = sh->acc;
  size_t b, bu, tot = own_total(sh);
  const void *d;
  ACC_CHECK(check_mark(sh, f, path));
  const unit_rec_t *ur = acc__ckpt_find(f, "shard.units", &bu);
  if (!ur || bu != (size_t)sh->nunits * sizeof *ur)
    return acc__set_error(acc, ACC_ERR_IO, "%s: unit table missing or short", path);
  for (int i = 0; i < sh->nunits; i++) {
    unit_rec_t u, l = {sh->units[i].off, sh->units[i].n, sh->units[i].s, sh->units[i].own};
    memcpy(&u, (const unsigned char *)ur + (size_t)i * sizeof u, sizeof u);
    if (memcmp(&u, &l, sizeof u))
      return acc__set_error(
          acc, ACC_ERR_INVALID_ARGUMENT,
          "%s: unit %d is elements [%llu, +%llu) there, [%zu, +%zu) here (another "
          "model)",
          path, i, (unsigned long long)u.off, (unsigned long long)u.n, sh->units[i].off,
          sh->units[i].n);
  }
  acc__ckpt_optim_rec_t o, live;
  ACC_CHECK(optim_rec(sh, &live));
  d = acc__ckpt_find(f, "optim", &b);
  if (!d || b != sizeof o)
    return acc__set_error(acc, ACC_ERR_IO, "%s: no optimizer record", path);
  memcpy(&o, d, sizeof o);
  if (o.kind != live.kind || o.has_m != live.has_m || o.has_v != live.has_v)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "%s holds %s state; this run uses %s",
                          path, o.kind ? "AdamW" : "SGD", live.kind ? "AdamW" : "SGD");
  const char *need[] = {"shard.params", o.has_m ? "shard.m" : NULL, o.has_v ? "shard.v" : NULL};
  for (int w = 0; w < 3; w++)
    if (need[w] && (!acc__ckpt_find(f, need[w], &b) || b != tot * sizeof(float)))
      return acc__set_error(acc, ACC_ERR_IO, "%s: %s missing or short", path, need[w]);
  if (!acc__ckpt_find(f, "model.grads", &b) || b != sh->model->num_params * sizeof(float))
    return acc__set_error(acc, ACC_ERR_IO, "%s: model.grads missing or short", path);
  return ACC_OK;
}

/* This rank's gradients: the shard file's when this rank wrote it (or
 * the file does not say who did), else nbfork_grads<rank>.bin's (read
 * into *g, checked). */
static acc_result_t load_grads(acc_shard_t *sh, const char *dir, const acc__ckpt_file_t *f,
                               acc__ckpt_file_t *g, const void **grads) {
  size_t b, bw;
  int32_t writer;
  const void *w = acc__ckpt_find(f, "shard.rank", &bw);
  *grads = acc__ckpt_find(f, "model.grads", &b);
  if (!w || bw != sizeof writer)
    return ACC_OK;
  memcpy(&writer, w, sizeof writer);
  if (writer == sh->rank)
    return ACC_OK;
  char path[4200];
  grads_path(path, sizeof path, dir, sh->rank);
  ACC_CHECK(acc__ckpt_read(sh->acc, path, 2, g));
  ACC_CHECK(check_mark(sh, g, path));
  *grads = acc__ckpt_find(g, "model.grads", &b);
  if (!*grads || b != sh->model->num_params * sizeof(float))
    return acc__set_error(sh->acc, ACC_ERR_IO, "%s: model.grads missing or short", path);
  return ACC_OK;
}

/* Put the checked shard file's slices in place (stages 1/2: then gather
 * every unit, collective). */
static acc_result_t apply_shard(acc_shard_t *sh, const acc__ckpt_file_t *f, const void *g) {
  size_t b;
  static const char *const names[] = {"shard.params", "shard.m", "shard.v"};
  acc__ckpt_optim_rec_t o;
  memcpy(&o, acc__ckpt_find(f, "optim", &b), sizeof o); /* checked by check_shard */
  acc__optim_hparams_t hp = {o.lr, o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps, o.t};
  for (int w = 0; w < 3; w++) {
    const unsigned char *src = acc__ckpt_find(f, names[w], &b);
    for (int i = 0, at = 0; src && i < sh->nunits; i++) {
      const acc__shard_unit_t *u = &sh->units[i];
      float *dst = u->own ? own_state(sh, u, w) : NULL;
      const float *from = (const float *)(const void *)(src + (size_t)at * sizeof(float));
      if (dst && w == 0) /* the parameters: host or device memory */
        ACC_CHECK(acc__shard_host_copy(sh, (float *)from, dst, u->own, 0));
      else if (dst)
        memcpy(dst, from, u->own * sizeof(float));
      at += (int)u->own;
    }
  }
  for (int i = 0; i < sh->nunits; i++)
    if (sh->units[i].opt)
      acc__optim_restore(sh->units[i].opt, &hp);
  /* checked by check_shard / load_grads */
  ACC_CHECK(acc__shard_host_copy(sh, (float *)g, sh->model->grads, sh->model->num_params, 0));
  if (sh->stage == 3) {
    sh->gathered = 1;
    ACC_CHECK(acc__shard_release_all(sh));
  }
  for (int i = 0; (sh->stage == 1 || sh->stage == 2) && i < sh->nunits; i++)
    ACC_CHECK(acc__shard_gather_unit(sh, &sh->units[i]));
  return ACC_OK;
}

static acc_result_t load_sharded(acc_shard_t *sh, const char *dir, const mark_t *mk) {
  char path[4200];
  snprintf(path, sizeof path, "%s/nbfork_state.bin", dir);
  ACC_CHECK(check_layout(sh, mk, path)); /* the same on every rank: before any file */
  shard_path(path, sizeof path, dir, sh->srank);
  acc__ckpt_file_t f = {0}, g = {0};
  const void *grads = NULL;
  acc_result_t r = acc__ckpt_read(sh->acc, path, 2, &f);
  if (r == ACC_OK)
    r = check_shard(sh, &f, path);
  if (r == ACC_OK)
    r = load_grads(sh, dir, &f, &g, &grads);
  r = acc__ckpt_agree(sh->acc, r, "acc_shard_load_state", "");
  if (r == ACC_OK) /* scaler, registered objects, RNG, accumulation position */
    r = acc__load_state_ex(sh->acc, dir, NULL, NULL, 1);
  if (r == ACC_OK)
    r = apply_shard(sh, &f, grads);
  free(f.buf);
  free(g.buf);
  return r;
}

acc_result_t acc_shard_load_state(acc_shard_t *sh, const char *dir) {
  if (!sh)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!dir || !*dir)
    return acc__set_error(sh->acc, ACC_ERR_INVALID_ARGUMENT, "acc_shard_load_state: no directory");
  mark_t mk;
  int found;
  ACC_CHECK(read_mark(sh, dir, &mk, &found));
  /* a lean device MLP: the full buffers the load fills, then its shards */
  const int had = sh->model->grads != NULL;
  acc_result_t r = acc__shard_whole(sh, 0, 1);
  if (r == ACC_OK)
    r = acc__shard_whole(sh, 1, 1);
  if (r == ACC_OK)
    r = found && mk.type == ACC_SHARDED_STATE_DICT ? load_sharded(sh, dir, &mk)
                                                   : load_full(sh, dir, &mk, found);
  if (r == ACC_OK) /* offloaded: the host master from the loaded parameters */
    r = acc__shard_offload_pull(sh);
  return lean_after(sh, had, r);
}
