/*
 * acc_accumulate.c — gradient accumulation as Accelerate does it
 * (accelerate/accelerator.py: Accelerator._do_sync, accumulate, backward):
 *
 *   begin:  if sync_with_dataloader and end of data loader:
 *              step = 0; sync_gradients = 1
 *           else:
 *              step += 1; sync_gradients = (step % num_steps == 0)
 *   backward: the micro-step's gradient is scaled by 1/num_steps (Accelerate
 *           divides the loss), and on sync steps the gradients are
 *           averaged across ranks (DDP's all-reduce; skipped under no_sync).
 */
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "acc_nccl.h"

void acc_accumulate_begin(acc_t *acc, int is_last_batch) {
  if (!acc)
    return;
  if (acc->sync_with_dataloader && is_last_batch) {
    acc->step = 0;
    acc->sync_gradients = 1;
  } else {
    acc->step++;
    acc->sync_gradients = (acc->step % acc->accum_steps) == 0;
  }
}

void acc_accumulate_end(acc_t *acc) {
  (void)acc;
}

int acc_sync_gradients(const acc_t *acc) {
  return acc ? acc->sync_gradients : 1;
}

acc_result_t acc__accumulate_scale(acc_t *acc, float *grads, size_t n) {
  int k = acc->accum_steps;
  if (k > 1 && n && acc->device >= 0 && acc_nccl_is_device_ptr(grads)) {
    ACC_CHECK(acc__accumulate_device(acc, grads, n));
  } else if (k > 1 && n) {
    if (acc->accum_prev_n != n) {
      float *p = realloc(acc->accum_prev, n * sizeof(float));
      if (!p)
        return acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_backward: no memory for %zu floats", n);
      acc->accum_prev = p;
      acc->accum_prev_n = n;
      acc->accum_prev_zero = 1;
    }
    const float inv = 1.0f / (float)k;
    float *prev = acc->accum_prev;
    if (acc->accum_prev_zero) {
      for (size_t i = 0; i < n; i++)
        grads[i] *= inv;
    } else {
      for (size_t i = 0; i < n; i++)
        grads[i] = prev[i] + (grads[i] - prev[i]) * inv;
    }
    if (acc->sync_gradients) {
      acc->accum_prev_zero = 1; /* the caller zeroes after the optimizer step */
    } else {
      memcpy(prev, grads, n * sizeof(float));
      acc->accum_prev_zero = 0;
    }
  }
  return ACC_OK;
}

acc_result_t acc_backward(acc_t *acc, float *grads, size_t n) {
  if (!acc || (n && !grads))
    return acc ? acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_backward: NULL gradients")
               : ACC_ERR_INVALID_ARGUMENT;
  if (acc->grads_synced) { /* acc_mlp_backward_xent all-reduced it in buckets */
    int done = acc->grads_synced == grads && acc->grads_synced_n == n && acc->sync_gradients;
    acc->grads_synced = NULL;
    if (done)
      return ACC_OK;
  }
  ACC_CHECK(acc__accumulate_scale(acc, grads, n));
  if (acc->sync_gradients && acc->world > 1)
    return acc_all_reduce(acc, grads, n, ACC_F32, ACC_AVG);
  return ACC_OK;
}
