/*
 * acc_shard_mem.c — where a unit's owned elements lie, giving pages back
 * to the OS, and the model-state memory estimated (acc_shard_estimate_bytes,
 * the ZeRO paper's formula; measured: acc_shard_account.c). The lowest
 * file of the sharding: acc_shard.c (set-up), acc_shard_dev.c (host or
 * device memory), acc_shard_gather.c, acc_shard_run.c (reductions, step)
 * and acc_shard_ckpt*.c use it; it calls none of them.
 */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "acc_shard_internal.h"

/* ---- owned slices ---------------------------------------------------- */

float *acc__shard_own_params(acc_shard_t *sh, const acc__shard_unit_t *u) {
  if (sh->stage == 3)
    return sh->P + u->soff;
  return sh->model->params + u->off + (sh->stage ? (size_t)sh->srank * u->s : 0);
}

float *acc__shard_own_grads(acc_shard_t *sh, const acc__shard_unit_t *u) {
  if (sh->G) /* stage 3's, a lean device MLP's stage 2 */
    return sh->G + u->soff;
  return sh->model->grads + u->off + (sh->stage ? (size_t)sh->srank * u->s : 0);
}

/* ---- memory ---------------------------------------------------------- */

void acc__shard_release(float *p, size_t n) {
  if (!p || !n)
    return;
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p, e = (uintptr_t)(p + n);
  uintptr_t a1 = (a + pg - 1) & ~(pg - 1), e1 = e & ~(pg - 1);
  if (e1 <= a1) {
    memset(p, 0, n * sizeof(float));
    return;
  }
  memset(p, 0, a1 - a); /* the partial pages at both ends stay: zero them */
  memset((void *)e1, 0, e - e1);
  /* the whole pages read as zeros afterwards (anonymous private memory) */
  if (madvise((void *)a1, e1 - a1, MADV_DONTNEED) != 0)
    memset((void *)a1, 0, e1 - a1);
}

double acc_shard_estimate_bytes(size_t num_params, size_t largest, int world, int stage, int adamw,
                                int mixed) {
  const double P = (double)num_params, L = (double)largest, N = world > 0 ? world : 1;
  const double k = adamw ? 8.0 : 4.0;
  double b;
  switch (stage) {
  case 0:
    b = (8.0 + k) * P;
    break;
  case 1:
    b = 8.0 * P + k * P / N;
    break;
  case 2: /* + one unit buffer: a layer's full gradient before its reduce-scatter */
    b = 4.0 * P + (4.0 + k) * P / N + (N > 1 ? 4.0 * L : 0.0);
    break;
  case 3: /* + one unit buffer: a layer's parameters, then its gradient */
    return (8.0 + k) * P / N + 4.0 * L + (mixed ? 4.0 * L : 0.0);
  default:
    return NAN;
  }
  return b + (mixed ? 4.0 * P : 0.0);
}

double acc_shard_paper_bytes(size_t num_params, int world, int stage) {
  const double P = (double)num_params, N = world > 0 ? world : 1;
  static const double fixed[] = {16, 4, 2, 0}, shared[] = {0, 12, 14, 16};
  if (stage < 0 || stage > 3)
    return NAN;
  return fixed[stage] * P + shared[stage] * P / N;
}
