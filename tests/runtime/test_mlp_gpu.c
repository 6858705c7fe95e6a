/*
 * test_mlp_gpu.c — the device MLP (acc_mlp_cuda.cu) against the CPU MLP
 * (acc_mlp.c) from the same seed, one process: parameters after
 * initialization (equal), logits, loss and every gradient after one
 * forward/backward, then the parameters after optimizer steps (SGD with
 * momentum, AdamW). SKIP (77) without a GPU or without device kernels.
 *
 * Tolerances, relative to the largest |value| of the CPU result:
 *   f32   1e-4 — both accumulate in f32; cuBLAS sums in another order
 *         (no TF32: CUBLAS_COMPUTE_32F)
 *   fp16  5e-3, bf16 2e-2 — the same roundings to the half type, except
 *         that the device adds each layer's f32 weight gradient where the
 *         CPU first rounds it (and a sum in another order can round the
 *         other way: one ulp is 2^-11 in fp16, 2^-8 in bf16)
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_mlp_cuda.h"
#include "acc_nccl.h"
#include "nbfork.h"
#include "rt_cudart.h"
#include "rt_test.h"

enum { NL = 3, BATCH = 48 };
static const int SIZES[NL + 1] = {100, 64, 32, 10};

typedef struct {
  acc_t *acc;
  acc_mlp_t *m;
} side_t;

static side_t make(const char *precision, int cpu) {
  side_t s;
  if (cpu)
    setenv("ACCELERATE_USE_CPU", "1", 1);
  else
    unsetenv("ACCELERATE_USE_CPU");
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.mixed_precision = precision;
  s.acc = acc_new(&cfg);
  ASSERT_NOT_NULL(s.acc);
  ASSERT_EQ(acc_device(s.acc) >= 0, !cpu);
  acc_set_seed(s.acc, 7, 0);
  s.m = acc_mlp_new(s.acc, SIZES, NL, BATCH);
  if (!s.m)
    NBF_TEST_FAIL("acc_mlp_new: %s", acc_last_error(s.acc));
  return s;
}

static void drop(side_t *s) {
  acc_mlp_destroy(&s->m);
  acc_destroy(&s->acc);
}

/* SKIP unless this process can use a GPU with device kernels. */
static void need_gpu(void) {
  rt_cudart_load();
  if (acc_nccl_device_count() <= 0)
    NBF_TEST_SKIP("no GPU visible (or nbfork built without CUDA)");
  if (!acc_mlp_dev_available())
    NBF_TEST_SKIP("nbfork was built without a CUDA compiler: models stay on the host");
}

static float *download(const float *d, size_t n) {
  float *h = malloc(n * sizeof(float));
  ASSERT_EQ(p_memcpy(h, d, n * sizeof(float), 2), 0);
  return h;
}

/* max |got - want| <= rel * max |want|, else fail naming the worst element */
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double rel) {
  double scale = 0, worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]);
    if (!(e <= worst)) /* NaN counts as worst */
      worst = e, wi = i;
  }
  printf("%s: max error %.3g of max |value| %.3g\n", what, worst, scale);
  if (!(worst <= rel * scale + 1e-12))
    NBF_TEST_FAIL("%s: element %zu: device %.9g, CPU %.9g (tolerance %.3g x %.3g)", what, wi,
                  got[wi], want[wi], rel, scale);
}

static void compare_grads(const char *precision, double rel) {
  need_gpu();
  side_t c = make(precision, 1), g = make(precision, 0);
  const size_t n = acc_mlp_num_params(c.m);
  ASSERT_EQ(acc_mlp_num_params(g.m), n);
  float *p = download(acc_mlp_params(g.m), n);
  ASSERT_EQ(memcmp(p, acc_mlp_params(c.m), n * sizeof(float)), 0); /* same initialization */
  float *x = malloc((size_t)BATCH * SIZES[0] * sizeof(float));
  int64_t y[BATCH];
  for (size_t i = 0; i < (size_t)BATCH * SIZES[0]; i++)
    x[i] = (float)acc_rand_normal(c.acc);
  for (int r = 0; r < BATCH; r++)
    y[r] = r % SIZES[NL];
  acc_mlp_zero_grad(c.m), acc_mlp_zero_grad(g.m);
  const float *zc = acc_mlp_forward(c.m, x, BATCH), *zg = acc_mlp_forward(g.m, x, BATCH);
  ASSERT_NOT_NULL(zg);
  expect_close("logits", zg, zc, (size_t)BATCH * SIZES[NL], rel);
  float lc = acc_mlp_backward_xent(c.m, y), lg = acc_mlp_backward_xent(g.m, y);
  ASSERT_TRUE(!isnan(lg));
  expect_close("loss", &lg, &lc, 1, rel);
  float *gg = download(acc_mlp_grads(g.m), n);
  expect_close("gradients", gg, acc_mlp_grads(c.m), n, rel);
  /* a bad label: NaN, the error names the row, the gradients stay */
  y[5] = 99;
  acc_mlp_forward(g.m, x, BATCH);
  ASSERT_TRUE(isnan(acc_mlp_backward_xent(g.m, y)));
  ASSERT_TRUE(strstr(acc_last_error(g.acc), "row 5") != NULL);
  float *gg2 = download(acc_mlp_grads(g.m), n);
  ASSERT_EQ(memcmp(gg, gg2, n * sizeof(float)), 0);
  free(gg2), free(gg), free(p), free(x);
  drop(&c), drop(&g);
}

