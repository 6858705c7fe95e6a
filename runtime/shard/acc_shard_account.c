/*
 * acc_shard_account.c — the model-state memory measured (nbf_shard.h's
 * acc_shard_state_bytes): the resident pages of the model's buffers, the
 * shards, the unit buffers of stages 2 and 3 (the one a prefetch is filling counted
 * whole) and the optimizer's state; a device model's device bytes; the
 * peak over the sample points. Above the prefetch (it asks which unit is
 * in flight), below set-up and the step (acc_shard.c, acc_shard_run.c),
 * which sample it.
 */
#define _DEFAULT_SOURCE /* mincore */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "acc_shard_internal.h"

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
   * pages come and go there (mincore would not see them either); a lean
   * device MLP's are freed while sharded */
  size_t b = sh->dev ? nb * (size_t)((m->params != NULL) + (m->grads != NULL))
                     : resident(m->params, nb) + resident(m->grads, nb);
  if (m->mlp && !sh->dev)
    b += resident(acc__mlp_host_buffer(m->mlp, 2), nb);
  /* P and G; a device model's offloaded P is host memory (not counted:
   * a device model's count is its device bytes), as the offloaded
   * optimizer state is */
  b += (size_t)((sh->P && !sh->hostP) + (sh->G != NULL)) * sh->S * sizeof(float);
  /* the unit buffers: a unit's gathered parameters (stage 3) or its full
   * gradient (temporaries of the step, counted: FSDP's peak holds them
   * too); the one a prefetch is filling counts whole */
  int job = acc__shard_pf_job(sh->pf);
  if (sh->dev && sh->buf && sh->buf != sh->ubuf[0])
    b += sh->buf_n * sizeof(float); /* device staging, allocated whole */
  for (int i = 0; i < 2; i++) {
    const size_t ub = sh->ubuf[i] ? sh->buf_n * sizeof(float) : 0;
    size_t r = sh->dev ? ub : resident(sh->ubuf[i], ub);
    if (job >= 0 && i != sh->ucur) {
      size_t full = (size_t)sh->sworld * sh->units[job].s * sizeof(float);
      r = full > r ? full : r;
    }
    b += r;
  }
  for (int i = 0; i < sh->nunits && !sh->offload; i++)
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
