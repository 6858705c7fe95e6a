/*
 * bench/lockstep.c — one rank of bench/lockstep.py: the training step of
 * notebooks/fashion_mnist.ipynb (MLP 784-256-10, batch 64, SGD with
 * momentum, the gradient all-reduced by acc_backward) on fixed synthetic
 * data, timed over `steps` steps after a barrier.
 *
 * Usage (under `nbfork launch`): lockstep STEPS [--no-sync]
 *   --no-sync  skip acc_backward's all-reduce: the ranks train apart, as
 *              two independent processes would (the scheduler's ceiling)
 *
 * Prints one line per rank: "rank R/W steps S images/s X cpu_s C loss L".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nbfork.h"

enum { BATCH = 64, IN = 784, HIDDEN = 256, CLASSES = 10 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 2000;
  int sync = !(argc > 2 && strcmp(argv[2], "--no-sync") == 0);
  acc_t *acc = acc_new(NULL);
  if (!acc || steps <= 0) {
    fprintf(stderr, "lockstep: %s\n", acc ? "STEPS must be positive" : acc_last_error(NULL));
    return 1;
  }
  acc_set_seed(acc, 42, 0);
  int sizes[] = {IN, HIDDEN, CLASSES};
  acc_mlp_t *m = acc_mlp_new(acc, sizes, 2, BATCH);
  size_t np = acc_mlp_num_params(m);
  acc_optim_t *opt = acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.01f, 0.9f, 0.0f);
  float *x = malloc(sizeof(float) * BATCH * IN);
  int64_t y[BATCH];
  unsigned s = 1u + (unsigned)acc_rank(acc);
  for (int i = 0; i < BATCH * IN; i++)
    x[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 0x7fff) / 32768.0f;
  for (int i = 0; i < BATCH; i++)
    y[i] = (int64_t)((s = s * 1103515245u + 12345u) >> 16) % CLASSES;
  acc_wait_for_everyone(acc);
  double t0 = now_s(), c0 = cpu_s();
  float loss = 0.0f;
  for (int k = 0; k < steps; k++) {
    acc_mlp_zero_grad(m);
    acc_mlp_forward(m, x, BATCH);
    loss = acc_mlp_backward_xent(m, y);
    if (sync && acc_backward(acc, acc_mlp_grads(m), np) != ACC_OK) {
      fprintf(stderr, "lockstep: rank %d: %s\n", acc_rank(acc), acc_last_error(acc));
      return 1;
    }
    acc_optim_step(acc, opt);
  }
  double t = now_s() - t0, c = cpu_s() - c0;
  printf("rank %d/%d steps %d images/s %.0f cpu_s %.3f loss %.6f\n", acc_rank(acc),
         acc_world_size(acc), steps, steps * BATCH / t, c, loss);
  acc_optim_destroy(&opt);
  acc_mlp_destroy(&m);
  free(x);
  acc_destroy(&acc);
  return 0;
}
