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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "acc_internal.h"

typedef enum { OPT_SGD, OPT_ADAMW } opt_kind_t;

struct acc_optim {
  opt_kind_t kind;
  float *params;
  float *grads;
  size_t n;
  acc__optim_hparams_t hp;
  float *m, *v; /* SGD: m = momentum buffer; AdamW: moments */
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
  o->kind = kind;
  o->params = params;
  o->grads = grads;
  o->n = n;
  o->hp = hp;
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

int acc_optim_step(acc_t *acc, acc_optim_t *opt) {
  if (!opt)
    return 0;
  if (acc && !acc->sync_gradients)
    return 0;
  if (acc && acc->precision == ACC_PRECISION_FP16) {
    /* GradScaler: unscale_ (inf/NaN check), step unless found, update */
    int found = acc_unscale_gradients(acc, opt->grads, opt->n) != 1;
    acc_update_loss_scale(acc, found);
    if (found)
      return 0;
  } else if (acc) {
    acc->found_inf = 0;
  }
  step_ftz(opt);
  return 1;
}

void acc_optim_zero_grad(acc_t *acc, acc_optim_t *opt) {
  if (!opt || (acc && !acc->sync_gradients))
    return;
  memset(opt->grads, 0, opt->n * sizeof(float));
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
  free(*opt_p);
  *opt_p = NULL;
}

void acc__optim_view(acc_optim_t *o, acc__optim_view_t *v) {
  v->kind = o->kind == OPT_SGD ? 0 : 1;
  v->n = o->n;
  v->hp = o->hp;
  v->m = o->m;
  v->v = o->v;
}

void acc__optim_restore(acc_optim_t *o, const acc__optim_hparams_t *hp) {
  o->hp = *hp;
}
