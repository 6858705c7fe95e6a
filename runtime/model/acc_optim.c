/*
 * acc_optim.c — optimizers on flat f32 buffers, with PyTorch semantics:
 *
 * SGD (torch.optim.SGD, dampening 0, no Nesterov):
 *   g = grad + weight_decay * p
 *   buf = g on the first step, else buf = momentum * buf + g   (momentum != 0)
 *   p -= lr * (momentum ? buf : g)
 *
 * AdamW (torch.optim.AdamW; Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization", ICLR 2019):
 *   t += 1;  p *= 1 - lr * weight_decay
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * acc_optim_step is Accelerate's AcceleratedOptimizer.step: it does
 * nothing on micro-steps that do not sync gradients, and with fp16 mixed
 * precision runs GradScaler's unscale_ / step / update (acc_scaler.c):
 * gradients divided by the loss scale, the step skipped when they hold
 * inf/NaN, the scale updated.
 *
 * Parameters in device memory (a device model's acc_mlp_params) are
 * updated on the device by acc_optim_cuda.cu's kernels, on the
 * accelerator's stream, with the state (momentum, moments) in device
 * buffers allocated at the first step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "acc_internal.h"
#include "acc_nccl.h"
#include "acc_optim_cuda.h"

typedef enum { OPT_SGD, OPT_ADAMW } opt_kind_t;

struct acc_optim {
  opt_kind_t kind;
  float *params;
  float *grads;
  size_t n;
  acc__optim_hparams_t hp;
  float *m, *v;   /* SGD: m = momentum buffer; AdamW: moments */
  int on_device;  /* -1 = not known yet; 1 = params are device memory */
  float *dm, *dv; /* the device copies of m and v (on_device) */
  int upload;     /* m, v were restored from a checkpoint: copy them to dm, dv */
};

/* An optimizer of `kind` over n parameters with hyperparameters `hp`,
 * with zeroed buffers m (need_m) and v (need_v); NULL on bad arguments
 * or no memory. */
static acc_optim_t *opt_new(opt_kind_t kind, float *params, float *grads, size_t n,
                            acc__optim_hparams_t hp, int need_m, int need_v) {
  if (!params || !grads || n == 0)
    return NULL;
  acc_optim_t *o = calloc(1, sizeof *o);
  if (!o)
    return NULL;
  *o = (acc_optim_t){
      .kind = kind, .params = params, .grads = grads, .n = n, .hp = hp, .on_device = -1};
  if ((need_m && !(o->m = calloc(n, sizeof(float)))) ||
      (need_v && !(o->v = calloc(n, sizeof(float)))))
    acc_optim_destroy(&o);
  return o;
}

acc_optim_t *acc_sgd_new(float *params, float *grads, size_t n, float lr, float momentum,
                         float weight_decay) {
  if (lr < 0 || momentum < 0 || weight_decay < 0)
    return NULL;
  acc__optim_hparams_t hp = {.lr = lr, .momentum = momentum, .weight_decay = weight_decay};
  return opt_new(OPT_SGD, params, grads, n, hp, momentum != 0.0f, 0);
}

acc_optim_t *acc_adamw_new(float *params, float *grads, size_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay) {
  if (lr < 0 || beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1 || eps < 0 || weight_decay < 0)
    return NULL;
  acc__optim_hparams_t hp = {
      .lr = lr, .weight_decay = weight_decay, .beta1 = beta1, .beta2 = beta2, .eps = eps};
  return opt_new(OPT_ADAMW, params, grads, n, hp, 1, 1);
}

static void sgd_step(acc_optim_t *o) {
  /* restrict: parameters, gradients and momentum never overlap, which lets
   * the compiler vectorize these loops (one pass over n floats each). */
  float *restrict p = o->params, *restrict buf = o->m;
  const float *restrict g = o->grads;
  const float lr = o->hp.lr, mom = o->hp.momentum, wd = o->hp.weight_decay;
  const size_t n = o->n;
  if (!buf) {
    for (size_t i = 0; i < n; i++)
      p[i] -= lr * (g[i] + wd * p[i]);
  } else if (o->hp.t == 0) {
    for (size_t i = 0; i < n; i++) {
      buf[i] = g[i] + wd * p[i];
      p[i] -= lr * buf[i];
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      buf[i] = mom * buf[i] + (g[i] + wd * p[i]);
      p[i] -= lr * buf[i];
    }
  }
  o->hp.t++;
}

