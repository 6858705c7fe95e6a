/*
 * acc_shard_offload.c — offload of a device model's sharded state to host
 * memory (nbf_shard.h; Accelerate's offload_optimizer_device: cpu and
 * fsdp_offload_params: true), as DeepSpeed's ZeRO-Offload (Ren et al.,
 * "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC
 * 2021): the optimizers step on the host over an f32 master copy of the
 * owned parameters (hP) and a host copy of the owned gradients (hG), with
 * their state (AdamW's moments, SGD's momentum) in host memory. Each step
 * copies the owned gradients, once reduced, unscaled and clipped on the
 * device, to hG (one synchronization), steps, and copies the updated hP
 * back to the owned parameters on the device. At stage 3 the parameter
 * shards themselves are host memory (hP is P, sh->hostP): each gather
 * copies the owned block from there into the device unit buffer, and
 * nothing is copied back after the step. On a CPU run the state already
 * is in host memory: nothing here runs (sh->offload 0). Below the step
 * (acc_shard_run.c) and set-up (acc_shard.c); above acc_shard_dev.c.
 */
#include <stdlib.h>

#include "acc_shard_internal.h"

acc_result_t acc__shard_offload_new(acc_shard_t *sh) {
  if (!sh->offload)
    return ACC_OK;
  sh->hG = calloc(sh->S ? sh->S : 1, sizeof(float));
  sh->hP = sh->hostP ? sh->P : calloc(sh->S ? sh->S : 1, sizeof(float));
  if (!sh->hG || !sh->hP)
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY,
                          "acc_shard_new: no host memory for the offloaded optimizer state "
                          "(%zu floats)",
                          sh->S);
  return sh->hostP ? ACC_OK : acc__shard_offload_pull(sh);
}

acc_result_t acc__shard_offload_pull(acc_shard_t *sh) {
  if (!sh->offload || sh->hostP)
    return ACC_OK;
  for (int i = 0; i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    ACC_CHECK(
        acc__shard_offload_copy(sh, sh->hP + u->soff, acc__shard_own_params(sh, u), u->own, 0));
  }
  return acc__shard_offload_wait(sh);
}

void acc__shard_offload_free(acc_shard_t *sh) {
  if (sh->hP != sh->P)
    free(sh->hP);
  free(sh->hG);
  sh->hP = sh->hG = NULL;
}

float *acc__shard_opt_params(acc_shard_t *sh, const acc__shard_unit_t *u) {
  return sh->offload ? sh->hP + u->soff : acc__shard_own_params(sh, u);
}

float *acc__shard_opt_grads(acc_shard_t *sh, const acc__shard_unit_t *u) {
  return sh->offload ? sh->hG + u->soff : acc__shard_own_grads(sh, u);
}

acc_result_t acc__shard_offload_step(acc_shard_t *sh) {
  for (int i = 0; i < sh->nunits; i++) { /* the owned gradients down */
    const acc__shard_unit_t *u = &sh->units[i];
    if (u->opt)
      ACC_CHECK(
          acc__shard_offload_copy(sh, sh->hG + u->soff, acc__shard_own_grads(sh, u), u->own, 0));
  }
  ACC_CHECK(acc__shard_offload_wait(sh));
  for (int i = 0; i < sh->nunits; i++)
    if (sh->units[i].opt && acc__optim_step_raw(sh->acc, sh->units[i].opt) < 0)
      return ACC_ERR_BACKEND;                          /* its error is set */
  for (int i = 0; i < sh->nunits && !sh->hostP; i++) { /* the updated parameters up */
    const acc__shard_unit_t *u = &sh->units[i];
    if (u->opt)
      ACC_CHECK(
          acc__shard_offload_copy(sh, acc__shard_own_params(sh, u), sh->hP + u->soff, u->own, 1));
  }
  return ACC_OK;
}
