/*
 * acc_galore.c — GaLore (Zhao et al., "GaLore: Memory-Efficient LLM
 * Training by Gradient Low-Rank Projection", ICML 2024), as galore_torch's
 * GaLoreAdamW with the "std" projector, which Transformers uses for
 * optim="galore_adamw":
 *   for a target weight G (m × n), every update_proj_gap steps (and at
 *   the first) P comes from the SVD of the gradient: m >= n: P = Vᵀ[:r]
 *   (r × n), R = G Pᵀ; m < n: P = U[:, :r] (m × r), R = Pᵀ G;
 *   Adam moments of R (the low-rank space), N = m̂ / (sqrt(v) + eps) with
 *   step size lr·sqrt(1 - β2ᵗ)/(1 - β1ᵗ); the update projected back
 *   (N P, or P N) times `scale`; then p -= lr·weight_decay·p.
 *   Other parameters: the same Adam step without projection.
 * The SVD is LAPACK's sgesvd (OpenBLAS exports it). All state (step
 * count, projectors, moments) lives in one float block, registered for
 * checkpointing as "galore.state".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "acc_internal.h"
#include "acc_nccl.h"
#include "nbf_util.h"

/* LAPACK (Fortran ABI, with the hidden lengths of the character arguments). */
void sgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, float *a,
             const int *lda, float *s, float *u, const int *ldu, float *vt, const int *ldvt,
             float *work, const int *lwork, int *info, size_t jobu_len, size_t jobvt_len);

typedef struct {
  size_t offset;     /* of the weight in the model's flat buffers */
  int rows, cols, r; /* r: rank, at most min(rows, cols) */
  int right;         /* rows >= cols: P is r × cols, else rows × r */
  float *P, *m, *v;  /* into the state block */
} gl_tensor_t;

struct acc_galore {
  acc_t *acc;
  float *params, *grads;
  size_t n;
  float lr, beta1, beta2, eps, weight_decay, scale;
  int gap;
  gl_tensor_t t[64];
  int nt;
  unsigned char *is_target; /* per parameter */
  int64_t step;
  float *state; /* every target's P, m, v, then the other parameters' m, v */
  size_t state_n;
  float *om, *ov;               /* moments of the other parameters, packed */
  float *a, *s, *u, *vt, *work; /* SVD */
  float *low, *full;            /* projected gradient / update, back-projected update */
  int lwork;
};

/* Which tensors GaLore projects: 2-D ones whose name contains one of the
 * comma-separated `targets` (Transformers matches module names so). */
static int is_target(const acc_tensor_info_t *ti, const char *targets) {
  if (ti->cols <= 1 || ti->rows <= 1)
    return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", targets);
  char *save = NULL;
  for (char *k = strtok_r(buf, ", ", &save); k; k = strtok_r(NULL, ", ", &save))
    if (strstr(ti->name, k))
      return 1;
  return 0;
}

static size_t p_len(const gl_tensor_t *t) {
  return (size_t)t->r * (size_t)(t->right ? t->cols : t->rows);
}
static size_t low_len(const gl_tensor_t *t) {
  return (size_t)t->r * (size_t)(t->right ? t->rows : t->cols);
}

void acc_galore_destroy(acc_galore_t **g_p) {
  acc_galore_t *g = NBF_TAKE(g_p);
  if (!g)
    return;
  acc__unregister_for_checkpointing(g->acc, "galore.step");
  acc__unregister_for_checkpointing(g->acc, "galore.state");
  free(g->is_target), free(g->state), free(g->a), free(g->s), free(g->u), free(g->vt);
  free(g->work), free(g->low), free(g->full);
  free(g);
}

