/*
 * test_accumulate.c — gradient accumulation reproducing Accelerate's
 * example (docs/source/usage_guides/gradient_accumulation.md): x = 1..8,
 * y = 2x, a single weight w = 0, SGD lr 0.02, MSE loss, batch size 2.
 * With gradient_accumulation_steps = 4 on one process, or 2 on each of 2
 * processes (disjoint shards, no shuffle), the final weight is 2.04000 —
 * the same as one full-batch step (grad = mean(-4 x^2) = -102).
 *   test_accumulate example NPROC | sync_pattern
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

static const float X[8] = {1, 2, 3, 4, 5, 6, 7, 8};

static int example_rank(int rank, int world, void *arg) {
  (void)rank;
  (void)arg;
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.gradient_accumulation_steps = world == 1 ? 4 : 2;
  cfg.seed = 0;
  acc_t *acc = acc_new(&cfg);
  ASSERT_NOT_NULL(acc);
  float w = 0.0f, grad = 0.0f;
  acc_optim_t *opt = acc_sgd_new(&w, &grad, 1, 0.02f, 0.0f, 0.0f);
  ASSERT_NOT_NULL(opt);
  acc_sampler_t *s = acc_sampler_new(acc, 8, 2, 0, 0);
  size_t nb = acc_sampler_num_batches(s);
  ASSERT_EQ(nb, world == 1 ? 4 : 2);
  acc_print(acc, "initial model weight is %.5f\n", w);
  int steps = 0;
  for (size_t b = 0; b < nb; b++) {
    acc_accumulate_begin(acc, b + 1 == nb);
    size_t len;
    const size_t *idx = acc_sampler_batch(s, b, &len);
    /* d/dw mean((w x - y)^2) = mean(2 (w x - y) x) */
    float g = 0.0f;
    for (size_t i = 0; i < len; i++) {
      float x = X[idx[i]], y = 2.0f * x;
      g += 2.0f * (w * x - y) * x;
    }
    grad += g / (float)len;
    ASSERT_OK(acc, acc_backward(acc, &grad, 1));
    steps += acc_optim_step(acc, opt);
    acc_optim_zero_grad(acc, opt);
    acc_accumulate_end(acc);
  }
  ASSERT_EQ(steps, 1);
  char got[32];
  snprintf(got, sizeof got, "%.5f", w);
  acc_print(acc, "w/ accumulation, the final model weight is %s\n", got);
  ASSERT_EQ_STR(got, "2.04000");
  /* every rank holds the same weight */
  float all[8];
  ASSERT_OK(acc, acc_all_gather(acc, &w, all, 1, ACC_F32));
  for (int r = 0; r < world; r++)
    ASSERT_TRUE(all[r] == w);
  /* the full-batch reference: one step on all 8 samples */
  float wc = 0.0f, gc = 0.0f;
  acc_optim_t *ref = acc_sgd_new(&wc, &gc, 1, 0.02f, 0.0f, 0.0f);
  for (int i = 0; i < 8; i++)
    gc += 2.0f * (wc * X[i] - 2.0f * X[i]) * X[i] / 8.0f;
  ASSERT_EQ(acc_optim_step(NULL, ref), 1);
  snprintf(got, sizeof got, "%.5f", wc);
  acc_print(acc, "w/o accumulation, the final model weight is %s\n", got);
  ASSERT_EQ_STR(got, "2.04000");
  acc_optim_destroy(&ref);
  acc_optim_destroy(&opt);
  acc_sampler_destroy(&s);
  acc_destroy(&acc);
  return 0;
}

/* Which micro-steps sync: Accelerate's _do_sync. */
NBF_TEST(sync_pattern) {
  struct {
    int k, sync_dl, nbatches;
    const char *want;
  } cases[] = {
      {2, -1, 5, "01011"}, /* default sync_with_dataloader: last batch syncs */
      {2, 0, 5, "01010"},  {3, -1, 7, "0010011"}, {1, -1, 3, "111"}, {4, -1, 4, "0001"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    acc_config_t cfg = ACC_CONFIG_INIT;
    cfg.gradient_accumulation_steps = cases[c].k;
    cfg.sync_with_dataloader = cases[c].sync_dl;
    acc_t *acc = acc_new(&cfg);
    ASSERT_NOT_NULL(acc);
    char got[16] = {0};
    for (int e = 0; e < 2; e++) { /* two epochs: the counter restarts */
      for (int b = 0; b < cases[c].nbatches; b++) {
        acc_accumulate_begin(acc, b + 1 == cases[c].nbatches);
        got[b] = acc_sync_gradients(acc) ? '1' : '0';
        acc_accumulate_end(acc);
      }
      if (cases[c].sync_dl != 0)
        ASSERT_EQ_STR(got, cases[c].want);
      else if (e == 0)
        ASSERT_EQ_STR(got, cases[c].want);
    }
    acc_destroy(&acc);
  }
  /* acc_backward scales each micro-step's part by 1/k: (a + b) / 2 */
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.gradient_accumulation_steps = 2;
  acc_t *acc = acc_new(&cfg);
  float g[2] = {0, 0};
  acc_accumulate_begin(acc, 0);
  g[0] += 4.0f, g[1] += -2.0f;
  ASSERT_OK(acc, acc_backward(acc, g, 2));
  ASSERT_NEAR(g[0], 2.0, 1e-6);
  acc_accumulate_begin(acc, 0);
  g[0] += 6.0f, g[1] += 8.0f;
  ASSERT_OK(acc, acc_backward(acc, g, 2));
  ASSERT_TRUE(acc_sync_gradients(acc));
  ASSERT_NEAR(g[0], 5.0, 1e-6);
  ASSERT_NEAR(g[1], 3.0, 1e-6);
  acc_destroy(&acc);
}

/* example NPROC: one process runs the example in place, more fork. */
NBF_TEST_P(example) {
  int np = atoi(nbf_test_arg(0));
  if (np == 1) {
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    ASSERT_EQ(example_rank(0, 1, NULL), 0);
    return;
  }
  rt_spawn_opts_t o = {.world = np, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, example_rank, NULL, NULL), 0);
}

NBF_TEST_MAIN()
