/*
 * acc_shard_ckpt.c — checkpoints of a sharded run (nbf_shard.h): the
 * entry points acc_shard_save_state and acc_shard_load_state, which pick
 * FSDP's FULL_STATE_DICT (acc_shard_ckpt_full.c: gathered, written by
 * rank 0 in acc_save_state's format) or SHARDED_STATE_DICT
 * (acc_shard_ckpt_sharded.c: each rank its owned slices, in
 * nbfork_shard<R>.bin); what both use (the files' names, the mark, the
 * optimizer record, a unit's owned state) is acc_shard_ckpt_common.c's,
 * merge-weights acc_shard_merge.c's.
 *
 * The shared file nbfork_state.bin of both carries a registered object
 * "nbfork.state_dict" (mark_t: type, world size, stage, units, the shard
 * groups) so a load knows what it reads; a plain acc_save_state
 * checkpoint has none and is read as a FULL one.
 *
 * A device model (a toolkit MLP or a custom acc_model_t on a GPU): the
 * same files, written from and read into host copies (see each type's
 * file). Offloaded shards are host memory already; after a load the
 * offloaded master copy is refreshed. A lean device MLP (stage 3) has
 * its full device buffers allocated for the save or load and freed
 * after it (lean_after).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "acc_shard_ckpt_internal.h"
#include "nbf_param.h"

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

/* A lean device MLP's stage 2 keeps its owned gradients in G while its
 * full gradient buffer is freed; a checkpoint's file holds them at their
 * places in the full buffer, as stage 2 without it did: copied there
 * (to_full) into the buffer allocated zeroed for the save, or from there
 * after a load when the buffer is freed again (kept, while accumulating,
 * it holds an accumulation window, which the next reduction takes). */
static acc_result_t lean2_grads(acc_shard_t *sh, int to_full) {
  for (int i = 0; sh->lean && sh->stage == 2 && i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    float *full = sh->model->grads + u->off + (size_t)sh->srank * u->s, *own = sh->G + u->soff;
    ACC_CHECK(acc__shard_copy(sh, to_full ? full : own, to_full ? own : full, u->own));
  }
  return ACC_OK;
}

/* A lean device MLP (its full device buffers freed while sharded: stage
 * 3's, stage 2's gradients) after a checkpoint: the parameters' buffer
 * freed again unless gathered, the gradients' unless it held an
 * accumulation window before (had_grads) or accumulates; r passed
 * through. */
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
  acc_result_t r = had ? ACC_OK : lean2_grads(sh, 1); /* the file holds them */
  if (r == ACC_OK)
    r = type == ACC_SHARDED_STATE_DICT ? acc__shard_save_sharded(sh, dir)
                                       : acc__shard_save_full(sh, dir);
  return lean_after(sh, had, r);
}

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
      if (acc__shard_mark_get(&f, "user." ACC__SHARD_MARK, &got)) {
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
    r = found && mk.type == ACC_SHARDED_STATE_DICT ? acc__shard_load_sharded(sh, dir, &mk)
                                                   : acc__shard_load_full(sh, dir, &mk, found);
  if (r == ACC_OK) /* offloaded: the host master from the loaded parameters */
    r = acc__shard_offload_pull(sh);
  if (r == ACC_OK && !had && sh->acc->accum_steps == 1) /* the buffer goes: G holds them */
    r = lean2_grads(sh, 0);
  return lean_after(sh, had, r);
}
