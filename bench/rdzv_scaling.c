/*
 * bench/rdzv_scaling.c — the nbfork side of bench/rdzv_scaling.py: forks N
 * ranks on 127.0.0.1 (the environment a launcher sets) that each create
 * the Accelerator and all-reduce one float, and prints, as one JSON line,
 * the seconds from the fork of the first rank to the end of the slowest
 * rank's first all-reduce, and rank 0's acc_new alone.
 *
 *   rdzv_scaling N
 *
 * The path is the runtime's: by node (shared memory; the default) or
 * Gloo's full mesh (NBFORK_SHM_COLLECTIVES=0).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "nbfork.h"

/* The tests' fork-N-ranks helper and the monotonic clock (see
 * bench/allreduce.c). */
#include "../common/nbf_util.c"
#include "../tests/runtime/rt_spawn.c"

static double g_t0;
static double *g_done; /* per rank: end of its first all-reduce (shared) */

static int rank_main(int rank, int world, void *arg) {
  (void)world;
  (void)arg;
  double t1 = rt_now();
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1;
  double t2 = rt_now();
  float x = 1.0f;
  if (acc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM) != ACC_OK || x != (float)acc_world_size(acc))
    return 1;
  g_done[rank] = rt_now() - g_t0;
  if (rank == 0)
    g_done[world] = t2 - t1;
  acc_destroy(&acc);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  if (n < 2) {
    fprintf(stderr, "usage: rdzv_scaling N>=2\n");
    return 2;
  }
  g_done = mmap(NULL, sizeof(double) * (size_t)(n + 1), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_done == MAP_FAILED)
    return 1;
  g_t0 = rt_now();
  rt_spawn_opts_t o = {.world = n, .deadline_s = 600, .timeout_s = "300"};
  if (rt_spawn(&o, rank_main, NULL, NULL) != 0)
    return 1;
  double last = 0;
  for (int i = 0; i < n; i++)
    last = g_done[i] > last ? g_done[i] : last;
  printf("{\"ranks\":%d,\"first_collective_s\":%.6f,\"rank0_acc_new_s\":%.6f}\n", n, last,
         g_done[n]);
  return 0;
}
