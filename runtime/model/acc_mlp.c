/*
 * acc_mlp.c — a Linear/ReLU multi-layer perceptron on one flat parameter
 * buffer, f32, row-major, with forward and backward through CBLAS sgemm.
 *
 * Layout of `params` (and `grads`): for each layer l, its weight W_l
 * (sizes[l+1] × sizes[l], PyTorch's nn.Linear weight layout) followed by
 * its bias b_l (sizes[l+1]). Initialization is nn.Linear's default
 * (kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the
 * weight and the bias) drawn from the accelerator's RNG; with several
 * ranks, rank 0's parameters are then broadcast (as DDP does).
 *
 * Mixed precision (fp16/bf16, from the accelerator) emulates
 * torch.autocast on nn.Linear with an f32 master copy: the inputs and
 * weights of every product are rounded to the half type (a shadow copy of
 * the parameters, refreshed each forward), products accumulate in f32 and
 * their outputs are rounded to the half type, as are the gradients that
 * flow back and each layer's weight/bias gradient before it is added to
 * the f32 gradient buffer (the AccumulateGrad of a cast parameter). The
 * softmax cross-entropy runs in f32 (autocast's fp32 list). With fp16 the
 * gradient of the loss is multiplied by the loss scale (GradScaler.scale),
 * so the gradients leave backward scaled and acc_optim_step unscales them.
 * With precision "no" none of this runs and results are bit-identical to
 * plain f32.
 *
 * All buffers are allocated once for max_batch rows: a training step
 * allocates nothing.
 *
 * On a device (acc_device(acc) >= 0, built with a CUDA compiler) the
 * model is the device model of acc_mlp_cuda.h once initialized: params
 * and grads are device buffers, forward/backward run there, and the host
 * buffers here keep only the logits, copied back when asked for
 * (acc_mlp_logits, acc_mlp_forward, acc_mlp_predict), as the loss is
 * (acc_mlp_loss, acc_mlp_backward_xent): acc_mlp_forward_async and
 * acc_mlp_backward_xent_async wait for nothing (issue 25 item 4). A
 * device requested without cuBLAS is an error, not a host model. Both
 * sides run layer by layer under the same unit hooks and views, so a
 * sharded device model gathers one layer at a time into a unit buffer
 * and its full device buffers can be freed (acc__mlp_dev_buffer).
 */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "acc_mlp_cuda.h"
#include "nbf_util.h"

struct acc_mlp {
  acc_t *acc; /* borrowed: precision, loss scale, process group */
  int nlayers;
  int *sizes;
  int max_batch;
  int batch; /* rows of the last forward */
  size_t nparams;
  float *params, *grads;
  size_t *w_off, *b_off;
  const float *x;     /* input of the last forward (borrowed) */
  float **act;        /* act[l], l = 1..nlayers: batch × sizes[l] (post-ReLU; logits last) */
  float *dz_a, *dz_b; /* backward scratch: max_batch × max(sizes[1..]) */
  /* mixed precision (allocated at the first half-precision forward) */
  acc_precision_t prec;        /* of the last forward */
  float *wh;                   /* parameters rounded to the half type */
  float *xh;                   /* input rounded: max_batch × sizes[0] */
  float *gtmp;                 /* one layer's weight gradient: max(nout × nin) */
  acc_mlp_dev_t *dev;          /* the device model, or NULL (on the host) */
  int logits_host;             /* act[nlayers] holds the last forward's logits */
  int loss_host;               /* `loss` is the last backward's (else still on the device) */
  float loss;                  /* NaN before the first backward and after a failed one */
  acc__mlp_layer_hook_fn hook; /* called per layer in backward (LOMO), or NULL */
  void *hook_user;
  acc__mlp_unit_hook_fn uhook; /* around each layer's use (sharding, acc_shard.c), or NULL */
  void *uhook_user;
  /* unit views (acc__mlp_set_unit_view): per layer, NULL = the model's buffer */
  const float **view_p;
  float **view_g;
};

void acc__mlp_set_unit_hook(acc_mlp_t *m, acc__mlp_unit_hook_fn fn, void *user) {
  m->uhook = fn;
  m->uhook_user = user;
  for (int l = 0; l < m->nlayers; l++)
    m->view_p[l] = NULL, m->view_g[l] = NULL;
}

void acc__mlp_set_unit_view(acc_mlp_t *m, int l, const float *params, float *grads) {
  m->view_p[l] = params;
  m->view_g[l] = grads;
}

