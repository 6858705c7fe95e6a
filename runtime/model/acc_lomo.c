/*
 * acc_lomo.c — LOMO (Lv et al. 2023, "Full Parameter Fine-tuning for
 * Large Language Models with Limited Resources") and AdaLomo (Lv et al.
 * 2023, "AdaLomo: Low-memory Optimization with Adaptive Learning Rate"),
 * as lomo-optim's LOMO and AdaLomo, which Transformers uses for
 * optim="lomo" / "adalomo".
 *
 * The update is fused into backward: the MLP's backward calls a hook per
 * layer (acc__mlp_set_layer_hook) as soon as that layer's gradient is
 * complete; the hook all-reduces the layer's gradient (average over
 * ranks, blocking, so every rank applies the same update), updates the
 * layer's parameters and zeroes its gradient, so no gradient outlives its
 * layer. Clipping by global norm needs the norm before the first update:
 * with max_grad_norm > 0 a first backward only sums the squares of the
 * (all-reduced) layer gradients, then a second backward updates with
 * coefficient min(max_grad_norm / (norm + 1e-6), 1) (the paper's
 * two-pass clipping, LOMO.grad_norm then fused_backward).
 *
 * AdaLomo per tensor, step t (1-based), gradient g (after clipping):
 *   beta2t = 1 - t^decay_rate (decay_rate -0.8), u = g² + eps1 (1e-30)
 *   matrix (r × c): R = beta2t R + (1-beta2t) rowmean(u),
 *                   C = beta2t C + (1-beta2t) colmean(u),
 *                   update = g / sqrt(R_i / mean(R) · C_j)   (Adafactor's
 *                   factored second moment)
 *   vector: S = beta2t S + (1-beta2t) u, update = g / sqrt(S)
 *   grouped update normalization: update /= max(RMS(update) / 1.0, 1)
 *   lr_t = lr · max(eps2 (1e-3), RMS(p)); p *= 1 - lr_t·weight_decay;
 *   p -= lr_t · update.
 * R, C, S and t are the optimizer state, registered for checkpointing
 * ("lomo.step", "lomo.state"); LOMO has none.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "nbf_util.h"

#define LOMO_EPS1 1e-30f
#define LOMO_EPS2 1e-3f
#define LOMO_DECAY_RATE -0.8
#define LOMO_CLIP_THRESHOLD 1.0f

struct acc_lomo {
  acc_t *acc;
  acc_model_t *model;
  int adaptive;
  float lr, max_grad_norm, weight_decay;
  int norm_pass;         /* the hook only sums squares */
  acc_result_t hook_err; /* what stopped the last backward in the hook */
  double sumsq;          /* of the all-reduced gradients, this step */
  float clip_coef;       /* of this step's update pass */
  double grad_norm;
  int64_t step; /* AdaLomo's t (steps done) */
  float *state; /* AdaLomo: per tensor R then C (matrix) or S (vector) */
  size_t *soff; /* per tensor: offset into state */
  size_t state_n;
  float *upd;  /* one tensor's update */
  float *cinv; /* 1/sqrt(C) of one matrix's columns */
};

