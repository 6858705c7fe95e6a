/*
 * acc_shard_ckpt_internal.h — what the checkpoint files of a sharded run
 * share (acc_shard_ckpt.c: the entry points; acc_shard_ckpt_common.c:
 * the pieces both types use; acc_shard_ckpt_sharded.c:
 * SHARDED_STATE_DICT; acc_shard_ckpt_full.c: FULL_STATE_DICT). Internal
 * to runtime/shard.
 */
#ifndef ACC_SHARD_CKPT_INTERNAL_H
#define ACC_SHARD_CKPT_INTERNAL_H

#include "acc_shard_internal.h"

typedef acc__shard_mark_t mark_t;
typedef acc__shard_unit_rec_t unit_rec_t;

/* acc_shard_ckpt_common.c: */
/* DIR/nbfork_shard<R>.bin, R the shard rank; DIR/nbfork_grads<rank>.bin
 * (HYBRID_SHARD: a rank's gradients when another rank wrote its shard). */
void acc__shard_ck_shard_path(char *out, size_t len, const char *dir, int rank);
void acc__shard_ck_grads_path(char *out, size_t len, const char *dir, int rank);
/* The mark of this run for a checkpoint of `type` (acc_state_dict_type_t). */
mark_t acc__shard_ck_mark(const acc_shard_t *sh, int type);
/* The optimizer record of this rank (hyper-parameters, step count) with
 * n = all parameters; from the first unit it owns part of. */
acc_result_t acc__shard_ck_optim_rec(acc_shard_t *sh, acc__ckpt_optim_rec_t *o);
/* which: 0 parameters, 1 first moment (m), 2 second (v) of unit u's
 * owned elements; NULL when the optimizer has no such buffer. */
float *acc__shard_ck_own_state(acc_shard_t *sh, const acc__shard_unit_t *u, int which);

/* SHARDED_STATE_DICT (acc_shard_ckpt_sharded.c): save (collective);
 * load of a checkpoint whose shared file carries the mark mk. */
acc_result_t acc__shard_save_sharded(acc_shard_t *sh, const char *dir);
acc_result_t acc__shard_load_sharded(acc_shard_t *sh, const char *dir, const mark_t *mk);
/* FULL_STATE_DICT (acc_shard_ckpt_full.c): save (gathered, written by
 * rank 0; collective); load of a FULL checkpoint (found: it carries the
 * mark mk) or a plain acc_save_state one, at any world size. */
acc_result_t acc__shard_save_full(acc_shard_t *sh, const char *dir);
acc_result_t acc__shard_load_full(acc_shard_t *sh, const char *dir, const mark_t *mk, int found);

#endif /* ACC_SHARD_CKPT_INTERNAL_H */