/* Layer l's parameters (weight then bias) and gradient: its unit view or
 * the model's buffer (a device model's device buffer). */
static const float *layer_params(const acc_mlp_t *m, int l) {
  if (m->view_p[l])
    return m->view_p[l];
  return (m->dev ? acc_mlp_dev_params(m->dev) : m->params) + m->w_off[l];
}
static float *layer_grads_buf(const acc_mlp_t *m, int l) {
  if (m->view_g[l])
    return m->view_g[l];
  return (m->dev ? acc_mlp_dev_grads(m->dev) : m->grads) + m->w_off[l];
}

/* Call the unit hook (when set) for `phase` of layer l: 0 when none is set
 * or it succeeded. */
static int unit_hook(acc_mlp_t *m, int phase, int l) {
  if (!m->uhook)
    return 0;
  size_t n = (size_t)m->sizes[l + 1] * (size_t)(m->sizes[l] + 1);
  return m->uhook(m->uhook_user, phase, l, m->w_off[l], n);
}

/* The half-precision shadow of layer l's parameters (weight then bias,
 * contiguous), rounded from the f32 master: elementwise, so refreshing
 * layer by layer equals refreshing the whole buffer at once. */
static void refresh_half(acc_mlp_t *m, int l) {
  size_t n = (size_t)m->sizes[l + 1] * (size_t)(m->sizes[l] + 1);
  memcpy(m->wh + m->w_off[l], layer_params(m, l), n * sizeof(float));
  acc__round_half(m->prec, m->wh + m->w_off[l], n);
}

void acc__mlp_set_layer_hook(acc_mlp_t *m, acc__mlp_layer_hook_fn fn, void *user) {
  m->hook = fn;
  m->hook_user = user;
}

static void *alloc64(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
    return NULL;
  return p;
}

void acc_mlp_destroy(acc_mlp_t **m_p) {
  acc_mlp_t *m = NBF_TAKE(m_p);
  if (!m)
    return;
  acc_mlp_dev_destroy(&m->dev);
  if (m->act)
    for (int l = 1; l <= m->nlayers; l++)
      free(m->act[l]);
  free(m->act);
  free(m->dz_a);
  free(m->dz_b);
  free(m->wh);
  free(m->xh);
  free(m->gtmp);
  free(m->params);
  free(m->grads);
  free(m->w_off);
  free(m->b_off);
  free(m->sizes);
  free(m->view_p);
  free(m->view_g);
  free(m);
}

/* A model-toolkit error: the model's accelerator keeps it
 * (acc_last_error) when there is one; without, one line on stderr says
 * it, since the NULL/NaN the call returns cannot (nbfork.h). */