/* AdaLomo's update of tensor `ti` (gradient g, parameters p). */
static void adalomo_tensor(acc_lomo_t *o, int ti, float *p, float *g) {
  const acc_tensor_info_t *t = &o->model->tensors[ti];
  const int r = t->rows, c = t->cols;
  const size_t n = (size_t)r * (size_t)c;
  const float beta2t = (float)(1.0 - pow((double)o->step, LOMO_DECAY_RATE));
  float *s = o->state + o->soff[ti], *u = o->upd;
  if (c > 1) {
    float *R = s, *C = s + r, *cinv = o->cinv;
    const float cw = (1.0f - beta2t) / (float)r;
    for (int j = 0; j < c; j++)
      C[j] *= beta2t;
    for (int i = 0; i < r; i++) {
      const float *gi = g + (size_t)i * c;
      float row = 0;
      for (int j = 0; j < c; j++) {
        float v = gi[j] * gi[j] + LOMO_EPS1;
        row += v;
        C[j] += cw * v;
      }
      R[i] = beta2t * R[i] + (1.0f - beta2t) * (row / (float)c);
    }
    double rmean = 0;
    for (int i = 0; i < r; i++)
      rmean += R[i];
    rmean /= r;
    for (int j = 0; j < c; j++) /* one square root per column, not per element */
      cinv[j] = 1.0f / sqrtf(C[j]);
    for (int i = 0; i < r; i++) {
      float rf = 1.0f / sqrtf((float)(R[i] / rmean));
      for (int j = 0; j < c; j++)
        u[(size_t)i * c + j] = g[(size_t)i * c + j] * rf * cinv[j];
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      s[i] = beta2t * s[i] + (1.0f - beta2t) * (g[i] * g[i] + LOMO_EPS1);
      u[i] = g[i] / sqrtf(s[i]);
    }
  }
  double uu = 0, pp = 0;
  for (size_t i = 0; i < n; i++) {
    uu += (double)u[i] * u[i];
    pp += (double)p[i] * p[i];
  }
  /* grouped update normalization: per tensor, RMS at most clip_threshold */
  double den = sqrt(uu / (double)n) / LOMO_CLIP_THRESHOLD;
  float inv = den > 1.0 ? (float)(1.0 / den) : 1.0f;
  float p_rms = (float)sqrt(pp / (double)n);
  float lr = o->lr * (p_rms > LOMO_EPS2 ? p_rms : LOMO_EPS2);
  float keep = 1.0f - lr * o->weight_decay;
  for (size_t i = 0; i < n; i++)
    p[i] = p[i] * keep - lr * (u[i] * inv);
}

/* The layer hook: n gradient elements from `off` are complete. */
static int lomo_hook(void *user, int layer, size_t off, size_t n) {
  acc_lomo_t *o = user;
  acc_model_t *m = o->model;
  float *g = m->grads + off, *p = m->params + off;
  if (acc_world_size(o->acc) > 1 && acc_all_reduce(o->acc, g, n, ACC_F32, ACC_AVG) != ACC_OK) {
    char why[512]; /* a copy: the message is rewritten in the same buffer */
    snprintf(why, sizeof why, "%s", acc_last_error(o->acc));
    o->hook_err = acc__set_error(o->acc, ACC_ERR_BACKEND,
                                 "LOMO: all-reduce of layer %d's gradient: %s", layer, why);
    return -1;
  }
  if (o->norm_pass) {
    double ss = 0;
    for (size_t i = 0; i < n; i++)
      ss += (double)g[i] * g[i];
    o->sumsq += ss;
  } else {
    if (o->clip_coef != 1.0f)
      for (size_t i = 0; i < n; i++)
        g[i] *= o->clip_coef;
    if (!o->adaptive) {
      for (size_t i = 0; i < n; i++)
        p[i] -= o->lr * g[i];
    } else {
      for (int ti = 0; ti < m->num_tensors; ti++) {
        size_t to = m->tensors[ti].offset;
        if (to >= off && to < off + n)
          adalomo_tensor(o, ti, m->params + to, m->grads + to);
      }
    }
  }
  memset(g, 0, n * sizeof(float));
  return 0;
}

/* One backward of the model with the hook in `norm_pass` mode. */
static acc_result_t run_backward(acc_lomo_t *o, int norm_pass) {
  o->norm_pass = norm_pass;
  o->hook_err = ACC_OK;
  acc__mlp_set_layer_hook(o->model->mlp, lomo_hook, o);
  int rc = o->model->backward(o->model->self);
  acc__mlp_set_layer_hook(o->model->mlp, NULL, NULL);
  if (rc != 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", acc_last_error(o->acc));
    return acc__set_error(o->acc,
                          strstr(why, "all-reduce") ? ACC_ERR_BACKEND : ACC_ERR_INVALID_ARGUMENT,
                          "LOMO: backward failed: %s", why);
  }
  return ACC_OK;
}