/* Pick the targets, size the state block and the SVD workspace. */
static acc_result_t plan(acc_galore_t *g, const acc_model_t *m, const char *targets, int rank) {
  size_t need = 0, maxfull = 0, maxlow = 0;
  int maxmn = 0;
  for (int i = 0; i < m->num_tensors; i++) {
    const acc_tensor_info_t *ti = &m->tensors[i];
    if (!is_target(ti, targets))
      continue;
    if (g->nt == 64)
      return acc__set_error(g->acc, ACC_ERR_INVALID_ARGUMENT, "GaLore: at most 64 target tensors");
    gl_tensor_t *t = &g->t[g->nt++];
    *t = (gl_tensor_t){ti->offset, ti->rows, ti->cols, 0, ti->rows >= ti->cols, 0, 0, 0};
    int mn = ti->rows < ti->cols ? ti->rows : ti->cols;
    t->r = rank < mn ? rank : mn;
    need += p_len(t) + 2 * low_len(t);
    size_t full = (size_t)ti->rows * (size_t)ti->cols;
    maxfull = full > maxfull ? full : maxfull;
    maxlow = low_len(t) > maxlow ? low_len(t) : maxlow;
    maxmn = mn > maxmn ? mn : maxmn;
    memset(g->is_target + ti->offset, 1, full);
  }
  if (g->nt == 0)
    return acc__set_error(g->acc, ACC_ERR_INVALID_ARGUMENT,
                          "GaLore: no 2-D parameter matches optim_target_modules '%s'", targets);
  size_t others = 0;
  for (size_t k = 0; k < g->n; k++)
    others += !g->is_target[k];
  g->state_n = need + 2 * others;
  g->state = calloc(g->state_n, sizeof(float));
  g->a = malloc(maxfull * sizeof(float));
  g->full = malloc(maxfull * sizeof(float));
  g->s = malloc((size_t)maxmn * sizeof(float));
  g->u = malloc(maxfull * sizeof(float));
  g->vt = malloc(maxfull * sizeof(float));
  g->low = malloc(2 * maxlow * sizeof(float));
  if (!g->state || !g->a || !g->full || !g->s || !g->u || !g->vt || !g->low)
    return acc__set_error(g->acc, ACC_ERR_NO_MEMORY, "GaLore: no memory");
  float *p = g->state;
  for (int i = 0; i < g->nt; i++) {
    gl_tensor_t *t = &g->t[i];
    t->P = p, p += p_len(t);
    t->m = p, p += low_len(t);
    t->v = p, p += low_len(t);
  }
  g->om = p;
  g->ov = p + others;
  return ACC_OK;
}

/* Workspace of sgesvd for the largest shape (a query per target). */
static acc_result_t query_work(acc_galore_t *g) {
  int lwork = 1;
  for (int i = 0; i < g->nt; i++) {
    int m = g->t[i].cols, n = g->t[i].rows, k = m < n ? m : n, lw = -1, info = 0;
    float q = 0;
    sgesvd_("S", "S", &m, &n, g->a, &m, g->s, g->u, &m, g->vt, &k, &q, &lw, &info, 1, 1);
    if (info == 0 && (int)q > lwork)
      lwork = (int)q;
  }
  g->lwork = lwork;
  g->work = malloc((size_t)lwork * sizeof(float));
  return g->work ? ACC_OK : acc__set_error(g->acc, ACC_ERR_NO_MEMORY, "GaLore: no memory");
}

acc_galore_t *acc_galore_new(acc_t *acc, const acc_model_t *model, const char *target_modules,
                             int rank, int update_proj_gap, float scale, float lr, float beta1,
                             float beta2, float eps, float weight_decay) {
  if (!model || !model->params || !target_modules || rank < 1 || update_proj_gap < 1 || lr < 0 ||
      beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "GaLore: need a model, optim_target_modules, rank >= 1, update_proj_gap >= 1 "
                   "and betas in [0, 1)");
    return NULL;
  }
  if (acc && acc_device(acc) >= 0 && acc_nccl_is_device_ptr(model->params)) {
    /* its projections and Adam state are host BLAS over the parameters */
    acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                   "GaLore runs on the host only: this rank's model is on device %d (use --optim "
                   "adamw or sgd there, or run on CPU processes)",
                   acc_device(acc));
    return NULL;
  }
  acc_galore_t *g = calloc(1, sizeof *g);
  if (!g || !(g->is_target = calloc(model->num_params, 1))) {
    free(g);
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "GaLore: no memory");
    return NULL;
  }
  *g = (acc_galore_t){.acc = acc,
                      .params = model->params,
                      .grads = model->grads,
                      .n = model->num_params,
                      .lr = lr,
                      .beta1 = beta1,
                      .beta2 = beta2,
                      .eps = eps,
                      .weight_decay = weight_decay,
                      .scale = scale,
                      .gap = update_proj_gap,
                      .is_target = g->is_target};
  if (plan(g, model, target_modules, rank) != ACC_OK || query_work(g) != ACC_OK ||
      (acc &&
       (acc_register_for_checkpointing(acc, "galore.step", &g->step, sizeof g->step) ||
        acc_register_for_checkpointing(acc, "galore.state", g->state, g->state_n * sizeof(float)))))
    acc_galore_destroy(&g);
  return g;
}