static void mlp_error(acc_t *acc, acc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mlp_error(acc_t *acc, acc_result_t code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (acc)
    acc__set_error(acc, code, "%s", msg);
  else
    fprintf(stderr, "%s\n", msg);
}

acc_mlp_t *acc_mlp_new(acc_t *acc, const int *sizes, int nlayers, int max_batch) {
  if (!sizes || nlayers < 1 || max_batch < 1) {
    mlp_error(acc, ACC_ERR_INVALID_ARGUMENT,
              "acc_mlp_new: need sizes[0..nlayers], nlayers >= 1, max_batch >= 1");
    return NULL;
  }
  for (int l = 0; l <= nlayers; l++)
    if (sizes[l] < 1) {
      mlp_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_mlp_new: sizes[%d] = %d must be >= 1", l,
                sizes[l]);
      return NULL;
    }
  acc_mlp_t *m = calloc(1, sizeof *m);
  if (!m)
    goto oom;
  *m = (acc_mlp_t){.acc = acc, .nlayers = nlayers, .max_batch = max_batch};
  m->sizes = malloc((size_t)(nlayers + 1) * sizeof(int));
  m->w_off = malloc((size_t)nlayers * sizeof(size_t));
  m->b_off = malloc((size_t)nlayers * sizeof(size_t));
  m->act = calloc((size_t)nlayers + 1, sizeof(float *));
  m->view_p = calloc((size_t)nlayers, sizeof *m->view_p);
  m->view_g = calloc((size_t)nlayers, sizeof *m->view_g);
  if (!m->sizes || !m->w_off || !m->b_off || !m->act || !m->view_p || !m->view_g)
    goto oom;
  memcpy(m->sizes, sizes, (size_t)(nlayers + 1) * sizeof(int));
  size_t off = 0;
  int widest = 1;
  for (int l = 0; l < nlayers; l++) {
    m->w_off[l] = off;
    off += (size_t)sizes[l + 1] * (size_t)sizes[l];
    m->b_off[l] = off;
    off += (size_t)sizes[l + 1];
    if (sizes[l + 1] > widest)
      widest = sizes[l + 1];
  }
  m->nparams = off;
  m->params = alloc64(off * sizeof(float));
  m->grads = alloc64(off * sizeof(float));
  m->dz_a = alloc64((size_t)max_batch * (size_t)widest * sizeof(float));
  m->dz_b = alloc64((size_t)max_batch * (size_t)widest * sizeof(float));
  if (!m->params || !m->grads || !m->dz_a || !m->dz_b)
    goto oom;
  for (int l = 1; l <= nlayers; l++)
    if (!(m->act[l] = alloc64((size_t)max_batch * (size_t)sizes[l] * sizeof(float))))
      goto oom;
  memset(m->grads, 0, off * sizeof(float));
  for (int l = 0; l < nlayers; l++) {
    double bound = 1.0 / sqrt((double)sizes[l]);
    float *w = m->params + m->w_off[l], *b = m->params + m->b_off[l];
    size_t nw = (size_t)sizes[l + 1] * (size_t)sizes[l];
    for (size_t i = 0; i < nw; i++)
      w[i] = (float)((2.0 * acc_rand_uniform(acc) - 1.0) * bound);
    for (int i = 0; i < sizes[l + 1]; i++)
      b[i] = (float)((2.0 * acc_rand_uniform(acc) - 1.0) * bound);
  }
  /* a failed broadcast keeps its own error in acc_last_error */
  if (acc && acc->world > 1 && acc_broadcast(acc, m->params, m->nparams, ACC_F32, 0) != ACC_OK) {
    acc_mlp_destroy(&m);
    return NULL;
  }
  m->loss = NAN;
  m->loss_host = 1;
  if (acc && acc->device >= 0 && acc_mlp_dev_available()) {
    char err[512];
    /* no host fallback: the accelerator, its NCCL communicator and the
     * optimizers all expect device buffers, and a rank training on the
     * host beside ranks on GPUs would be a slow surprise */
    if (acc_mlp_dev_blas(err, sizeof err) != ACC_OK) {
      mlp_error(acc, ACC_ERR_BACKEND,
                "acc_mlp_new: a model on device %d needs cuBLAS, which could not be opened "
                "(%s): install cuBLAS of the CUDA toolkit nbfork was built with (on "
                "LD_LIBRARY_PATH or in ldconfig's cache), or set ACCELERATE_USE_CPU=1 to "
                "train on the CPU",
                acc->device, err);
      acc_mlp_destroy(&m);
      return NULL;
    }
    m->dev = acc_mlp_dev_new(sizes, nlayers, max_batch, m->params, m->nparams, err, sizeof err);
    if (!m->dev) {
      mlp_error(acc, ACC_ERR_BACKEND, "acc_mlp_new: the model on device %d: %s", acc->device, err);
      acc_mlp_destroy(&m);
      return NULL;
    }
  }
  return m;
oom:
  mlp_error(acc, ACC_ERR_NO_MEMORY, "acc_mlp_new: out of memory");
  acc_mlp_destroy(&m);
  return NULL;
}

size_t acc_mlp_num_params(const acc_mlp_t *m) {
  return m ? m->nparams : 0;
}
float *acc_mlp_params(acc_mlp_t *m) {
  return m ? (m->dev ? acc_mlp_dev_params(m->dev) : m->params) : NULL;
}
float *acc_mlp_grads(acc_mlp_t *m) {
  return m ? (m->dev ? acc_mlp_dev_grads(m->dev) : m->grads) : NULL;
}

void acc_mlp_zero_grad(acc_mlp_t *m) {
  if (!m)
    return;
  char err[512];
  if (!m->dev)
    memset(m->grads, 0, m->nparams * sizeof(float));
  else if (acc_mlp_dev_zero_grad(m->dev, m->acc->stream, err, sizeof err) != ACC_OK)
    mlp_error(m->acc, ACC_ERR_BACKEND, "acc_mlp_zero_grad: %s", err);
}

