/*
 * bench/sharding.c — the nbfork side of bench/sharding.py: forks NPROC
 * ranks on 127.0.0.1 (the environment a launcher sets), each trains the
 * toolkit MLP of the given layer sizes through acc_shard at STAGE (0 =
 * DDP) with AdamW on one fixed batch of its own (so the loss must fall),
 * and rank 0 prints one JSON line:
 *   {"side":"nbfork","stage":3,"nproc":4,"params":...,"steps":...,
 *    "samples_per_s":...,"loss_first":...,"loss_last":...,
 *    "state_peak_bytes":...,"state_after_step_bytes":...,"maxrss_bytes":...,
 *    "describe":"..."}
 * samples/s counts every rank's samples (nproc * batch * steps / time of
 * the timed steps, after one warm-up step); the byte figures are the
 * largest over the ranks: the model state (acc_shard_state_bytes: the
 * resident pages of parameters, gradients, shards and optimizer state)
 * at its peak and after the last step, and the process's peak RSS.
 *
 *   sharding --nproc N --stage S --steps K --batch B [--no-prefetch] SIZE...
 *
 * Built by bench/sharding.py against the build tree's libnbfork.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "nbfork.h"

/* The tests' fork-N-ranks helper and the one monotonic clock, compiled
 * in (libnbfork does not export them), as bench/allreduce.c does. */
#include "../common/nbf_util.c"
#include "../tests/runtime/rt_spawn.c"

typedef struct {
  int stage, steps, batch, nl, prefetch;
  int sizes[64];
} bench_t;

static float *make_batch(int rank, const bench_t *b, int64_t *y) {
  float *x = malloc((size_t)b->batch * (size_t)b->sizes[0] * sizeof(float));
  unsigned long long s = 0x9e3779b97f4a7c15ull * (unsigned long long)(rank + 1);
  for (size_t i = 0; x && i < (size_t)b->batch * (size_t)b->sizes[0]; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
  }
  for (int i = 0; i < b->batch; i++)
    y[i] = i % b->sizes[b->nl];
  return x;
}

/* One optimizer step; the loss of this rank's batch. */
static float step(acc_t *acc, acc_shard_t *sh, const float *x, const int64_t *y, int batch) {
  acc_accumulate_begin(acc, 0);
  float loss = acc_shard_forward_loss(sh, x, y, batch, 1);
  if (isnan(loss) || acc_shard_backward(sh) != ACC_OK)
    return NAN;
  acc_accumulate_end(acc);
  return acc_shard_step(sh) == 1 ? loss : NAN;
}

static int body(int rank, int world, void *arg) {
  const bench_t *b = arg;
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1;
  acc_set_seed(acc, 1, 0);
  acc_mlp_t *m = acc_mlp_new(acc, b->sizes, b->nl, b->batch);
  acc_model_t model;
  if (!m || acc_mlp_model(m, &model) != ACC_OK)
    return fprintf(stderr, "%s\n", acc_last_error(acc)), 1;
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = b->stage;
  cfg.prefetch = b->prefetch;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  int64_t *y = malloc((size_t)b->batch * sizeof *y);
  float *x = y ? make_batch(rank, b, y) : NULL;
  if (!sh || !x)
    return fprintf(stderr, "%s\n", acc_last_error(acc)), 1;
  float first = step(acc, sh, x, y, b->batch), last = first; /* warm-up */
  acc_wait_for_everyone(acc);
  double t0 = nbf_now_s();
  for (int k = 0; k < b->steps && !isnan(last); k++)
    last = step(acc, sh, x, y, b->batch);
  acc_wait_for_everyone(acc);
  double dt = nbf_now_s() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double v[3] = {(double)acc_shard_state_bytes(sh, 1), (double)acc_shard_state_bytes(sh, 0),
                 (double)ru.ru_maxrss * 1024.0};
  acc_all_reduce(acc, v, 3, ACC_F64, ACC_MAX);
  if (rank == 0)
    printf("{\"side\":\"nbfork\",\"stage\":%d,\"nproc\":%d,\"params\":%zu,\"steps\":%d,"
           "\"samples_per_s\":%.3f,\"loss_first\":%.6g,\"loss_last\":%.6g,"
           "\"state_peak_bytes\":%.0f,\"state_after_step_bytes\":%.0f,\"maxrss_bytes\":%.0f,"
           "\"describe\":\"%s\"}\n",
           b->stage, world, model.num_params, b->steps, (double)world * b->batch * b->steps / dt,
           (double)first, (double)last, v[0], v[1], v[2], acc_shard_describe(sh));
  fflush(stdout);
  int bad = isnan(last);
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  free(x);
  free(y);
  return bad;
}

int main(int argc, char **argv) {
  static bench_t b = {.stage = 0, .steps = 3, .batch = 16, .prefetch = 3};
  int nproc = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nproc") && i + 1 < argc)
      nproc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--stage") && i + 1 < argc)
      b.stage = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      b.steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      b.batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-prefetch"))
      b.prefetch = 0;
    else if (b.nl < 63)
      b.sizes[b.nl++] = atoi(argv[i]);
  }
  b.nl--; /* layers = sizes - 1 */
  if (b.nl < 1 || nproc < 1 || b.steps < 1 || b.batch < 1) {
    fprintf(stderr, "usage: sharding --nproc N --stage S --steps K --batch B SIZE SIZE...\n");
    return 2;
  }
  rt_spawn_opts_t o = {.world = nproc, .deadline_s = 900, .timeout_s = "600"};
  return rt_spawn(&o, body, &b, NULL);
}