/* P from the SVD of the gradient G (rows × cols, row-major). LAPACK is
 * column-major: it sees A = Gᵀ (cols × rows) = U_a S Vt_a, so G's right
 * singular vectors are U_a's columns and its left ones Vt_a's rows. */
static acc_result_t projector(acc_galore_t *g, gl_tensor_t *t, const float *G) {
  int m = t->cols, n = t->rows, k = m < n ? m : n, info = 0;
  memcpy(g->a, G, (size_t)m * (size_t)n * sizeof(float));
  sgesvd_("S", "S", &m, &n, g->a, &m, g->s, g->u, &m, g->vt, &k, g->work, &g->lwork, &info, 1, 1);
  if (info != 0)
    return acc__set_error(g->acc, ACC_ERR_BACKEND, "GaLore: sgesvd failed (info %d)", info);
  if (t->right) /* P = Vᵀ[:r]: the first r columns of U_a, each `cols` long */
    memcpy(t->P, g->u, p_len(t) * sizeof(float));
  else /* P = U[:, :r]: P[i][j] = Vt_a[j][i] */
    for (int i = 0; i < t->rows; i++)
      for (int j = 0; j < t->r; j++)
        t->P[(size_t)i * t->r + j] = g->vt[j + (size_t)i * k];
  return ACC_OK;
}

/* m, v of `n` values from gradient `x`; x becomes m / (sqrt(v) + eps). */
static void adam_low(float *restrict x, float *restrict m, float *restrict v, size_t n, float b1,
                     float b2, float eps) {
  for (size_t i = 0; i < n; i++) {
    m[i] = b1 * m[i] + (1 - b1) * x[i];
    v[i] = b2 * v[i] + (1 - b2) * x[i] * x[i];
    x[i] = m[i] / (sqrtf(v[i]) + eps);
  }
}

static acc_result_t step_target(acc_galore_t *g, gl_tensor_t *t, float step_size) {
  const int M = t->rows, Nc = t->cols, r = t->r;
  float *G = g->grads + t->offset, *W = g->params + t->offset, *R = g->low;
  if (g->step == 1 || g->step % g->gap == 0)
    ACC_CHECK(projector(g, t, G));
  if (t->right) /* R = G Pᵀ (M × r) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r, Nc, 1.0f, G, Nc, t->P, Nc, 0.0f, R,
                r);
  else /* R = Pᵀ G (r × Nc) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, Nc, M, 1.0f, t->P, r, G, Nc, 0.0f, R,
                Nc);
  adam_low(R, t->m, t->v, low_len(t), g->beta1, g->beta2, g->eps);
  if (t->right) /* back: R P (M × Nc) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, Nc, r, 1.0f, R, r, t->P, Nc, 0.0f,
                g->full, Nc);
  else /* back: P R */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, Nc, r, 1.0f, t->P, r, R, Nc, 0.0f,
                g->full, Nc);
  const float a = step_size * g->scale, wd = g->lr * g->weight_decay;
  for (size_t i = 0; i < (size_t)M * (size_t)Nc; i++) {
    W[i] -= a * g->full[i];
    if (wd > 0)
      W[i] -= wd * W[i];
  }
  return ACC_OK;
}

acc_result_t acc_galore_step(acc_galore_t *g) {
  if (!g)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_galore_step: NULL");
  g->step++;
  const double bc1 = 1.0 - pow(g->beta1, (double)g->step),
               bc2 = 1.0 - pow(g->beta2, (double)g->step);
  const float step_size = (float)(g->lr * sqrt(bc2) / bc1), wd = g->lr * g->weight_decay;
  for (int i = 0; i < g->nt; i++)
    ACC_CHECK(step_target(g, &g->t[i], step_size));
  size_t j = 0;
  for (size_t k = 0; k < g->n; k++) {
    if (g->is_target[k])
      continue;
    float x = g->grads[k];
    adam_low(&x, &g->om[j], &g->ov[j], 1, g->beta1, g->beta2, g->eps);
    j++;
    g->params[k] -= step_size * x;
    if (wd > 0)
      g->params[k] -= wd * g->params[k];
  }
  return ACC_OK;
}

void acc_galore_set_lr(acc_galore_t *g, float lr) {
  if (g && lr >= 0)
    g->lr = lr;
}

size_t acc_galore_state_bytes(const acc_galore_t *g) {
  return g ? g->state_n * sizeof(float) : 0;
}