/* Allocate the half-precision buffers once. */
static int half_buffers(acc_mlp_t *m) {
  if (m->wh)
    return 0;
  size_t widest = 1;
  for (int l = 0; l < m->nlayers; l++) {
    size_t w = (size_t)m->sizes[l + 1] * (size_t)m->sizes[l];
    widest = w > widest ? w : widest;
  }
  m->wh = alloc64(m->nparams * sizeof(float));
  m->xh = alloc64((size_t)m->max_batch * (size_t)m->sizes[0] * sizeof(float));
  m->gtmp = alloc64(widest * sizeof(float));
  if (!m->wh || !m->xh || !m->gtmp) {
    free(m->wh), free(m->xh), free(m->gtmp);
    m->wh = m->xh = m->gtmp = NULL;
    return -1;
  }
  return 0;
}

/* The forward of a host model: the logits into act[nlayers]. */
static acc_result_t host_forward(acc_mlp_t *m, const float *x, int batch) {
  const float *in = x, *params = m->params;
  if (m->prec != ACC_PRECISION_NO) {
    if (half_buffers(m) != 0) {
      mlp_error(m->acc, ACC_ERR_NO_MEMORY,
                "acc_mlp_forward: out of memory for the half-precision buffers");
      return ACC_ERR_NO_MEMORY;
    }
    size_t nx = (size_t)batch * (size_t)m->sizes[0];
    memcpy(m->xh, x, nx * sizeof(float));
    acc__round_half(m->prec, m->xh, nx);
    in = m->xh;
    params = m->wh;
  }
  for (int l = 0; l < m->nlayers; l++) {
    const int nin = m->sizes[l], nout = m->sizes[l + 1];
    float *out = m->act[l + 1];
    /* a sharded model gathers the layer here (ACC__UNIT_FWD_BEGIN) */
    if (unit_hook(m, ACC__UNIT_FWD_BEGIN, l) != 0)
      return ACC_ERR_BACKEND; /* the hook's error is in acc_last_error */
    if (m->prec != ACC_PRECISION_NO)
      refresh_half(m, l);
    /* the bias follows the weight (b_off = w_off + nout·nin) */
    const float *w = m->prec == ACC_PRECISION_NO ? layer_params(m, l) : params + m->w_off[l];
    const float *b = w + (size_t)nout * (size_t)nin;
    for (int r = 0; r < batch; r++)
      memcpy(out + (size_t)r * nout, b, (size_t)nout * sizeof(float));
    /* out (batch × nout) += in (batch × nin) · W^T (nin × nout) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, nout, nin, 1.0f, in, nin, w, nin,
                1.0f, out, nout);
    size_t n = (size_t)batch * (size_t)nout;
    acc__round_half(m->prec, out, n); /* the layer's output in the half type */
    if (l < m->nlayers - 1) {
      for (size_t i = 0; i < n; i++)
        out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    }
    if (unit_hook(m, ACC__UNIT_FWD_END, l) != 0)
      return ACC_ERR_BACKEND;
    in = out;
  }
  return ACC_OK;
}

/* The forward of a device model, layer by layer under the unit hooks
 * (a sharded model gathers each layer into its unit buffer): the device
 * kernels read layer l's parameters wherever layer_params says. */
static acc_result_t device_forward(acc_mlp_t *m, const float *x, int batch) {
  char err[512];
  acc_result_t r =
      acc_mlp_dev_forward_begin(m->dev, x, batch, m->prec, m->acc->stream, err, sizeof err);
  for (int l = 0; r == ACC_OK && l < m->nlayers; l++) {
    if (unit_hook(m, ACC__UNIT_FWD_BEGIN, l) != 0)
      return ACC_ERR_BACKEND; /* the hook's error is in acc_last_error */
    r = acc_mlp_dev_forward_layer(m->dev, l, layer_params(m, l), err, sizeof err);
    if (r == ACC_OK && unit_hook(m, ACC__UNIT_FWD_END, l) != 0)
      return ACC_ERR_BACKEND;
  }
  if (r != ACC_OK)
    mlp_error(m->acc, r, "acc_mlp_forward on device %d: %s", m->acc->device, err);
  return r;
}

acc_result_t acc_mlp_forward_async(acc_mlp_t *m, const float *x, int batch) {
  if (!m || !x || batch < 1 || batch > m->max_batch) {
    if (m)
      mlp_error(m->acc, ACC_ERR_INVALID_ARGUMENT,
                "acc_mlp_forward: batch %d not in 1..%d (max_batch)", batch, m->max_batch);
    else
      mlp_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_mlp_forward: NULL model");
    return ACC_ERR_INVALID_ARGUMENT;
  }
  m->x = NULL; /* until this forward succeeds: no backward of a failed one */
  m->logits_host = 0;
  m->batch = batch;
  m->prec = acc_mixed_precision(m->acc);
  acc_result_t r;
  if (m->dev) {
    r = device_forward(m, x, batch);
  } else {
    r = host_forward(m, x, batch);
    m->logits_host = r == ACC_OK;
  }
  if (r == ACC_OK)
    m->x = x;
  return r;
}

