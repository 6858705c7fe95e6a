/*
 * acc_scaler.c — the fp16 dynamic loss scaler with the semantics of
 * PyTorch's torch.cuda.amp.GradScaler (torch/cuda/amp/grad_scaler.py and
 * the _amp_update_scale_ kernel):
 *
 *   scale(loss)  = loss * S                       (S = 2^16 at start)
 *   unscale_     : g *= float(1 / double(S)); found_inf = any(!isfinite(g))
 *   step         : skipped when found_inf
 *   update       : found_inf  -> S *= backoff_factor (0.5), tracker = 0
 *                  otherwise  -> tracker += 1; when tracker == growth_interval
 *                                (2000): S *= growth_factor (2) if that is
 *                                finite, tracker = 0
 *
 * Device gradients are unscaled by acc_half_cuda.cu (or acc_half.c's
 * host-staging fallback).
 */
#include <math.h>
#include <stdint.h>

#include "acc_half_cuda.h"
#include "acc_internal.h"
#include "acc_nccl.h"

static int on_device(const acc_t *acc, const void *p) {
  return acc && acc->device >= 0 && acc_nccl_is_device_ptr(p);
}

void acc__scaler_init(acc_t *acc) {
  acc->scale = 65536.0f; /* GradScaler(init_scale=2.**16) */
  acc->growth_factor = 2.0f;
  acc->backoff_factor = 0.5f;
  acc->growth_interval = 2000;
  acc->growth_tracker = 0;
  acc->found_inf = 0;
  acc->unscaled_grads = NULL;
}

float acc_loss_scale(const acc_t *acc) {
  return acc && acc->precision == ACC_PRECISION_FP16 ? acc->scale : 1.0f;
}

int acc_loss_scale_growth_tracker(const acc_t *acc) {
  return acc ? acc->growth_tracker : 0;
}

acc_result_t acc_set_grad_scaler(acc_t *acc, float init_scale, float growth_factor,
                                 float backoff_factor, int growth_interval) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!(init_scale > 0.0f) || !isfinite(init_scale) || !(growth_factor > 1.0f) ||
      !isfinite(growth_factor) || !(backoff_factor > 0.0f && backoff_factor < 1.0f) ||
      growth_interval < 1)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_set_grad_scaler: need init_scale > 0, growth_factor > 1, "
                          "0 < backoff_factor < 1, growth_interval >= 1 (got %g, %g, %g, %d)",
                          (double)init_scale, (double)growth_factor, (double)backoff_factor,
                          growth_interval);
  acc->scale = init_scale;
  acc->growth_factor = growth_factor;
  acc->backoff_factor = backoff_factor;
  acc->growth_interval = growth_interval;
  acc->growth_tracker = 0;
  return ACC_OK;
}

int acc_unscale_gradients(acc_t *acc, float *grads, size_t n) {
  if (!acc || acc->precision != ACC_PRECISION_FP16)
    return 1;
  if (n && !grads) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_unscale_gradients: NULL gradients");
    return -1;
  }
  if (acc->unscaled_grads == grads && grads)
    return !acc->found_inf; /* already unscaled since the last update */
  const float inv = (float)(1.0 / (double)acc->scale);
  int found = 0;
  if (n && on_device(acc, grads)) {
    char err[256];
    float *scratch = acc__device_scratch(acc);
    if (!scratch)
      return -1;
    acc_result_t r =
        acc_cuda_unscale(grads, n, inv, &found, (int *)scratch, acc->stream, err, sizeof err);
    if (r != ACC_OK) {
      acc__set_error(acc, r, "acc_unscale_gradients on device memory: %s", err);
      return -1;
    }
  } else if (n) {
    found = acc__unscale_host(grads, n, inv);
  }
  acc->found_inf = found;
  acc->unscaled_grads = grads;
  return !found;
}

void acc_update_loss_scale(acc_t *acc, int found_inf) {
  if (!acc)
    return;
  acc->unscaled_grads = NULL;
  acc->found_inf = found_inf != 0;
  if (acc->precision != ACC_PRECISION_FP16)
    return;
  if (found_inf) {
    acc->scale *= acc->backoff_factor;
    acc->growth_tracker = 0;
  } else if (++acc->growth_tracker == acc->growth_interval) {
    float grown = acc->scale * acc->growth_factor;
    if (isfinite(grown))
      acc->scale = grown;
    acc->growth_tracker = 0;
  }
}

int acc_optimizer_step_was_skipped(const acc_t *acc) {
  return acc ? acc->found_inf : 0;
}
