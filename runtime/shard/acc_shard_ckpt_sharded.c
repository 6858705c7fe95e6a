/*
 * acc_shard_ckpt_sharded.c — FSDP's SHARDED_STATE_DICT of a sharded run
 * (nbf_shard.h, acc_shard_save_state / acc_shard_load_state in
 * acc_shard_ckpt.c): each rank writes its owned slices, and a load
 * resumes the same setup only (stage, world, shard groups, model).
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
 * A device model: the owned slices and the gradients through
 * acc__shard_host_copy, the optimizer's moments through its host
 * buffers (acc__optim_view; uploaded at the next step after a load).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_shard_ckpt_internal.h"

static size_t own_total(const acc_shard_t *sh) {
  size_t t = 0;
  for (int i = 0; i < sh->nunits; i++)
    t += sh->units[i].own;
  return t;
}

static acc_result_t write_shard(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  acc_model_t *m = sh->model;
  size_t tot = own_total(sh), nu = (size_t)sh->nunits;
  acc__ckpt_optim_rec_t o;
  ACC_CHECK(acc__shard_ck_optim_rec(sh, &o));
  mark_t mk = acc__shard_ck_mark(sh, ACC_SHARDED_STATE_DICT);
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
      float *src = st[w] && u->own ? acc__shard_ck_own_state(sh, u, w) : NULL;
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
  acc_model_t *m = sh->model;
  mark_t mk = acc__shard_ck_mark(sh, ACC_SHARDED_STATE_DICT);
  float *grads = sh->dev ? malloc(m->num_params * sizeof(float)) : m->grads;
  if (!grads)
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_save_state: no memory");
  acc_result_t r = ACC_OK;
  if (grads != m->grads) /* a device model's: a host copy */
    r = acc__shard_host_copy(sh, grads, m->grads, m->num_params, 1);
  acc__ckpt_sec_t secs[2] = {{"shard.meta", &mk, sizeof mk},
                             {"model.grads", grads, m->num_params * sizeof(float)}};
  char name[64];
  snprintf(name, sizeof name, "nbfork_grads%d.bin", sh->rank);
  if (r == ACC_OK)
    r = acc__ckpt_write(sh->acc, dir, name, 2, (uint32_t)sh->rank, secs, 2);
  if (grads != m->grads)
    free(grads);
  return r;
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

acc_result_t acc__shard_save_sharded(acc_shard_t *sh, const char *dir) {
  acc_t *acc = sh->acc;
  mark_t mk = acc__shard_ck_mark(sh, ACC_SHARDED_STATE_DICT);
  int writes;
  ACC_CHECK(writes_shard(sh, &writes));
  ACC_CHECK(acc_register_for_checkpointing(acc, ACC__SHARD_MARK, &mk, sizeof mk));
  acc_result_t r = acc_save_state(acc, dir, NULL, NULL); /* scaler, objects, RNG, accumulation */
  acc__unregister_for_checkpointing(acc, ACC__SHARD_MARK);
  ACC_CHECK(r);
  r = writes ? write_shard(sh, dir) : write_grads(sh, dir);
  return acc__ckpt_agree(acc, r, "acc_shard_save_state", "");
}

/* ---- loading ---------------------------------------------------------- */

/* A SHARDED checkpoint's mark (from `path`) against the live setup: the
 * same stage, world, shard groups (HYBRID_SHARD's nodes) and model. */
static acc_result_t check_layout(acc_shard_t *sh, const mark_t *m, const char *path) {
  mark_t mk = *m, live = acc__shard_ck_mark(sh, ACC_SHARDED_STATE_DICT);
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
  ACC_CHECK(acc__shard_ck_optim_rec(sh, &live));
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
  acc__shard_ck_grads_path(path, sizeof path, dir, sh->rank);
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
      float *dst = u->own ? acc__shard_ck_own_state(sh, u, w) : NULL;
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

acc_result_t acc__shard_load_sharded(acc_shard_t *sh, const char *dir, const mark_t *mk) {
  char path[4200];
  snprintf(path, sizeof path, "%s/nbfork_state.bin", dir);
  ACC_CHECK(check_layout(sh, mk, path)); /* the same on every rank: before any file */
  acc__shard_ck_shard_path(path, sizeof path, dir, sh->srank);
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