static void adamw_step(acc_optim_t *o) {
  o->hp.t++;
  float *restrict p = o->params, *restrict m = o->m, *restrict v = o->v;
  const float *restrict g = o->grads;
  const float b1 = o->hp.beta1, b2 = o->hp.beta2, eps = o->hp.eps;
  const float decay = 1.0f - o->hp.lr * o->hp.weight_decay;
  const double bc1 = 1.0 - pow(b1, (double)o->hp.t), bc2 = 1.0 - pow(b2, (double)o->hp.t);
  const float step = (float)(o->hp.lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  for (size_t i = 0; i < o->n; i++) {
    p[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
  }
}

/* Momentum buffers of parameters whose gradient stays 0 (dead ReLU units)
 * decay geometrically into subnormal floats after a few hundred steps;
 * x86 then takes a ~100-cycle assist per operation, which made the
 * optimizer step cost as much as the backward pass. The update runs with
 * flush-to-zero and denormals-are-zero, scoped to the step (the caller's
 * floating-point mode is restored): a value below 1.2e-38 becomes 0, as in
 * fp16/bf16 training. */
static void step_ftz(acc_optim_t *opt) {
#if defined(__SSE__)
  unsigned int csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
  if (opt->kind == OPT_SGD)
    sgd_step(opt);
  else
    adamw_step(opt);
#if defined(__SSE__)
  _mm_setcsr(csr);
#endif
}

/* 1 when the optimizer's parameters are device memory (decided once). */
static int on_device(acc_t *acc, acc_optim_t *o) {
  if (o->on_device < 0)
    o->on_device = acc && acc->device >= 0 && acc_nccl_is_device_ptr(o->params);
  return o->on_device;
}

/* One step on the device; the same hyper-parameters and step count as
 * the host step. 1, or -1 with the error in acc. */
static int device_step(acc_t *acc, acc_optim_t *o) {
  char err[512] = "";
  acc_result_t r = ACC_OK;
  const acc__optim_hparams_t *hp = &o->hp;
  if (o->upload) {
    float *host[2] = {o->m, o->v}, **dev[2] = {&o->dm, &o->dv};
    for (int k = 0; k < 2 && r == ACC_OK; k++)
      if (host[k]) {
        r = acc_optim_cuda_state(dev[k], o->n, err, sizeof err);
        if (r == ACC_OK)
          r = acc_optim_cuda_copy(host[k], *dev[k], o->n, 1, err, sizeof err);
      }
    if (r != ACC_OK) {
      acc__set_error(acc, r, "acc_optim_step: restoring the state on device %d: %s", acc->device,
                     err);
      return -1;
    }
    o->upload = 0;
  }
  if (o->kind == OPT_SGD) {
    r = hp->momentum != 0.0f ? acc_optim_cuda_state(&o->dm, o->n, err, sizeof err) : ACC_OK;
    if (r == ACC_OK)
      r = acc_optim_cuda_sgd(o->params, o->grads, o->dm, o->n, hp->lr, hp->momentum,
                             hp->weight_decay, hp->t == 0, acc->stream, err, sizeof err);
    if (r == ACC_OK)
      o->hp.t++;
  } else {
    r = acc_optim_cuda_state(&o->dm, o->n, err, sizeof err);
    if (r == ACC_OK)
      r = acc_optim_cuda_state(&o->dv, o->n, err, sizeof err);
    if (r == ACC_OK) {
      const double t = (double)hp->t + 1.0;
      const double bc1 = 1.0 - pow(hp->beta1, t), bc2 = 1.0 - pow(hp->beta2, t);
      r = acc_optim_cuda_adamw(o->params, o->grads, o->dm, o->dv, o->n, hp->lr, hp->beta1,
                               hp->beta2, hp->eps, hp->weight_decay, (float)(hp->lr / bc1),
                               (float)(1.0 / sqrt(bc2)), acc->stream, err, sizeof err);
    }
    if (r == ACC_OK)
      o->hp.t++;
  }
  if (r != ACC_OK) {
    acc__set_error(acc, r, "acc_optim_step on device %d: %s", acc->device, err);
    return -1;
  }
  return 1;
}

int acc_optim_step(acc_t *acc, acc_optim_t *opt) {
  if (!opt)
    return 0;
  if (acc && !acc->sync_gradients)
    return 0;
  if (acc && acc->precision == ACC_PRECISION_FP16) {
    /* GradScaler: unscale_ (inf/NaN check), step unless found, update. A
     * failed unscale (a CUDA error) is an error, not an overflow: taken
     * as inf it would skip every step and halve the scale for ever */
    int finite = acc_unscale_gradients(acc, opt->grads, opt->n);
    if (finite < 0)
      return -1;
    int found = !finite;
    acc_update_loss_scale(acc, found);
    if (found)
      return 0;
  } else if (acc) {
    acc->found_inf = 0;
  }
  if (on_device(acc, opt))
    return device_step(acc, opt);
  step_ftz(opt);
  return 1;
}

int acc__optim_step_raw(acc_t *acc, acc_optim_t *o) {
  if (on_device(acc, o))
    return device_step(acc, o);
  step_ftz(o);
  return 1;
}

double acc__sumsq(const float *g, size_t n) {
  /* eight independent sums: one chain of dependent additions would cost
   * 4 cycles per element */
  double acc8[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++)
      acc8[k] += (double)g[i + k] * (double)g[i + k];
  for (; i < n; i++)
    acc8[0] += (double)g[i] * (double)g[i];
  return ((acc8[0] + acc8[1]) + (acc8[2] + acc8[3])) + ((acc8[4] + acc8[5]) + (acc8[6] + acc8[7]));
}

size_t acc__optim_state_bytes(const acc_optim_t *o) {
  return ((o->m ? o->n : 0) + (o->v ? o->n : 0)) * sizeof(float);
}

void acc_optim_zero_grad(acc_t *acc, acc_optim_t *opt) {
  if (!opt || (acc && !acc->sync_gradients))
    return;
  char err[512];
  if (!on_device(acc, opt))
    memset(opt->grads, 0, opt->n * sizeof(float));
  else if (acc_optim_cuda_zero(opt->grads, opt->n, acc->stream, err, sizeof err) != ACC_OK)
    acc__set_error(acc, ACC_ERR_BACKEND, "acc_optim_zero_grad on device %d: %s", acc->device, err);
}

void acc_optim_set_lr(acc_optim_t *opt, float lr) {
  if (opt && lr >= 0)
    opt->hp.lr = lr;
}

void acc_optim_destroy(acc_optim_t **opt_p) {
  if (!opt_p || !*opt_p)
    return;
  free((*opt_p)->m);
  free((*opt_p)->v);
  acc_optim_cuda_free(&(*opt_p)->dm);
  acc_optim_cuda_free(&(*opt_p)->dv);
  free(*opt_p);
  *opt_p = NULL;
}

acc_result_t acc__optim_view(acc_t *acc, acc_optim_t *o, acc__optim_view_t *v) {
  /* a device optimizer's state, brought to the host buffers the
   * checkpoint reads; a failed copy must not save stale moments */
  char err[512];
  acc_result_t r = ACC_OK;
  if (o->dm && o->m && !o->upload)
    r = acc_optim_cuda_copy(o->m, o->dm, o->n, 0, err, sizeof err);
  if (r == ACC_OK && o->dv && o->v && !o->upload)
    r = acc_optim_cuda_copy(o->v, o->dv, o->n, 0, err, sizeof err);
  if (r != ACC_OK)
    return acc__set_error(acc, r, "copying the optimizer state from device %d: %s",
                          acc ? acc->device : -1, err);
  v->kind = o->kind == OPT_SGD ? 0 : 1;
  v->n = o->n;
  v->hp = o->hp;
  v->m = o->m;
  v->v = o->v;
  return ACC_OK;
}

void acc__optim_restore(acc_optim_t *o, const acc__optim_hparams_t *hp) {
  o->hp = *hp;
  o->upload = o->on_device != 0; /* the caller then fills m, v: the next device step uploads */
}
