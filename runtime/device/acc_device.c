/*
 * acc_device.c — which CUDA device a rank uses (acc__select_device).
 *
 * Accelerate gives rank LOCAL_RANK the device cuda:LOCAL_RANK and refuses
 * more processes per node than GPUs. NBFORK_SHARE_GPU lifts that for
 * tests on a one-GPU machine: ranks share the GPUs round-robin, and since
 * NCCL refuses two ranks of one communicator on one device within a host
 * ("Duplicate GPU detected"), each rank gets its own NCCL_HOSTID: NCCL
 * then takes the ranks for separate hosts and connects them over its
 * socket transport (slow; correct).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "acc_internal.h"
#include "acc_nccl.h"
#include "acc_optim_cuda.h"
#include "nbf_param.h"

/* NCCL_HOSTID = "<hostname>-rank<RANK>" unless the user set one. Must
 * happen before the communicator exists (NCCL reads it at init). */
static int set_host_id(acc_t *acc) {
  if (nbf_param_raw(NBF_P_NCCL_HOSTID))
    return 0;
  char host[128] = "host", id[192];
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "host");
  host[sizeof host - 1] = '\0';
  snprintf(id, sizeof id, "%s-rank%d", host, acc->rank);
  if (nbf_param_set(NBF_P_NCCL_HOSTID, id) != 0) {
    acc__set_error(acc, ACC_ERR_BACKEND, "setting NCCL_HOSTID for NBFORK_SHARE_GPU failed");
    return -1;
  }
  return 0;
}

acc_result_t acc__accumulate_device(acc_t *acc, float *grads, size_t n) {
  char err[512];
  if (acc->accum_prev_dev_n != n) {
    acc_optim_cuda_free(&acc->accum_prev_dev);
    acc->accum_prev_dev_n = 0;
    acc_result_t r = acc_optim_cuda_state(&acc->accum_prev_dev, n, err, sizeof err);
    if (r != ACC_OK)
      return acc__set_error(acc, r, "acc_backward: accumulation buffer on device %d: %s",
                            acc->device, err);
    acc->accum_prev_dev_n = n;
    /* a window restored by acc_load_state is in the host buffer: it
     * continues on the device (else the earlier micro-steps would be
     * rescaled again) */
    if (!acc->accum_prev_zero && acc->accum_prev && acc->accum_prev_n == n) {
      r = acc_optim_cuda_copy(acc->accum_prev, acc->accum_prev_dev, n, 1, err, sizeof err);
      if (r != ACC_OK)
        return acc__set_error(acc, r,
                              "acc_backward: restoring the accumulation buffer on "
                              "device %d: %s",
                              acc->device, err);
    } else {
      acc->accum_prev_zero = 1;
    }
    free(acc->accum_prev);
    acc->accum_prev = NULL;
    acc->accum_prev_n = 0;
  }
  const int save = !acc->sync_gradients;
  acc_result_t r =
      acc_optim_cuda_accumulate(grads, acc->accum_prev_dev, n, 1.0f / (float)acc->accum_steps,
                                acc->accum_prev_zero, save, acc->stream, err, sizeof err);
  if (r != ACC_OK)
    return acc__set_error(acc, r, "acc_backward on device %d: %s", acc->device, err);
  acc->accum_prev_zero = !save; /* after a sync the caller zeroes the gradients */
  return ACC_OK;
}

float *acc__device_scratch(acc_t *acc) {
  char err[512];
  acc_result_t r = acc_optim_cuda_state(&acc->dev_scratch, 16, err, sizeof err);
  if (r != ACC_OK) {
    acc__set_error(acc, r, "device scratch on device %d: %s", acc->device, err);
    return NULL;
  }
  return acc->dev_scratch;
}

void acc__device_free(acc_t *acc) {
  acc_optim_cuda_free(&acc->accum_prev_dev);
  acc->accum_prev_dev_n = 0;
  acc_optim_cuda_free(&acc->dev_scratch);
}

int acc__select_device(acc_t *acc) {
  acc->device = -1;
  if (nbf_param_ACCELERATE_USE_CPU())
    return 0;
  int n = acc_nccl_device_count();
  if (n <= 0)
    return 0;
  const int share = nbf_param_NBFORK_SHARE_GPU();
  if (acc->local_rank >= n && !share) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "LOCAL_RANK=%d but only %d GPU(s) are visible: start at most %d processes "
                   "per node, set ACCELERATE_USE_CPU=1 to train on CPU, or (tests) "
                   "NBFORK_SHARE_GPU=1 to share GPUs",
                   acc->local_rank, n, n);
    return -1;
  }
  if (share && set_host_id(acc) != 0)
    return -1;
  const int device = acc->local_rank % n;
  if (acc_nccl_set_device(acc, device) != ACC_OK)
    return -1;
  acc->device = device;
  return 0;
}