const float *acc_mlp_logits(acc_mlp_t *m) {
  if (!m || !m->x) {
    mlp_error(m ? m->acc : NULL, ACC_ERR_INVALID_ARGUMENT,
              "acc_mlp_logits: call acc_mlp_forward first");
    return NULL;
  }
  float *logits = m->act[m->nlayers];
  if (!m->logits_host) {
    char err[512];
    acc_result_t r = acc_mlp_dev_logits(m->dev, logits, err, sizeof err);
    if (r != ACC_OK) {
      mlp_error(m->acc, r, "acc_mlp_forward: the logits from device %d: %s", m->acc->device, err);
      return NULL;
    }
    m->logits_host = 1;
  }
  return logits;
}

const float *acc_mlp_forward(acc_mlp_t *m, const float *x, int batch) {
  return acc_mlp_forward_async(m, x, batch) == ACC_OK ? acc_mlp_logits(m) : NULL;
}

/* Gradient buckets of about this size when they overlap the backward
 * pass (ACC_MLP_BUCKET_BYTES: the largest size at which the runtime's
 * all-reduce uses its lowest-latency algorithm, see acc_gloo.cc). */
#define ACC_MLP_BUCKET_BYTES (256u << 10)

/* 0: acc_backward all-reduces the whole buffer; 1/2: backward does it per
 * bucket (blocking / overlapping, acc->grad_buckets). Only when every
 * micro-step syncs (no accumulation window to leave unreduced). */
static int buckets_on(const acc_mlp_t *m) {
  const acc_t *acc = m->acc;
  if (!acc || acc->world < 2 || acc->accum_steps != 1 || acc->broken ||
      (!acc->gloo && !acc->node) || m->hook || m->uhook)
    return 0; /* a layer hook all-reduces its own layer before it updates it */
  return acc->grad_buckets;
}

/* Rows r0..r1-1 of layer l's weight gradient: gw += dz^T · in there. */
static void weight_grad_rows(acc_mlp_t *m, acc_precision_t prec, const float *dz, const float *in,
                             int B, int nin, int nout, int r0, int r1, float *gw) {
  const int rows = r1 - r0;
  float *g = gw + (size_t)r0 * (size_t)nin;
  if (prec == ACC_PRECISION_NO) {
    /* dW (rows × nin) += dz^T (rows × B) · in (B × nin) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, nin, B, 1.0f, dz + r0, nout, in, nin,
                1.0f, g, nin);
    return;
  }
  /* the half-precision gradient of the cast weight, then added to the
   * f32 gradient of the master weight */
  const size_t nw = (size_t)rows * (size_t)nin;
  float *restrict t = m->gtmp;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, nin, B, 1.0f, dz + r0, nout, in, nin,
              0.0f, t, nin);
  acc__round_half(prec, t, nw);
  for (size_t i = 0; i < nw; i++)
    g[i] += t[i];
}

/* The bias gradient: gb += column sums of dz (B × nout). */
static void bias_grad(acc_mlp_t *m, acc_precision_t prec, const float *dz, int B, int nout,
                      float *gb) {
  if (prec == ACC_PRECISION_NO) {
    for (int r = 0; r < B; r++) {
      const float *d = dz + (size_t)r * nout;
      for (int c = 0; c < nout; c++)
        gb[c] += d[c];
    }
    return;
  }
  float *restrict t = m->gtmp;
  for (int c = 0; c < nout; c++)
    t[c] = 0.0f;
  for (int r = 0; r < B; r++) {
    const float *d = dz + (size_t)r * nout;
    for (int c = 0; c < nout; c++)
      t[c] += d[c];
  }
  acc__round_half(prec, t, (size_t)nout);
  for (int c = 0; c < nout; c++)
    gb[c] += t[c];
}

/* acc_mlp_backward_xent_async of a device model, layer by layer under
 * the unit hooks (no gradient buckets there: acc_backward all-reduces
 * the device buffer through NCCL): a layer's input gradient first, then
 * BWD_WEIGHTS_DONE, then its weight gradient, as the host model's
 * sharded order (on one stream the values do not depend on it). */
