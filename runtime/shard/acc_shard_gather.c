/*
 * acc_shard_gather.c — a unit's parameters all-gathered from the shards
 * into the model's buffer (nbf_shard.h's stages 1-3): within the shard
 * group (the world, or the node with HYBRID_SHARD), staged through a
 * buffer when the unit is padded (host or device memory: the copies are
 * acc_shard_dev.c's). Below both its callers: the step
 * (acc_shard_run.c) and stage 3's prefetch thread (acc_shard_prefetch.c).
 */
#include "acc_shard_internal.h"

acc_result_t acc__shard_all_gather(acc_shard_t *sh, const float *send, float *recv, size_t count) {
  if (sh->ngroups > 1) /* HYBRID_SHARD: within the node */
    return acc__local_all_gather(sh->acc, send, recv, count, ACC_F32);
  return acc_all_gather(sh->acc, send, recv, count, ACC_F32);
}

/* A unit without padding (n = N·s) is gathered straight into the model's
 * buffer and reduce-scattered straight from it: two copies of the unit
 * fewer per gather, one per reduction. The values are those of the
 * staged path (the same collective on the same elements; both are
 * checked against DDP bit for bit: test_shard.c's units divide by 2, not
 * by 4). */
int acc__shard_unpadded(const acc_shard_t *sh, const acc__shard_unit_t *u) {
  return u->n == (size_t)sh->sworld * u->s;
}

acc_result_t acc__shard_gather_unit_via(acc_shard_t *sh, const acc__shard_unit_t *u, float *stage) {
  if (acc__shard_unpadded(sh,
                          u)) /* stages 1/2: in place (the owned block is in the buffer already) */
    return acc__shard_all_gather(sh, acc__shard_own_params(sh, u), sh->model->params + u->off,
                                 u->s);
  float *mine = stage + (size_t)sh->srank * u->s; /* host or device (acc_shard_dev.c) */
  ACC_CHECK(acc__shard_copy(sh, mine, acc__shard_own_params(sh, u), u->own));
  ACC_CHECK(acc__shard_zero(sh, mine + u->own, u->s - u->own)); /* the padding */
  ACC_CHECK(acc__shard_all_gather(sh, mine, stage, u->s));
  return acc__shard_copy(sh, sh->model->params + u->off, stage, u->n);
}

acc_result_t acc__shard_gather_unit(acc_shard_t *sh, const acc__shard_unit_t *u) {
  return acc__shard_gather_unit_via(sh, u, sh->buf);
}