acc_result_t acc_lomo_backward(acc_lomo_t *o) {
  if (!o)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_lomo_backward: NULL optimizer");
  o->clip_coef = 1.0f;
  o->grad_norm = NAN;
  if (o->max_grad_norm > 0) {
    o->sumsq = 0;
    ACC_CHECK(run_backward(o, 1));
    float norm = (float)sqrt(o->sumsq);
    o->grad_norm = norm;
    float coef = (float)(o->max_grad_norm / ((double)norm + 1e-6));
    o->clip_coef = coef < 1.0f ? coef : 1.0f;
  }
  o->step++;
  acc_result_t r = run_backward(o, 0);
  if (r != ACC_OK)
    o->step--;
  return r;
}

static int lomo_check(acc_t *acc, const acc_model_t *model) {
  if (!acc || !model || !model->mlp || !model->tensors) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "LOMO/AdaLomo fuse the update into the toolkit MLP's backward (a per-layer "
                   "hook): the model must come from acc_mlp_model");
    return -1;
  }
  if (acc_device(acc) >= 0) {
    acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                   "LOMO/AdaLomo run on the host only: this rank's model is on device %d (use "
                   "--optim adamw or sgd there, or run on CPU processes)",
                   acc_device(acc));
    return -1;
  }
  return 0;
}

/* AdaLomo's state layout: per tensor R (rows) + C (cols), or S (rows). */
static int alloc_state(acc_lomo_t *o) {
  const acc_model_t *m = o->model;
  o->soff = calloc((size_t)m->num_tensors, sizeof *o->soff);
  size_t maxn = 1, maxc = 1;
  for (int ti = 0; o->soff && ti < m->num_tensors; ti++) {
    const acc_tensor_info_t *t = &m->tensors[ti];
    o->soff[ti] = o->state_n;
    o->state_n += (size_t)t->rows + (t->cols > 1 ? (size_t)t->cols : 0);
    if ((size_t)t->rows * (size_t)t->cols > maxn)
      maxn = (size_t)t->rows * (size_t)t->cols;
    if ((size_t)t->cols > maxc)
      maxc = (size_t)t->cols;
  }
  o->state = calloc(o->state_n ? o->state_n : 1, sizeof(float));
  o->upd = malloc(maxn * sizeof(float));
  o->cinv = malloc(maxc * sizeof(float));
  return o->soff && o->state && o->upd && o->cinv ? 0 : -1;
}

acc_lomo_t *acc_lomo_new(acc_t *acc, acc_model_t *model, int adaptive, float lr,
                         float max_grad_norm, float weight_decay) {
  if (lomo_check(acc, model))
    return NULL;
  acc_lomo_t *o = calloc(1, sizeof *o);
  if (o)
    *o = (acc_lomo_t){.acc = acc,
                      .model = model,
                      .adaptive = adaptive,
                      .lr = lr,
                      .max_grad_norm = max_grad_norm,
                      .weight_decay = weight_decay,
                      .grad_norm = NAN};
  if (!o || (adaptive && alloc_state(o))) {
    acc_lomo_destroy(&o);
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_lomo_new: no memory");
    return NULL;
  }
  /* backward adds into the buffer: start from zero */
  memset(model->grads, 0, model->num_params * sizeof(float));
  if (adaptive &&
      (acc_register_for_checkpointing(acc, "lomo.step", &o->step, sizeof o->step) ||
       acc_register_for_checkpointing(acc, "lomo.state", o->state, o->state_n * sizeof(float)))) {
    acc_lomo_destroy(&o);
    return NULL;
  }
  return o;
}

void acc_lomo_set_lr(acc_lomo_t *o, float lr) {
  if (o)
    o->lr = lr;
}

int64_t acc_lomo_num_steps(const acc_lomo_t *o) {
  return o ? o->step : 0;
}

double acc_lomo_grad_norm(const acc_lomo_t *o) {
  return o ? o->grad_norm : NAN;
}

size_t acc_lomo_state_bytes(const acc_lomo_t *o) {
  return o ? o->state_n * sizeof(float) : 0;
}

void acc_lomo_destroy(acc_lomo_t **o_p) {
  acc_lomo_t *o = NBF_TAKE(o_p);
  if (!o)
    return;
  if (o->acc && o->adaptive) {
    acc__unregister_for_checkpointing(o->acc, "lomo.step");
    acc__unregister_for_checkpointing(o->acc, "lomo.state");
  }
  free(o->state);
  free(o->soff);
  free(o->upd);
  free(o->cinv);
  free(o);
}