static acc_result_t backward_on_device(acc_mlp_t *m, const int64_t *labels, float scale) {
  char err[512];
  int bad = -1;
  acc_result_t r =
      acc_mlp_dev_backward_begin(m->dev, labels, scale, &bad, m->acc->stream, err, sizeof err);
  if (r == ACC_ERR_INVALID_ARGUMENT && bad >= 0) {
    mlp_error(m->acc, r, "acc_mlp_backward_xent: label %lld of row %d is not in 0..%d",
              (long long)labels[bad], bad, m->sizes[m->nlayers] - 1);
    return r;
  }
  for (int l = m->nlayers - 1; r == ACC_OK && l >= 0; l--) {
    if (unit_hook(m, ACC__UNIT_BWD_BEGIN, l) != 0)
      return ACC_ERR_BACKEND; /* the hook's error is in acc_last_error */
    r = acc_mlp_dev_backward_input(m->dev, l, layer_params(m, l), err, sizeof err);
    if (r == ACC_OK && unit_hook(m, ACC__UNIT_BWD_WEIGHTS_DONE, l) != 0)
      return ACC_ERR_BACKEND;
    if (r == ACC_OK)
      r = acc_mlp_dev_backward_weights(m->dev, l, layer_grads_buf(m, l), err, sizeof err);
    if (r == ACC_OK && unit_hook(m, ACC__UNIT_BWD_END, l) != 0)
      return ACC_ERR_BACKEND;
  }
  if (r != ACC_OK)
    mlp_error(m->acc, r, "acc_mlp_backward_xent on device %d: %s", m->acc->device, err);
  return r;
}

/* dz (B × C) = (softmax(logits) - onehot(label)) / B × scale, rounded to
 * the model's precision; *loss gets the summed (not averaged) loss.
 * Returns -1 after a label outside 0..C-1 (the error is set), else 0. */
static int xent_grad(acc_mlp_t *m, const int64_t *labels, float scale, float *dz,
                     double *loss_out) {
  const int B = m->batch, C = m->sizes[m->nlayers];
  const float *logits = m->act[m->nlayers];
  const float invB = 1.0f / (float)B;
  double loss = 0.0;
  for (int r = 0; r < B; r++) {
    const float *z = logits + (size_t)r * C;
    float *d = dz + (size_t)r * C;
    int64_t y = labels[r];
    if (y < 0 || y >= C) {
      mlp_error(m->acc, ACC_ERR_INVALID_ARGUMENT,
                "acc_mlp_backward_xent: label %lld of row %d is not in 0..%d", (long long)y, r,
                C - 1);
      return -1;
    }
    float mx = z[0];
    for (int c = 1; c < C; c++)
      mx = z[c] > mx ? z[c] : mx;
    float s = 0.0f;
    for (int c = 0; c < C; c++) {
      d[c] = expf(z[c] - mx);
      s += d[c];
    }
    loss += (double)(logf(s) + mx - z[y]);
    float inv = invB / s;
    for (int c = 0; c < C; c++)
      d[c] *= inv;
    d[y] -= invB;
    if (scale != 1.0f)
      for (int c = 0; c < C; c++)
        d[c] *= scale;
  }
  acc__round_half(m->prec, dz, (size_t)B * (size_t)C);
  *loss_out = loss;
  return 0;
}

/* Layer l's weight and bias gradients from dz, added into the gradient
 * buffer; with buckets on, each block's all-reduce is started as soon as
 * the block is complete. Returns the first bucket error (later buckets are
 * not started after one fails), else bucket_err as given. */
