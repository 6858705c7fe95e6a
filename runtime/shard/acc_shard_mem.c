/*
 * acc_shard_mem.c — where a unit's owned elements lie, giving pages back
 * to the OS, and the model-state memory: measured (resident pages, its
 * peak; a device model's device bytes) and estimated
 * (acc_shard_estimate_bytes, the ZeRO paper's formula). The lowest file
 * of the sharding: acc_shard.c (set-up), acc_shard_dev.c (host or device
 * memory), acc_shard_run.c (gathers, reductions, step) and
 * acc_shard_ckpt.c use it; it calls none of them.
 */
#define _DEFAULT_SOURCE /* madvise, mincore */
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
  if (sh->stage == 3)
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

/* Resident bytes of [p, p + bytes) by mincore, counted per page. */
static size_t resident(const void *p, size_t bytes) {
  if (!p || !bytes)
    return 0;
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p & ~(pg - 1), e = ((uintptr_t)p + bytes + pg - 1) & ~(pg - 1);
  size_t npages = (e - a) / pg, count = 0;
  unsigned char vec[4096];
  for (size_t i = 0; i < npages; i += sizeof vec) {
    size_t k = npages - i < sizeof vec ? npages - i : sizeof vec;
    if (mincore((void *)(a + i * pg), k * pg, vec) != 0)
      return bytes; /* not measurable: count it all */
    for (size_t j = 0; j < k; j++)
      count += vec[j] & 1;
  }
  size_t r = count * pg;
  return r < bytes ? r : bytes;
}

static size_t current_bytes(const acc_shard_t *sh) {
  const acc_model_t *m = sh->model;
  size_t nb = m->num_params * sizeof(float);
  /* a device model's buffers are allocated whole on the device: no
   * pages come and go there (mincore would not see them either) */
  size_t b = sh->dev ? 2 * nb : resident(m->params, nb) + resident(m->grads, nb);
  if (m->mlp && !sh->dev)
    b += resident(acc__mlp_host_buffer(m->mlp, 2), nb);
  b += 2 * sh->S * sizeof(float) * (sh->P != NULL);
  /* stage 3's unit buffers: a unit's gathered parameters or its full
   * gradient (temporaries of the step, counted: FSDP's peak holds them
   * too); the one a prefetch is filling counts whole */
  int job = acc__shard_pf_job(sh->pf);
  for (int i = 0; i < 2; i++) {
    size_t r = resident(sh->ubuf[i], sh->ubuf[i] ? sh->buf_n * sizeof(float) : 0);
    if (job >= 0 && i != sh->ucur) {
      size_t full = (size_t)sh->sworld * sh->units[job].s * sizeof(float);
      r = full > r ? full : r;
    }
    b += r;
  }
  for (int i = 0; i < sh->nunits; i++)
    b += sh->units[i].opt ? acc__optim_state_bytes(sh->units[i].opt) : 0;
  return b;
}

void acc__shard_sample(acc_shard_t *sh) {
  size_t b = current_bytes(sh);
  sh->peak = b > sh->peak ? b : sh->peak;
}

size_t acc_shard_state_bytes(const acc_shard_t *sh, int peak) {
  if (!sh)
    return 0;
  return peak ? sh->peak : current_bytes(sh);
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
  case 2:
    b = 4.0 * P + (4.0 + k) * P / N + 4.0 * L * (N - 1.0) / N;
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
