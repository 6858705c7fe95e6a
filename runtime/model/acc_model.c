/*
 * acc_model.c — the model interface the Trainer drives (acc_model_t,
 * nbf_trainer.h) for the toolkit's MLP: forward + softmax cross-entropy,
 * backward, predict, and the named tensors of its flat buffer (weight
 * W_l then bias b_l per layer, acc_mlp.c's layout), named as PyTorch's
 * named_parameters names an nn.Sequential's Linear layers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "acc_internal.h"

typedef struct {
  acc_mlp_t *m;
  int batch, ncls;
  const int64_t *labels; /* of the last forward_loss (borrowed) */
  acc_tensor_info_t tensors[];
} mlp_adapter_t;

/* Mean softmax cross-entropy of `batch` rows of `logits` (f32, as
 * acc_mlp_backward_xent computes it); NaN on a label out of range. */
static float xent(const float *logits, const int64_t *y, int batch, int ncls) {
  double loss = 0.0;
  for (int r = 0; r < batch; r++) {
    const float *z = logits + (size_t)r * ncls;
    if (y[r] < 0 || y[r] >= ncls) {
      acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "label %lld of row %d is not in 0..%d",
                     (long long)y[r], r, ncls - 1);
      return NAN;
    }
    float mx = z[0], s = 0.0f;
    for (int c = 1; c < ncls; c++)
      mx = z[c] > mx ? z[c] : mx;
    for (int c = 0; c < ncls; c++)
      s += expf(z[c] - mx);
    loss += (double)(logf(s) + mx - z[y[r]]);
  }
  return (float)(loss / batch);
}

static float mlp_forward_loss(void *self, const float *x, const int64_t *labels, int batch,
                              int training) {
  (void)training; /* the MLP has no dropout */
  mlp_adapter_t *a = self;
  const float *logits = acc_mlp_forward(a->m, x, batch);
  if (!logits)
    return NAN;
  a->batch = batch;
  a->labels = labels;
  return xent(logits, labels, batch, a->ncls);
}

/* The loss was taken from the logits in forward_loss: on a device the
 * backward need not wait for its own copy of it (issue 25 item 4). */
static int mlp_backward(void *self) {
  mlp_adapter_t *a = self;
  return acc_mlp_backward_xent_async(a->m, a->labels) == ACC_OK ? 0 : -1;
}

static void mlp_predict(void *self, int64_t *pred) {
  mlp_adapter_t *a = self;
  acc_mlp_predict(a->m, pred);
}

acc_result_t acc_mlp_model(acc_mlp_t *m, acc_model_t *out) {
  if (!m || !out)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_mlp_model: NULL model or output");
  int L = 0;
  const int *sizes = acc__mlp_sizes(m, &L);
  mlp_adapter_t *a = calloc(1, sizeof *a + 2 * (size_t)L * sizeof(acc_tensor_info_t));
  if (!a)
    return acc__set_error(NULL, ACC_ERR_NO_MEMORY, "acc_mlp_model: no memory");
  a->m = m;
  a->ncls = sizes[L];
  size_t off = 0;
  for (int l = 0; l < L; l++) {
    acc_tensor_info_t *w = &a->tensors[2 * l], *b = w + 1;
    snprintf(w->name, sizeof w->name, "layers.%d.weight", l);
    w->offset = off;
    w->rows = sizes[l + 1];
    w->cols = sizes[l];
    off += (size_t)w->rows * (size_t)w->cols;
    snprintf(b->name, sizeof b->name, "layers.%d.bias", l);
    b->offset = off;
    b->rows = sizes[l + 1];
    b->cols = 1;
    off += (size_t)b->rows;
  }
  *out = (acc_model_t){.self = a,
                       .params = acc_mlp_params(m),
                       .grads = acc_mlp_grads(m),
                       .num_params = acc_mlp_num_params(m),
                       .tensors = a->tensors,
                       .num_tensors = 2 * L,
                       .input_dim = sizes[0],
                       .forward_loss = mlp_forward_loss,
                       .backward = mlp_backward,
                       .predict = mlp_predict,
                       .mlp = m,
                       .owned = a,
                       .max_batch = acc__mlp_max_batch(m)};
  return ACC_OK;
}

void acc_model_release(acc_model_t *model) {
  if (!model)
    return;
  free(model->owned);
  model->owned = NULL;
}