static acc_result_t layer_grads(acc_mlp_t *m, int l, const float *dz, const float *in, int bucketed,
                                acc_result_t bucket_err) {
  const int B = m->batch, nin = m->sizes[l], nout = m->sizes[l + 1];
  float *gw = layer_grads_buf(m, l);
  /* The weight gradient in row blocks when its all-reduce can overlap:
   * each block's all-reduce runs on the worker thread while the next
   * block is computed; the bias goes with the last block (W then b are
   * contiguous, so every bucket is one slice of the buffer). */
  int rows = nout;
  if (bucketed == 2) {
    size_t bytes = (size_t)nout * (size_t)nin * sizeof(float);
    size_t nblocks = (bytes + ACC_MLP_BUCKET_BYTES - 1) / ACC_MLP_BUCKET_BYTES;
    rows = (int)(((size_t)nout + nblocks - 1) / nblocks);
  }
  for (int r0 = 0; r0 < nout; r0 += rows) {
    const int r1 = r0 + rows < nout ? r0 + rows : nout;
    weight_grad_rows(m, m->prec, dz, in, B, nin, nout, r0, r1, gw);
    if (r1 == nout)
      bias_grad(m, m->prec, dz, B, nout, gw + (size_t)nout * (size_t)nin);
    if (bucketed && bucket_err == ACC_OK) {
      size_t n = (size_t)(r1 - r0) * (size_t)nin + (r1 == nout ? (size_t)nout : 0);
      bucket_err = acc__all_reduce_bucket(m->acc, gw + (size_t)r0 * (size_t)nin, n);
    }
  }
  return bucket_err;
}

/* dprev (B × nin) = dz (B × nout) · W_l (nout × nin), masked by the ReLU of
 * layer l's input. */
static void input_grad(acc_mlp_t *m, int l, const float *dz, const float *in, float *dprev) {
  const int B = m->batch, nin = m->sizes[l], nout = m->sizes[l + 1];
  const float *w = m->prec == ACC_PRECISION_NO ? layer_params(m, l) : m->wh + m->w_off[l];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, nin, nout, 1.0f, dz, nout, w, nin, 0.0f,
              dprev, nin);
  size_t n = (size_t)B * (size_t)nin;
  acc__round_half(m->prec, dprev, n);
  /* a select, not a conditional store: the compiler vectorizes it (the
   * branch on the sign of each activation was most of the backward's own
   * time, perf); the same values: tests/runtime/test_mlp.c host_backward_* */
  for (size_t i = 0; i < n; i++)
    dprev[i] = in[i] > 0.0f ? dprev[i] : 0.0f;
}

/* Waits for the bucketed all-reduces; when all succeeded, acc_backward
 * need not all-reduce the gradients again. A failed all-reduce keeps its
 * error in acc_last_error and acc_backward reports it. */
static void finish_buckets(acc_mlp_t *m, acc_result_t bucket_err) {
  acc_result_t w = acc__wait_buckets(m->acc);
  if (bucket_err == ACC_OK)
    bucket_err = w;
  if (bucket_err == ACC_OK) {
    m->acc->grads_synced = m->grads;
    m->acc->grads_synced_n = m->nparams;
  }
}

/* The backward of a host model; *loss_out = the batch's mean loss. */
static acc_result_t host_backward(acc_mlp_t *m, const int64_t *labels, float scale,
                                  float *loss_out) {
  const int B = m->batch, L = m->nlayers;
  const acc_precision_t prec = m->prec;
  float *dz = m->dz_a, *dprev = m->dz_b;
  double loss = 0.0;
  if (xent_grad(m, labels, scale, dz, &loss) != 0)
    return ACC_ERR_INVALID_ARGUMENT;
  const int bucketed = buckets_on(m);
  acc_result_t bucket_err = ACC_OK;
  for (int l = L - 1; l >= 0; l--) {
    const int nin = m->sizes[l], nout = m->sizes[l + 1];
    const float *in = l == 0 ? (prec == ACC_PRECISION_NO ? m->x : m->xh) : m->act[l];
    if (unit_hook(m, ACC__UNIT_BWD_BEGIN, l) != 0)
      return ACC_ERR_BACKEND;
    if (m->uhook && prec != ACC_PRECISION_NO)
      refresh_half(m, l); /* a sharded model released it after the forward */
    /* sharded (a unit hook): W_l's last read first, so that its gathered
     * copy goes before the weight gradient is written; the two products
     * are independent (the values do not depend on the order) */
    if (!m->uhook)
      bucket_err = layer_grads(m, l, dz, in, bucketed, bucket_err);
    if (l > 0)
      input_grad(m, l, dz, in, dprev);
    if (m->uhook) {
      if (unit_hook(m, ACC__UNIT_BWD_WEIGHTS_DONE, l) != 0)
        return ACC_ERR_BACKEND;
      bucket_err = layer_grads(m, l, dz, in, bucketed, bucket_err);
    }
    /* layer l's gradient is complete and W_l no longer needed by this
     * backward (as a PyTorch hook on AccumulateGrad sees it) */
    if (m->hook && m->hook(m->hook_user, l, m->w_off[l], (size_t)nout * (size_t)(nin + 1)) != 0)
      return ACC_ERR_BACKEND; /* the hook's error is in acc_last_error */
    if (unit_hook(m, ACC__UNIT_BWD_END, l) != 0)
      return ACC_ERR_BACKEND;
    float *t = dz;
    dz = dprev;
    dprev = t;
  }
  if (bucketed)
    finish_buckets(m, bucket_err);
  *loss_out = (float)(loss / B);
  return ACC_OK;
}

