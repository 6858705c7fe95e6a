/*
 * rt_mlp.h — for the tests that train an MLP on Fashion-MNIST: the test
 * set's accuracy as a training loop computes it (each rank scores its
 * shard, acc_gather_for_metrics counts every image exactly once).
 */
#ifndef RT_MLP_H
#define RT_MLP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"
#include "rt_test.h"

#define RT_FMNIST "/usr/share/datasets/fashion-mnist/"

/* Fashion-MNIST for a training test: the first n_train training images
 * scaled to [0, 1] (X, n_train × 784) and their labels (y), the first
 * n_test test images (XT) and labels (yt). */
typedef struct {
  acc_idx_t *xi, *yi, *xt, *yt;
  float *X, *XT;
  const uint8_t *y, *ty;
} rt_fmnist_t;

static inline void rt_fmnist_load(rt_fmnist_t *d, size_t n_train, size_t n_test) {
  d->xi = acc_idx_read(RT_FMNIST "train-images-idx3-ubyte.gz");
  d->yi = acc_idx_read(RT_FMNIST "train-labels-idx1-ubyte.gz");
  d->xt = acc_idx_read(RT_FMNIST "t10k-images-idx3-ubyte.gz");
  d->yt = acc_idx_read(RT_FMNIST "t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(d->xi && d->yi && d->xt && d->yt);
  d->X = malloc(n_train * 784 * sizeof(float));
  d->XT = malloc(n_test * 784 * sizeof(float));
  for (size_t i = 0; i < n_train * 784; i++)
    d->X[i] = d->xi->u8[i] / 255.0f;
  for (size_t i = 0; i < n_test * 784; i++)
    d->XT[i] = d->xt->u8[i] / 255.0f;
  d->y = d->yi->u8;
  d->ty = d->yt->u8;
}

static inline void rt_fmnist_free(rt_fmnist_t *d) {
  acc_idx_destroy(&d->xi), acc_idx_destroy(&d->yi);
  acc_idx_destroy(&d->xt), acc_idx_destroy(&d->yt);
  free(d->X), free(d->XT);
}

/* What a Fashion-MNIST training test sets up on `acc`: the data
 * (rt_fmnist_load), a 784-256-10 MLP for batches of 64, SGD (lr 0.1,
 * momentum 0.9), a shuffled sampler over the training images and the
 * batch buffers. */
typedef struct {
  rt_fmnist_t d;
  acc_mlp_t *m;
  acc_optim_t *o;
  acc_sampler_t *s;
  float *xb; /* 64 × 784 */
  int64_t yb[64];
} rt_fmnist_run_t;

static inline void rt_fmnist_run_new(rt_fmnist_run_t *r, acc_t *acc, size_t n_train,
                                     size_t n_test) {
  static const int sizes[] = {784, 256, 10};
  rt_fmnist_load(&r->d, n_train, n_test);
  r->m = acc_mlp_new(acc, sizes, 2, 64);
  r->o = acc_sgd_new(acc_mlp_params(r->m), acc_mlp_grads(r->m), acc_mlp_num_params(r->m), 0.1f,
                     0.9f, 0.0f);
  r->s = acc_sampler_new(acc, n_train, 64, 1, 0);
  r->xb = malloc(64 * 784 * sizeof(float));
}

static inline void rt_fmnist_run_free(rt_fmnist_run_t *r) {
  acc_sampler_destroy(&r->s);
  acc_optim_destroy(&r->o);
  acc_mlp_destroy(&r->m);
  rt_fmnist_free(&r->d);
  free(r->xb);
}

/* Copy batch `b` of sampler `s` out of the images X (× 784 floats each)
 * into xb and, when `labels` is not NULL, their labels into yb. Returns
 * the batch's length. */
static inline size_t rt_mlp_batch(const acc_sampler_t *s, size_t b, const float *X,
                                  const uint8_t *labels, float *xb, int64_t *yb) {
  size_t len;
  const size_t *idx = acc_sampler_batch(s, b, &len);
  for (size_t i = 0; i < len; i++) {
    memcpy(xb + i * 784, X + idx[i] * 784, 784 * sizeof(float));
    if (labels)
      yb[i] = labels[idx[i]];
  }
  return len;
}

/* Accuracy (0..1) of `m` on `n` images XT (n × 784 floats) labelled
 * y[0..n-1], in batches of `batch` (<= 64) through `xb` (batch × 784
 * floats); asserts that exactly `n` predictions were gathered. */
static inline double rt_mlp_accuracy(acc_t *acc, acc_mlp_t *m, const float *XT, const uint8_t *y,
                                     size_t n, size_t batch, float *xb) {
  acc_sampler_t *ts = acc_sampler_new(acc, n, batch, 0, 0);
  size_t correct = 0, seen = 0;
  int64_t pred[64], label[64], hit[64], all[64 * 8];
  for (size_t b = 0; b < acc_sampler_num_batches(ts); b++) {
    size_t len = rt_mlp_batch(ts, b, XT, y, xb, label);
    acc_mlp_forward(m, xb, (int)len);
    acc_mlp_predict(m, pred);
    for (size_t i = 0; i < len; i++)
      hit[i] = pred[i] == label[i];
    size_t k = acc_gather_for_metrics(acc, hit, len, all, b + 1 == acc_sampler_num_batches(ts), n);
    for (size_t i = 0; i < k; i++)
      correct += (size_t)all[i];
    seen += k;
  }
  ASSERT_EQ(seen, n);
  acc_sampler_destroy(&ts);
  return (double)correct / (double)n;
}

#endif
