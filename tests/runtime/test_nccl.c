/*
 * test_nccl.c — collectives on CUDA device buffers through NCCL. Exits 77
 * (ctest SKIP) when nbfork was built without CUDA or no GPU is visible.
 * With one GPU it runs a one-rank communicator (NCCL refuses two ranks on
 * one GPU); with more it runs one rank per GPU.
 *   test_nccl all_reduce
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_nccl.h"
#include "nbfork.h"
#include "rt_cudart.h"
#include "rt_spawn.h"
#include "rt_test.h"

/* cudaMalloc/cudaMemcpy through dlopen, so the test builds without CUDA. */

static int rank_fn(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_device(acc), rank);
  const size_t n = 1 << 20;
  float *h = malloc(n * sizeof(float)), *d = NULL;
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank + 1);
  ASSERT_EQ(p_malloc((void **)&d, n * sizeof(float)), 0);
  ASSERT_EQ(p_memcpy(d, h, n * sizeof(float), 1 /* H2D */), 0);
  ASSERT_OK(acc, acc_all_reduce(acc, d, n, ACC_F32, ACC_SUM));
  ASSERT_EQ(p_memcpy(h, d, n * sizeof(float), 2 /* D2H */), 0);
  float want = (float)(world * (world + 1) / 2);
  for (size_t i = 0; i < n; i += 4099)
    ASSERT_NEAR(h[i], want, 0);
  p_free(d);
  free(h);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(all_reduce) {
  rt_cudart_load();
  /* count GPUs in a child: the parent must not initialize CUDA before fork */
  int ngpu = 0;
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  fflush(stdout);
  if (fork() == 0) {
    int n = acc_nccl_device_count();
    ssize_t w = write(pfd[1], &n, sizeof n);
    _exit(w == sizeof n ? 0 : 1);
  }
  if (read(pfd[0], &ngpu, sizeof ngpu) != sizeof ngpu)
    ngpu = 0;
  if (ngpu <= 0)
    NBF_TEST_SKIP("no GPU visible (or nbfork built without CUDA/NCCL)");
  unsetenv("ACCELERATE_USE_CPU");
  rt_spawn_opts_t o = {.world = ngpu > 8 ? 8 : ngpu, .deadline_s = 120, .timeout_s = "60"};
  /* rt_spawn sets ACCELERATE_USE_CPU=1 for CPU tests; GPU ranks need it off */
  setenv("NBFORK_TEST_GPU", "1", 1);
  ASSERT_EQ(rt_spawn(&o, rank_fn, NULL, NULL), 0);
  printf("nccl all_reduce on %d GPU(s)\n", o.world);
}

NBF_TEST_MAIN()
