/*
 * acc_sampler.c — the distributed sampler: PyTorch's DistributedSampler
 * ordering with Accelerate's BatchSamplerShard dealing and even_batches
 * padding (accelerate/data_loader.py, split_batches=False,
 * even_batches=True).
 *
 * Global order: 0..n-1, shuffled with a Fisher-Yates shuffle driven by
 * xoshiro256** seeded with (seed + epoch) when shuffle != 0 (the same on
 * every rank), then padded by cycling from its start to a multiple of
 * world_size * batch_size. Global batch g is positions
 * [g*batch_size, (g+1)*batch_size) of that order and goes to rank
 * g % world_size. So the batches of one "round" (world_size consecutive
 * global batches), concatenated rank-major as an all-gather returns them,
 * are in global order, and the padding duplicates are the tail of the
 * last round — which is what acc_gather_for_metrics drops.
 */
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"

struct acc_sampler {
  int rank, world;
  size_t n, batch, total; /* total = padded length */
  int shuffle;
  unsigned long long seed;
  size_t *order;   /* global padded order, `total` indices */
  size_t *mine;    /* this rank's indices, total/world */
  size_t nbatches; /* per rank */
};

static void build(acc_sampler_t *s, int epoch) {
  for (size_t i = 0; i < s->n; i++)
    s->order[i] = i;
  if (s->shuffle) {
    acc_rng_t r;
    acc_rng_seed(&r, s->seed + (unsigned long long)(long long)epoch);
    for (size_t i = s->n; i > 1; i--) {
      size_t j = (size_t)acc_rng_below(&r, i);
      size_t t = s->order[i - 1];
      s->order[i - 1] = s->order[j];
      s->order[j] = t;
    }
  }
  for (size_t i = s->n; i < s->total; i++)
    s->order[i] = s->order[i % s->n];
  size_t k = 0;
  for (size_t g = (size_t)s->rank; g < s->total / s->batch; g += (size_t)s->world) {
    memcpy(s->mine + k, s->order + g * s->batch, s->batch * sizeof(size_t));
    k += s->batch;
  }
}

acc_sampler_t *acc__sampler_new_for(int rank, int world, size_t n, size_t batch_size, int shuffle,
                                    unsigned long long seed) {
  if (n == 0 || batch_size == 0 || world < 1 || rank < 0 || rank >= world)
    return NULL;
  acc_sampler_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  *s = (acc_sampler_t){.rank = rank,
                       .world = world,
                       .n = n,
                       .batch = batch_size,
                       .shuffle = shuffle != 0,
                       .seed = seed};
  size_t round = batch_size * (size_t)s->world;
  s->total = (n + round - 1) / round * round;
  s->nbatches = s->total / round;
  s->order = malloc(s->total * sizeof(size_t));
  s->mine = malloc(s->nbatches * batch_size * sizeof(size_t));
  if (!s->order || !s->mine) {
    acc_sampler_destroy(&s);
    return NULL;
  }
  build(s, 0);
  return s;
}

acc_sampler_t *acc_sampler_new(const acc_t *acc, size_t n, size_t batch_size, int shuffle,
                               unsigned long long seed) {
  return acc__sampler_new_for(acc_rank(acc), acc_world_size(acc), n, batch_size, shuffle, seed);
}

void acc_sampler_destroy(acc_sampler_t **s_p) {
  if (!s_p || !*s_p)
    return;
  free((*s_p)->order);
  free((*s_p)->mine);
  free(*s_p);
  *s_p = NULL;
}

void acc_sampler_set_epoch(acc_sampler_t *s, int epoch) {
  if (s)
    build(s, epoch);
}

size_t acc_sampler_num_batches(const acc_sampler_t *s) {
  return s ? s->nbatches : 0;
}

const size_t *acc_sampler_batch(const acc_sampler_t *s, size_t b, size_t *len) {
  if (!s || b >= s->nbatches) {
    if (len)
      *len = 0;
    return NULL;
  }
  if (len)
    *len = s->batch;
  return s->mine + b * s->batch;
}

size_t acc_sampler_dataset_size(const acc_sampler_t *s) {
  return s ? s->n : 0;
}