acc_result_t acc_mlp_backward_xent_async(acc_mlp_t *m, const int64_t *labels) {
  if (!m || !labels || !m->x) {
    mlp_error(m ? m->acc : NULL, ACC_ERR_INVALID_ARGUMENT,
              "acc_mlp_backward_xent: call acc_mlp_forward first");
    return ACC_ERR_INVALID_ARGUMENT;
  }
  /* GradScaler.scale(loss): with fp16 the loss gradient is multiplied by
   * the loss scale (the returned loss is not). */
  const float scale = m->prec == ACC_PRECISION_FP16 ? acc_loss_scale(m->acc) : 1.0f;
  m->loss = NAN;
  m->loss_host = 1;
  if (!m->dev)
    return host_backward(m, labels, scale, &m->loss);
  acc_result_t r = backward_on_device(m, labels, scale);
  m->loss_host = r != ACC_OK; /* after a success the loss is on the device */
  return r;
}

float acc_mlp_loss(acc_mlp_t *m) {
  if (!m)
    return NAN;
  if (!m->loss_host) {
    char err[512];
    acc_result_t r = acc_mlp_dev_loss(m->dev, &m->loss, err, sizeof err);
    if (r != ACC_OK) {
      mlp_error(m->acc, r, "acc_mlp_loss: the loss from device %d: %s", m->acc->device, err);
      m->loss = NAN;
    }
    m->loss_host = 1;
  }
  return m->loss;
}

float acc_mlp_backward_xent(acc_mlp_t *m, const int64_t *labels) {
  return acc_mlp_backward_xent_async(m, labels) == ACC_OK ? acc_mlp_loss(m) : NAN;
}

void acc_mlp_predict(const acc_mlp_t *m, int64_t *pred) {
  if (!m || !pred || !m->x)
    return;
  const int C = m->sizes[m->nlayers];
  /* a device model's logits come back on first use: the host copy is a
   * cache, which a const model may fill (no model is defined const) */
  const float *z = acc_mlp_logits((acc_mlp_t *)m);
  if (!z)
    return;
  for (int r = 0; r < m->batch; r++, z += C) {
    int best = 0;
    for (int c = 1; c < C; c++)
      if (z[c] > z[best])
        best = c;
    pred[r] = best;
  }
}

float *acc__mlp_host(acc_mlp_t *m, int what) {
  float *host = what ? m->grads : m->params;
  char err[512];
  if (m->dev && acc_mlp_dev_copy(m->dev, what, host, 0, err, sizeof err) != ACC_OK) {
    mlp_error(m->acc, ACC_ERR_BACKEND, "copying the model from device %d: %s", m->acc->device, err);
    return NULL;
  }
  return host;
}

float *acc__mlp_host_buffer(acc_mlp_t *m, int what) {
  return what == 2 ? m->wh : what ? m->grads : m->params;
}

acc_result_t acc__mlp_upload(acc_mlp_t *m, int what) {
  char err[512];
  if (m->dev &&
      acc_mlp_dev_copy(m->dev, what, what ? m->grads : m->params, 1, err, sizeof err) != ACC_OK) {
    mlp_error(m->acc, ACC_ERR_BACKEND, "copying the model to device %d: %s", m->acc->device, err);
    return ACC_ERR_BACKEND;
  }
  return ACC_OK;
}

acc_result_t acc__mlp_dev_buffer(acc_mlp_t *m, int what, int keep) {
  char err[512];
  if (!m->dev)
    return ACC_OK;
  acc_result_t r = acc_mlp_dev_buffer(m->dev, what, keep, err, sizeof err);
  if (r != ACC_OK)
    mlp_error(m->acc, r, "%s the model's %s on device %d: %s", keep ? "allocating" : "freeing",
              what ? "gradients" : "parameters", m->acc->device, err);
  return r;
}

int acc__mlp_max_batch(const acc_mlp_t *m) {
  return m->max_batch;
}

const int *acc__mlp_sizes(const acc_mlp_t *m, int *nlayers) {
  *nlayers = m->nlayers;
  return m->sizes;
}
