/*
 * acc_embedding.c — nn.Embedding on a caller's weight and gradient
 * buffers, with NEFTune (Jain et al., "NEFTune: Noisy Embeddings Improve
 * Instruction Finetuning", 2023; transformers' neftune_post_forward_hook):
 * in training, uniform noise in [-m, m], m = alpha / sqrt(L × d), is added
 * to the embedding outputs of sequences of L tokens of dimension d. The
 * noise is additive, so the backward pass is the embedding's own: each
 * output row's gradient is added to its token's weight row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"

struct acc_embedding {
  acc_t *acc;
  float *weight, *grad;
  int num, dim, max_tokens;
  double alpha;
  float *out;
  int64_t *ids; /* of the last forward */
  int tokens;
};

acc_embedding_t *acc_embedding_new(acc_t *acc, float *weight, float *grad, int num_embeddings,
                                   int embedding_dim, int max_tokens) {
  if (!weight || !grad || num_embeddings <= 0 || embedding_dim <= 0 || max_tokens <= 0) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "acc_embedding_new: need weight and grad buffers and positive sizes");
    return NULL;
  }
  acc_embedding_t *e = calloc(1, sizeof *e);
  if (e) {
    e->out = malloc((size_t)max_tokens * (size_t)embedding_dim * sizeof(float));
    e->ids = malloc((size_t)max_tokens * sizeof(int64_t));
  }
  if (!e || !e->out || !e->ids) {
    acc_embedding_destroy(&e);
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_embedding_new: no memory");
    return NULL;
  }
  e->acc = acc;
  e->weight = weight;
  e->grad = grad;
  e->num = num_embeddings;
  e->dim = embedding_dim;
  e->max_tokens = max_tokens;
  /* nn.Embedding's initialization: N(0, 1) */
  for (size_t i = 0; i < (size_t)num_embeddings * (size_t)embedding_dim; i++)
    weight[i] = (float)acc_rand_normal(acc);
  return e;
}

void acc_embedding_destroy(acc_embedding_t **e_p) {
  acc_embedding_t *e = e_p ? *e_p : NULL;
  if (e) {
    free(e->out);
    free(e->ids);
    free(e);
    *e_p = NULL;
  }
}

void acc_embedding_set_neftune_noise_alpha(acc_embedding_t *e, double alpha) {
  if (e && alpha >= 0)
    e->alpha = alpha;
}

const float *acc_embedding_forward(acc_embedding_t *e, const int64_t *ids, int tokens, int seq_len,
                                   int training) {
  if (!e || !ids || tokens <= 0 || tokens > e->max_tokens || seq_len <= 0) {
    acc__set_error(e ? e->acc : NULL, ACC_ERR_INVALID_ARGUMENT,
                   "acc_embedding_forward: need ids and 1..max_tokens tokens");
    return NULL;
  }
  const size_t d = (size_t)e->dim;
  for (int t = 0; t < tokens; t++) {
    if (ids[t] < 0 || ids[t] >= e->num) {
      acc__set_error(e->acc, ACC_ERR_INVALID_ARGUMENT,
                     "acc_embedding_forward: token %d is id %lld, not in 0..%d", t,
                     (long long)ids[t], e->num - 1);
      return NULL;
    }
    memcpy(e->out + (size_t)t * d, e->weight + (size_t)ids[t] * d, d * sizeof(float));
  }
  memcpy(e->ids, ids, (size_t)tokens * sizeof(int64_t));
  e->tokens = tokens;
  if (training && e->alpha > 0) {
    const double mag = e->alpha / sqrt((double)seq_len * (double)d);
    for (size_t i = 0; i < (size_t)tokens * d; i++)
      e->out[i] += (float)((2.0 * acc_rand_uniform(e->acc) - 1.0) * mag);
  }
  return e->out;
}

void acc_embedding_backward(acc_embedding_t *e, const float *dout) {
  if (!e || !dout)
    return;
  const size_t d = (size_t)e->dim;
  for (int t = 0; t < e->tokens; t++) {
    float *g = e->grad + (size_t)e->ids[t] * d;
    const float *s = dout + (size_t)t * d;
    for (size_t k = 0; k < d; k++)
      g[k] += s[k];
  }
}
