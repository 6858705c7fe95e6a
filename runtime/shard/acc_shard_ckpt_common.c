/*
 * acc_shard_ckpt_common.c — what both checkpoint types of a sharded run
 * use (acc_shard_ckpt_internal.h), below them and their entry points
 * (acc_shard_ckpt.c): the files' names, the mark of a run, the optimizer
 * record, a unit's owned state.
 */
#include <stdio.h>

#include "acc_shard_ckpt_internal.h"

void acc__shard_ck_shard_path(char *out, size_t len, const char *dir, int rank) {
  snprintf(out, len, "%s/nbfork_shard%d.bin", dir, rank);
}

void acc__shard_ck_grads_path(char *out, size_t len, const char *dir, int rank) {
  snprintf(out, len, "%s/nbfork_grads%d.bin", dir, rank);
}

mark_t acc__shard_ck_mark(const acc_shard_t *sh, int type) {
  return (mark_t){type,       sh->world,  sh->stage, sh->nunits, sh->model->num_params,
                  sh->sworld, sh->ngroups};
}

acc_result_t acc__shard_ck_optim_rec(acc_shard_t *sh, acc__ckpt_optim_rec_t *o) {
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

float *acc__shard_ck_own_state(acc_shard_t *sh, const acc__shard_unit_t *u, int which) {
  if (which == 0)
    return acc__shard_own_params(sh, u);
  acc__optim_view_t v;
  if (!u->opt || acc__optim_view(sh->acc, u->opt, &v) != ACC_OK)
    return NULL;
  return which == 1 ? v.m : v.v;
}