NBF_TEST(grads_f32) {
  compare_grads("no", 1e-4);
}

NBF_TEST(grads_fp16) {
  compare_grads("fp16", 5e-3);
}

NBF_TEST(grads_bf16) {
  compare_grads("bf16", 2e-2);
}

/* Three training steps on both sides, then the parameters. */
static void compare_steps(int adamw) {
  need_gpu();
  side_t s[2] = {make("no", 1), make("no", 0)};
  const size_t n = acc_mlp_num_params(s[0].m);
  float *x = malloc((size_t)BATCH * SIZES[0] * sizeof(float));
  int64_t y[BATCH];
  for (size_t i = 0; i < (size_t)BATCH * SIZES[0]; i++)
    x[i] = (float)acc_rand_normal(s[0].acc);
  for (int r = 0; r < BATCH; r++)
    y[r] = (r * 7) % SIZES[NL];
  for (int k = 0; k < 2; k++) {
    acc_mlp_t *m = s[k].m;
    acc_optim_t *o = adamw ? acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), n, 1e-3f, 0.9f,
                                           0.999f, 1e-8f, 0.01f)
                           : acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.1f, 0.9f, 1e-4f);
    ASSERT_NOT_NULL(o);
    for (int step = 0; step < 3; step++) {
      acc_optim_zero_grad(s[k].acc, o);
      acc_mlp_forward(m, x, BATCH);
      ASSERT_TRUE(!isnan(acc_mlp_backward_xent(m, y)));
      ASSERT_OK(s[k].acc, acc_backward(s[k].acc, acc_mlp_grads(m), n));
      ASSERT_EQ(acc_optim_step(s[k].acc, o), 1);
    }
    acc_optim_destroy(&o);
  }
  float *pg = download(acc_mlp_params(s[1].m), n);
  expect_close(adamw ? "parameters after 3 AdamW steps" : "parameters after 3 SGD steps", pg,
               acc_mlp_params(s[0].m), n, 1e-4);
  free(pg), free(x);
  drop(&s[0]), drop(&s[1]);
}

NBF_TEST(sgd_steps) {
  compare_steps(0);
}

NBF_TEST(adamw_steps) {
  compare_steps(1);
}

/* acc_backward's gradient accumulation (4 micro-steps, k = 2) on a
 * device buffer against the same on a host buffer: equal to f32
 * rounding. */
NBF_TEST(accumulate) {
  need_gpu();
  const size_t n = 5000;
  float *host[2], *dev = NULL, *got = malloc(n * sizeof(float));
  acc_t *acc[2];
  for (int k = 0; k < 2; k++) {
    if (k == 0)
      setenv("ACCELERATE_USE_CPU", "1", 1);
    else
      unsetenv("ACCELERATE_USE_CPU");
    acc_config_t cfg = ACC_CONFIG_INIT;
    cfg.gradient_accumulation_steps = 2;
    acc[k] = acc_new(&cfg);
    ASSERT_NOT_NULL(acc[k]);
    host[k] = malloc(n * sizeof(float));
  }
  ASSERT_EQ(p_malloc((void **)&dev, n * sizeof(float)), 0);
  for (int step = 0; step < 4; step++) {
    for (size_t i = 0; i < n; i++)
      host[0][i] = host[1][i] = (float)((i * 31 + (size_t)step * 7) % 97) / 13.0f - 3.0f;
    ASSERT_EQ(p_memcpy(dev, host[1], n * sizeof(float), 1), 0);
    for (int k = 0; k < 2; k++) {
      acc_accumulate_begin(acc[k], 0);
      ASSERT_OK(acc[k], acc_backward(acc[k], k ? dev : host[0], n));
      acc_accumulate_end(acc[k]);
    }
    ASSERT_EQ(p_memcpy(got, dev, n * sizeof(float), 2), 0);
    char what[64];
    snprintf(what, sizeof what, "micro-step %d", step);
    expect_close(what, got, host[0], n, 1e-6);
  }
  p_free(dev);
  free(got), free(host[0]), free(host[1]);
  acc_destroy(&acc[0]), acc_destroy(&acc[1]);
}

NBF_TEST_MAIN()
