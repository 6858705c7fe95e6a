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
 *   fp16  5e-3, bf16 2e-2 — the same roundings to the half type (each
 *         layer's weight gradient too, before it is added), but a sum in
 *         another order can round the other way: one ulp is 2^-11 in
 *         fp16, 2^-8 in bf16
 *
 * Also (issue 26): fp16/bf16 optimizer steps, an fp16 overflow seen as
 * on the CPU, the AdamW state and a checkpoint's upload on a
 * non-blocking stream, a checkpoint resumed in the middle of an
 * accumulation window, the Trainer on the device, two ranks training on
 * one GPU through NCCL against two CPU ranks through Gloo, and steps that
 * wait for nothing (issue 25 item 4) against the CPU.
 *
 * One case runs on every machine: fp16_overflow_sweep_is_weight_only
 * checks on the CPU that fp16_overflow_matches_cpu's sweep meets a loss
 * scale where only weight gradients overflow (the case the old device
 * code missed), so that test cannot pass without testing it.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_mlp_cuda.h"
#include "acc_nccl.h"
#include "nbf_trainer.h"
#include "nbfork.h"
#include "rt_cudart.h"
#include "rt_spawn.h"
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

/* A batch of BATCH inputs drawn from acc's generator (the caller frees
 * it) and labels y[r] = r * stride mod the classes. */
static float *random_batch(acc_t *acc, int64_t *y, int stride) {
  float *x = malloc((size_t)BATCH * SIZES[0] * sizeof(float));
  ASSERT_NOT_NULL(x);
  for (size_t i = 0; i < (size_t)BATCH * SIZES[0]; i++)
    x[i] = (float)acc_rand_normal(acc);
  for (int r = 0; r < BATCH; r++)
    y[r] = (r * stride) % SIZES[NL];
  return x;
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
static void compare_steps(int adamw, const char *precision, double rel) {
  need_gpu();
  side_t s[2] = {make(precision, 1), make(precision, 0)};
  const size_t n = acc_mlp_num_params(s[0].m);
  int64_t y[BATCH];
  float *x = random_batch(s[0].acc, y, 7);
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
               acc_mlp_params(s[0].m), n, rel);
  ASSERT_TRUE(acc_loss_scale(s[0].acc) == acc_loss_scale(s[1].acc));
  free(pg), free(x);
  drop(&s[0]), drop(&s[1]);
}

NBF_TEST(sgd_steps) {
  compare_steps(0, "no", 1e-4);
}

NBF_TEST(adamw_steps) {
  compare_steps(1, "no", 1e-4);
}

/* the device unscale (fp16) and the half-precision model under steps */
NBF_TEST(sgd_steps_fp16) {
  compare_steps(0, "fp16", 5e-3);
}

NBF_TEST(sgd_steps_bf16) {
  compare_steps(0, "bf16", 2e-2);
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

/* Issue 26, item 5: the device added each layer's f32 weight gradient
 * without rounding it to fp16, so an overflow there never became inf and
 * the loss scaler skipped and grew differently from the CPU (and
 * PyTorch). A large input feature makes the first layer's weight
 * gradient overflow long before the bias gradient or the loss gradient:
 * over a sweep of loss scales both sides must find inf at the same ones. */
enum { SWEEP_MAX = 24 }; /* loss scales 2^0 .. 2^SWEEP_MAX */

/* The sweep's batch: feature 0 of every row is 1000 (so layer 0's weight
 * gradient column 0 is 1000 x its bias gradient), the rest N(0, 1) from
 * the CPU side's generator. */
static void overflow_batch(acc_t *cpu, float *x, int64_t *y) {
  for (size_t i = 0; i < (size_t)BATCH * SIZES[0]; i++)
    x[i] = i % SIZES[0] == 0 ? 1000.0f : (float)acc_rand_normal(cpu);
  for (int r = 0; r < BATCH; r++)
    y[r] = r % SIZES[NL];
}

NBF_TEST(fp16_overflow_matches_cpu) {
  need_gpu();
  side_t s[2] = {make("fp16", 1), make("fp16", 0)};
  const size_t n = acc_mlp_num_params(s[0].m);
  float *x = malloc((size_t)BATCH * SIZES[0] * sizeof(float));
  int64_t y[BATCH];
  overflow_batch(s[0].acc, x, y);
  int cpu_inf = 0;
  for (int k = 0; k <= SWEEP_MAX; k++) {
    int found[2];
    for (int j = 0; j < 2; j++) {
      ASSERT_OK(s[j].acc, acc_set_grad_scaler(s[j].acc, ldexpf(1.0f, k), 2.0f, 0.5f, 2000));
      acc_mlp_zero_grad(s[j].m);
      ASSERT_NOT_NULL(acc_mlp_forward(s[j].m, x, BATCH));
      ASSERT_TRUE(!isnan(acc_mlp_backward_xent(s[j].m, y)));
      int fin = acc_unscale_gradients(s[j].acc, acc_mlp_grads(s[j].m), n);
      ASSERT_TRUE(fin >= 0);
      found[j] = !fin;
      acc_update_loss_scale(s[j].acc, found[j]);
    }
    printf("scale 2^%d: CPU %s, device %s\n", k, found[0] ? "inf" : "finite",
           found[1] ? "inf" : "finite");
    if (found[0] != found[1])
      NBF_TEST_FAIL("loss scale 2^%d: the CPU found %s gradients, the device %s", k,
                    found[0] ? "inf" : "finite", found[1] ? "inf" : "finite");
    cpu_inf |= found[0];
  }
  ASSERT_TRUE(cpu_inf); /* the sweep reached an overflow */
  free(x);
  drop(&s[0]), drop(&s[1]);
}

/* Item 5's test, checked where it can be (any machine): before the fix
 * the device added each weight gradient in f32 unrounded, so it found
 * inf only where an fp16-rounded value overflowed — the loss gradient,
 * a layer's input gradient, a bias gradient, all of which reach the
 * bias gradients (a column sum of an inf is inf or NaN). So the old code
 * failed fp16_overflow_matches_cpu iff the sweep has a scale where the
 * CPU (same data: fp16_overflow_matches_cpu's CPU side) finds an inf
 * weight gradient while every bias gradient is finite. Required here
 * with a margin: the largest bias gradient below 2^15 (a device
 * rounding the other way cannot double it), and the largest weight
 * gradient at the scale before at least 1% away from 2^15 (so the
 * device overflows at the same scale, not one later). */
NBF_TEST(fp16_overflow_sweep_is_weight_only) {
  setenv("ACCELERATE_USE_CPU", "1", 1);
  side_t c = make("fp16", 1);
  const size_t n = acc_mlp_num_params(c.m);
  float *x = malloc((size_t)BATCH * SIZES[0] * sizeof(float));
  int64_t y[BATCH];
  overflow_batch(c.acc, x, y);
  int weight_only = -1;
  double prev_w = 0;
  for (int k = 0; k <= SWEEP_MAX; k++) {
    ASSERT_OK(c.acc, acc_set_grad_scaler(c.acc, ldexpf(1.0f, k), 2.0f, 0.5f, 2000));
    acc_mlp_zero_grad(c.m);
    ASSERT_NOT_NULL(acc_mlp_forward(c.m, x, BATCH));
    ASSERT_TRUE(!isnan(acc_mlp_backward_xent(c.m, y)));
    const float *g = acc_mlp_grads(c.m);
    double max_w = 0, max_b = 0;
    size_t off = 0;
    for (int l = 0; l < NL; l++) {
      const size_t nw = (size_t)SIZES[l + 1] * SIZES[l];
      for (size_t i = 0; i < nw + (size_t)SIZES[l + 1]; i++) {
        double v = isfinite(g[off + i]) ? fabs(g[off + i]) : INFINITY;
        if (i < nw)
          max_w = fmax(max_w, v);
        else
          max_b = fmax(max_b, v);
      }
      off += nw + (size_t)SIZES[l + 1];
    }
    ASSERT_EQ(off, n);
    printf("scale 2^%d: max |weight grad| %.6g, max |bias grad| %.6g\n", k, max_w, max_b);
    if (weight_only < 0 && isinf(max_w) && max_b < 32768.0) {
      weight_only = k;
      if (k > 0 && fabs(prev_w / 32768.0 - 1.0) < 0.01)
        NBF_TEST_FAIL("scale 2^%d: the weight gradient at the scale before (%.6g) is within 1%% "
                      "of 2^15: the device may overflow one scale later",
                      k, prev_w);
    }
    prev_w = max_w;
  }
  if (weight_only < 0)
    NBF_TEST_FAIL("no loss scale in 2^0..2^%d overflows only weight gradients: "
                  "fp16_overflow_matches_cpu would pass on the old device code",
                  SWEEP_MAX);
  printf("scale 2^%d: only weight gradients overflow\n", weight_only);
  free(x);
  drop(&c);
}

/* Issue 26, item 2: AdamW's moments were zeroed by cudaMemset on the
 * legacy stream, which a non-blocking stream does not wait for. With
 * ~5 ms of work queued on the legacy stream and the moments allocated
 * where garbage was, the first step on a non-blocking stream read the
 * garbage. */
NBF_TEST(adamw_state_nonblocking_stream) {
  need_gpu();
  side_t s[2] = {make("no", 1), make("no", 0)};
  const size_t n = acc_mlp_num_params(s[0].m), big_bytes = (size_t)512 << 20;
  int64_t y[BATCH];
  float *x = random_batch(s[0].acc, y, 3);
  void *big = NULL, *junk = NULL, *stream = NULL;
  ASSERT_EQ(p_malloc(&big, big_bytes), 0);
  ASSERT_EQ(p_malloc(&junk, 4 * n * sizeof(float)), 0); /* where the moments will go */
  ASSERT_EQ(p_memset(junk, 0x7f, 4 * n * sizeof(float)), 0);
  ASSERT_EQ(p_device_synchronize(), 0);
  ASSERT_EQ(p_free(junk), 0);
  ASSERT_EQ(p_stream_create(&stream, 1 /* cudaStreamNonBlocking */), 0);
  ASSERT_OK(s[1].acc, acc_set_stream(s[1].acc, stream));
  for (int k = 0; k < 2; k++) {
    acc_mlp_t *m = s[k].m;
    acc_optim_t *o =
        acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
    ASSERT_NOT_NULL(o);
    acc_optim_zero_grad(s[k].acc, o);
    ASSERT_NOT_NULL(acc_mlp_forward(m, x, BATCH));
    ASSERT_TRUE(!isnan(acc_mlp_backward_xent(m, y)));
    ASSERT_OK(s[k].acc, acc_backward(s[k].acc, acc_mlp_grads(m), n));
    if (k == 1) /* work on the legacy stream, which the state's zeroing follows */
      for (int j = 0; j < 20; j++)
        ASSERT_EQ(p_memset_async(big, j, big_bytes, NULL), 0);
    ASSERT_EQ(acc_optim_step(s[k].acc, o), 1);
    ASSERT_EQ(acc_optim_step(s[k].acc, o), 1); /* a second step reads the moments the first wrote */
    acc_optim_destroy(&o);
  }
  float *pg = download(acc_mlp_params(s[1].m), n);
  expect_close("parameters after 2 AdamW steps on a non-blocking stream", pg,
               acc_mlp_params(s[0].m), n, 1e-4);
  ASSERT_OK(s[1].acc, acc_set_stream(s[1].acc, NULL));
  p_stream_destroy(stream);
  p_free(big);
  free(pg), free(x);
  drop(&s[0]), drop(&s[1]);
}

/* Micro-steps first..last-1 of a run with accumulation 2 (AdamW), batch
 * `i` from rows i*BATCH of x. */
static void micro_steps(acc_t *acc, acc_mlp_t *m, acc_optim_t *o, const float *x, const int64_t *y,
                        int first, int last) {
  const size_t n = acc_mlp_num_params(m);
  for (int i = first; i < last; i++) {
    acc_accumulate_begin(acc, 0);
    ASSERT_NOT_NULL(acc_mlp_forward(m, x + (size_t)i * BATCH * SIZES[0], BATCH));
    ASSERT_TRUE(!isnan(acc_mlp_backward_xent(m, y + (size_t)i * BATCH)));
    ASSERT_OK(acc, acc_backward(acc, acc_mlp_grads(m), n));
    ASSERT_TRUE(acc_optim_step(acc, o) >= 0);
    acc_optim_zero_grad(acc, o);
    acc_accumulate_end(acc);
  }
}

static side_t make_accum(void) {
  unsetenv("ACCELERATE_USE_CPU");
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.gradient_accumulation_steps = 2;
  side_t s = {acc_new(&cfg), NULL};
  ASSERT_NOT_NULL(s.acc);
  ASSERT_TRUE(acc_device(s.acc) >= 0);
  acc_set_seed(s.acc, 7, 0);
  s.m = acc_mlp_new(s.acc, SIZES, NL, BATCH);
  ASSERT_NOT_NULL(s.m);
  return s;
}

/* Issue 26, items 4 and 2: a device run saved in the middle of an
 * accumulation window (after an optimizer step: AdamW's moments are not
 * zero) and resumed in a fresh accelerator on a non-blocking stream ends
 * where the uninterrupted run does. Before, the window's device buffer
 * was not saved, and the resumed micro-step rescaled the earlier one. */
NBF_TEST(checkpoint_resume_mid_window) {
  need_gpu();
  enum { STEPS = 6, SAVE_AT = 3 };
  float *x = malloc((size_t)STEPS * BATCH * SIZES[0] * sizeof(float));
  int64_t *y = malloc((size_t)STEPS * BATCH * sizeof(int64_t));
  rt_make_data(x, y, STEPS * BATCH, SIZES[0], SIZES[NL]);
  char dir[] = "/tmp/nbf_gpu_ckpt_XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  side_t a = make_accum();
  const size_t n = acc_mlp_num_params(a.m);
  acc_optim_t *oa =
      acc_adamw_new(acc_mlp_params(a.m), acc_mlp_grads(a.m), n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
  micro_steps(a.acc, a.m, oa, x, y, 0, STEPS);
  float *want = download(acc_mlp_params(a.m), n);
  acc_optim_destroy(&oa);
  drop(&a);

  side_t b = make_accum();
  acc_optim_t *ob =
      acc_adamw_new(acc_mlp_params(b.m), acc_mlp_grads(b.m), n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
  micro_steps(b.acc, b.m, ob, x, y, 0, SAVE_AT);
  ASSERT_OK(b.acc, acc_save_state(b.acc, dir, b.m, ob));
  acc_optim_destroy(&ob);
  drop(&b);

  side_t c = make_accum();
  acc_optim_t *oc =
      acc_adamw_new(acc_mlp_params(c.m), acc_mlp_grads(c.m), n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f);
  void *stream = NULL;
  ASSERT_EQ(p_stream_create(&stream, 1 /* cudaStreamNonBlocking */), 0);
  ASSERT_OK(c.acc, acc_set_stream(c.acc, stream));
  ASSERT_OK(c.acc, acc_load_state(c.acc, dir, c.m, oc));
  micro_steps(c.acc, c.m, oc, x, y, SAVE_AT, STEPS);
  float *got = download(acc_mlp_params(c.m), n);
  expect_close("parameters after a resume in the middle of a window", got, want, n, 1e-6);
  ASSERT_OK(c.acc, acc_set_stream(c.acc, NULL));
  p_stream_destroy(stream);
  acc_optim_destroy(&oc);
  drop(&c);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
  free(got), free(want), free(x), free(y);
}

/* The Trainer (SGD, max_grad_norm 1: the clipping runs every step) on
 * `cpu` or the device; the final parameters (host copy, caller frees). */
static float *train(int cpu, const char *optim) {
  if (cpu)
    setenv("ACCELERATE_USE_CPU", "1", 1);
  else
    unsetenv("ACCELERATE_USE_CPU");
  acc_training_args_t args;
  acc_training_args_init(&args);
  const char *kv[][2] = {{"optim", optim},          {"learning_rate", "0.1"},
                         {"max_steps", "6"},        {"per_device_train_batch_size", "16"},
                         {"save_strategy", "no"},   {"disable_tqdm", "true"},
                         {"max_grad_norm", "0.05"}, {"optim_target_modules", "layers"},
                         {"logging_steps", "3"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    ASSERT_EQ(acc_training_args_set(&args, kv[i][0], kv[i][1]), ACC_OK);
  acc_t *acc = acc_trainer_accelerator_new(&args);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_device(acc) >= 0, !cpu);
  acc_set_seed(acc, 7, 0);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, 16);
  ASSERT_NOT_NULL(m);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  enum { NS = 128 };
  float *x = malloc((size_t)NS * SIZES[0] * sizeof(float));
  int64_t y[NS];
  rt_make_data(x, y, NS, SIZES[0], SIZES[NL]);
  acc_dataset_t ds = {x, y, NS, SIZES[0]};
  acc_trainer_t *tr = acc_trainer_new(acc, &args, &model, &ds, NULL);
  float *p = NULL;
  if (!strcmp(optim, "galore_adamw") && !cpu) { /* host BLAS over the parameters: refused */
    ASSERT_TRUE(tr == NULL);
    ASSERT_TRUE(strstr(acc_last_error(acc), "GaLore runs on the host only") != NULL);
  } else {
    if (!tr)
      NBF_TEST_FAIL("acc_trainer_new: %s", acc_last_error(acc));
    ASSERT_OK(acc, acc_trainer_train(tr));
    const size_t n = acc_mlp_num_params(m);
    p = cpu ? malloc(n * sizeof(float)) : download(acc_mlp_params(m), n);
    if (cpu)
      memcpy(p, acc_mlp_params(m), n * sizeof(float));
    acc_trainer_destroy(&tr);
  }
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  free(x);
  return p;
}

/* Issue 26, item 1: every Trainer step read and wrote the device
 * gradients on the host (clip_grad_norm): SIGSEGV at the first step. The
 * device run now matches the CPU run; GaLore refuses a device model. */
NBF_TEST(trainer_on_device) {
  need_gpu();
  float *pc = train(1, "sgd"), *pg = train(0, "sgd");
  int L = NL;
  size_t n = 0;
  for (int l = 0; l < L; l++)
    n += (size_t)SIZES[l + 1] * (SIZES[l] + 1);
  expect_close("parameters after 6 Trainer steps (clipped)", pg, pc, n, 1e-4);
  free(pc), free(pg);
  ASSERT_TRUE(train(0, "galore_adamw") == NULL);
}

/* ---- Issue 26 item 10: two ranks on one GPU through NCCL ---------- */

enum { DDP_WORLD = 2, DDP_STEPS = 8 };

typedef struct {
  const char *precision;
  const char *dir; /* where each rank writes its run */
  int gpu;
} ddp_arg_t;

/* What a rank writes: its loss and whether the optimizer stepped at each
 * step, the final loss scale, then the final parameters. */
typedef struct {
  float loss[DDP_STEPS];
  int stepped[DDP_STEPS];
  float scale;
} ddp_head_t;

static void ddp_path(char *path, size_t len, const ddp_arg_t *a, int rank) {
  snprintf(path, len, "%s/%s.%d", a->dir, a->gpu ? "gpu" : "cpu", rank);
}

/* A rank of a DDP run: the same MLP on every rank (rank 0's broadcast),
 * batch step * world + rank of the shared data, SGD with momentum,
 * acc_backward's average (NCCL on device buffers, Gloo on host ones). */
static int ddp_rank(int rank, int world, void *arg) {
  const ddp_arg_t *a = arg;
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.mixed_precision = a->precision;
  acc_t *acc = acc_new(&cfg);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_device(acc) >= 0, a->gpu);
  acc_set_seed(acc, 7, 0);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, BATCH);
  if (!m)
    NBF_TEST_FAIL("acc_mlp_new: %s", acc_last_error(acc));
  const size_t n = acc_mlp_num_params(m), rows = (size_t)DDP_STEPS * world * BATCH;
  acc_optim_t *o = acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.1f, 0.9f, 1e-4f);
  ASSERT_NOT_NULL(o);
  float *x = malloc(rows * SIZES[0] * sizeof(float));
  int64_t *y = malloc(rows * sizeof(int64_t));
  rt_make_data(x, y, (int)rows, SIZES[0], SIZES[NL]);
  ddp_head_t h = {0};
  for (int step = 0; step < DDP_STEPS; step++) {
    const size_t b = ((size_t)step * world + rank) * BATCH;
    acc_optim_zero_grad(acc, o);
    ASSERT_NOT_NULL(acc_mlp_forward(m, x + b * SIZES[0], BATCH));
    h.loss[step] = acc_mlp_backward_xent(m, y + b);
    ASSERT_TRUE(!isnan(h.loss[step]));
    ASSERT_OK(acc, acc_backward(acc, acc_mlp_grads(m), n));
    h.stepped[step] = acc_optim_step(acc, o);
    ASSERT_TRUE(h.stepped[step] >= 0);
  }
  h.scale = acc_loss_scale(acc);
  float *p = a->gpu ? download(acc_mlp_params(m), n) : malloc(n * sizeof(float));
  if (!a->gpu)
    memcpy(p, acc_mlp_params(m), n * sizeof(float));
  char path[512];
  ddp_path(path, sizeof path, a, rank);
  rt_write_run(path, &h, sizeof h, p, n);
  free(p), free(x), free(y);
  acc_optim_destroy(&o);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

static float *ddp_read(const ddp_arg_t *a, int rank, ddp_head_t *h, size_t n) {
  char path[512];
  ddp_path(path, sizeof path, a, rank);
  return rt_read_run(path, h, sizeof *h, n);
}

/* Two CPU ranks (Gloo), then two ranks on ONE GPU (NBFORK_SHARE_GPU: a
 * NCCL_HOSTID each, NCCL's socket transport; the first visible GPU even
 * where there are more), same data and seed: per rank the losses, the
 * steps taken and the loss scale match, and so do the final parameters,
 * within `rel` of the largest (the single-process tolerances above: the
 * all-reduce of two ranks is one exact f32 sum and a halving on both
 * sides, so only the model's arithmetic differs). On each side both
 * ranks end with the same parameters, bit for bit. */
static void ddp_compare(const char *precision, double rel) {
  rt_gpu_ranks(DDP_WORLD);
  rt_first_gpu_only();
  char dir[] = "/tmp/nbf_gpu_ddp_XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  ddp_arg_t cpu = {precision, dir, 0}, gpu = {precision, dir, 1};
  rt_spawn_opts_t o = {.world = DDP_WORLD, .deadline_s = 120, .timeout_s = "60"};
  unsetenv("NBFORK_TEST_GPU"); /* rt_spawn: ACCELERATE_USE_CPU=1 */
  ASSERT_EQ(rt_spawn(&o, ddp_rank, &cpu, NULL), 0);
  setenv("NBFORK_TEST_GPU", "1", 1);
  ASSERT_EQ(rt_spawn(&o, ddp_rank, &gpu, NULL), 0);
  size_t n = 0;
  for (int l = 0; l < NL; l++)
    n += (size_t)SIZES[l + 1] * (SIZES[l] + 1);
  float *first_p[2] = {NULL, NULL};
  for (int r = 0; r < DDP_WORLD; r++) {
    ddp_head_t hc, hg;
    float *pc = ddp_read(&cpu, r, &hc, n), *pg = ddp_read(&gpu, r, &hg, n);
    char what[96];
    snprintf(what, sizeof what, "rank %d: losses of %d steps", r, DDP_STEPS);
    expect_close(what, hg.loss, hc.loss, DDP_STEPS, rel);
    for (int s = 0; s < DDP_STEPS; s++)
      if (hg.stepped[s] != hc.stepped[s])
        NBF_TEST_FAIL("rank %d step %d: the CPU run %s, the GPU run %s", r, s,
                      hc.stepped[s] ? "stepped" : "skipped", hg.stepped[s] ? "stepped" : "skipped");
    ASSERT_TRUE(hg.scale == hc.scale);
    snprintf(what, sizeof what, "rank %d: parameters after %d steps", r, DDP_STEPS);
    expect_close(what, pg, pc, n, rel);
    if (r == 0) {
      first_p[0] = pc, first_p[1] = pg;
      continue;
    }
    ASSERT_EQ(memcmp(pc, first_p[0], n * sizeof(float)), 0); /* the ranks agree */
    ASSERT_EQ(memcmp(pg, first_p[1], n * sizeof(float)), 0);
    free(pc), free(pg);
  }
  free(first_p[0]), free(first_p[1]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
}

NBF_TEST(ddp_share_gpu_f32) {
  ddp_compare("no", 1e-4);
}

NBF_TEST(ddp_share_gpu_fp16) {
  ddp_compare("fp16", 5e-3);
}

/* ---- Issue 25 item 4: steps that wait for nothing ------------------ */

/* Eight steps (SGD, a new batch each) with acc_mlp_forward_async and
 * acc_mlp_backward_xent_async, the loss read only every third step and
 * after the last, on a non-blocking stream: the losses read and the
 * final parameters match the CPU's. A staging buffer refilled before
 * its upload ran, or a loss read before its kernel, would not. */
NBF_TEST(async_steps_match_cpu) {
  need_gpu();
  enum { STEPS = 8 };
  side_t s[2] = {make("no", 1), make("no", 0)};
  const size_t n = acc_mlp_num_params(s[0].m);
  float *x = malloc((size_t)STEPS * BATCH * SIZES[0] * sizeof(float));
  int64_t *y = malloc((size_t)STEPS * BATCH * sizeof(int64_t));
  rt_make_data(x, y, STEPS * BATCH, SIZES[0], SIZES[NL]);
  float *xb = malloc((size_t)BATCH * SIZES[0] * sizeof(float)); /* reused, as a loader's */
  int64_t yb[BATCH];
  float logged[2][STEPS];
  void *stream = NULL;
  ASSERT_EQ(p_stream_create(&stream, 1 /* cudaStreamNonBlocking */), 0);
  ASSERT_OK(s[1].acc, acc_set_stream(s[1].acc, stream));
  for (int k = 0; k < 2; k++) {
    acc_mlp_t *m = s[k].m;
    acc_optim_t *o = acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.1f, 0.9f, 0.0f);
    ASSERT_NOT_NULL(o);
    for (int step = 0; step < STEPS; step++) {
      memcpy(xb, x + (size_t)step * BATCH * SIZES[0], (size_t)BATCH * SIZES[0] * sizeof(float));
      memcpy(yb, y + (size_t)step * BATCH, sizeof yb);
      acc_optim_zero_grad(s[k].acc, o);
      ASSERT_OK(s[k].acc, acc_mlp_forward_async(m, xb, BATCH));
      ASSERT_OK(s[k].acc, acc_mlp_backward_xent_async(m, yb));
      ASSERT_OK(s[k].acc, acc_backward(s[k].acc, acc_mlp_grads(m), n));
      ASSERT_EQ(acc_optim_step(s[k].acc, o), 1);
      logged[k][step] = step % 3 == 2 || step == STEPS - 1 ? acc_mlp_loss(m) : 0.0f;
    }
    acc_optim_destroy(&o);
  }
  expect_close("losses read when logged", logged[1], logged[0], STEPS, 1e-4);
  float *pg = download(acc_mlp_params(s[1].m), n);
  expect_close("parameters after 8 steps that waited for nothing", pg, acc_mlp_params(s[0].m), n,
               1e-4);
  /* the logits of the last forward, when asked for */
  const float *zc = acc_mlp_logits(s[0].m), *zg = acc_mlp_logits(s[1].m);
  ASSERT_NOT_NULL(zg);
  expect_close("logits of the last forward", zg, zc, (size_t)BATCH * SIZES[NL], 1e-4);
  ASSERT_OK(s[1].acc, acc_set_stream(s[1].acc, NULL));
  p_stream_destroy(stream);
  free(pg), free(xb), free(x), free(y);
  drop(&s[0]), drop(&s[1]);
}

NBF_TEST_MAIN()
