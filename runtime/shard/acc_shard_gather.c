/*
 * acc_shard_gather.c — a unit's parameters all-gathered from the shards
 * into the model's buffer (nbf_shard.h's stages 1/2, staged through a
 * buffer when the unit is padded) or into a unit buffer with room for the
 * padding (stage 3's layer hooks): within the shard group (the world, or
 * the node with HYBRID_SHARD); the reduce-scatter of a unit's gradient
 * (the world's, or HYBRID_SHARD's: the node's, then the replicas'); host
 * or device memory (the copies are
 * acc_shard_dev.c's). Below both its callers: the step and the hooks
 * (acc_shard_run.c) and stage 3's prefetch thread (acc_shard_prefetch.c).
 */
#include "acc_shard_internal.h"

acc_result_t acc__shard_all_gather(acc_shard_t *sh, const float *send, float *recv, size_t count) {
  if (sh->ngroups > 1) /* HYBRID_SHARD: within the node */
    return acc__local_all_gather(sh->acc, send, recv, count, ACC_F32);
  return acc_all_gather(sh->acc, send, recv, count, ACC_F32);
}

acc_result_t acc__shard_reduce_scatter(acc_shard_t *sh, const float *send, float *recv,
                                       size_t count) {
  if (sh->ngroups > 1) /* HYBRID_SHARD: within the node, then across the replicas */
    return acc__hybrid_reduce_scatter(sh->acc, send, recv, count, ACC_F32, ACC_AVG);
  return acc_reduce_scatter(sh->acc, send, recv, count, ACC_F32, ACC_AVG);
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

acc_result_t acc__shard_gather_into(acc_shard_t *sh, const acc__shard_unit_t *u, float *dst) {
  /* stages 1/2: dst holds the owned block already; offloaded parameter
   * shards (host memory) are copied into dst first, as a padded unit's */
  if (acc__shard_unpadded(sh, u) && !sh->hostP)
    return acc__shard_all_gather(sh, acc__shard_own_params(sh, u), dst, u->s);
  float *mine = dst + (size_t)sh->srank * u->s; /* host or device (acc_shard_dev.c) */
  ACC_CHECK(acc__shard_copy(sh, mine, acc__shard_own_params(sh, u), u->own));
  ACC_CHECK(acc__shard_zero(sh, mine + u->own, u->s - u->own)); /* the padding */
  return acc__shard_all_gather(sh, mine, dst, u->s);
}

acc_result_t acc__shard_gather_unit(acc_shard_t *sh, const acc__shard_unit_t *u) {
  float *dst = sh->model->params + u->off;
  if (acc__shard_unpadded(sh, u))
    return acc__shard_gather_into(sh, u, dst);
  ACC_CHECK(acc__shard_gather_into(sh, u, sh->buf)); /* the padding does not fit in place */
  return acc__shard_copy(sh, dst, sh->buf, u->n);
}
