/*
 * test_mixed.c — mixed precision: array conversions (host; device SKIPs
 * without a GPU), the fp16 loss scaler (GradScaler semantics) on an
 * injected overflow, and fp16/bf16 training runs on Fashion-MNIST.
 *   test_mixed convert_f16|convert_bf16|scaler_overflow|scaler_growth|
 *              scaler_off|scaler_ranks|train_fp16|train_bf16|gpu_convert
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_half.h"
#include "acc_nccl.h"
#include "nbfork.h"
#include "rt_cudart.h"
#include "rt_mlp.h"
#include "rt_spawn.h"
#include "rt_test.h"

static acc_t *new_acc(const char *precision) {
  acc_t *acc = rt_acc_new(precision, 1);
  ASSERT_NOT_NULL(acc);
  return acc;
}

/* The buffers of a conversion test: n halves, n floats, n halves. */
typedef struct {
  uint16_t *h, *back;
  float *f;
} conv_bufs_t;

/* Every 16-bit pattern into h[n] (n = 65536), converted to f32 (f) and
 * back (back); free with conv_bufs_free. */
static conv_bufs_t round_trip_all(int bf16, size_t n) {
  conv_bufs_t b = {malloc(n * 2), malloc(n * 2), malloc(n * 4)};
  ASSERT_TRUE(b.h && b.back && b.f);
  for (size_t i = 0; i < n; i++)
    b.h[i] = (uint16_t)i;
  ASSERT_OK(NULL, bf16 ? acc_from_bf16(NULL, b.f, b.h, n) : acc_from_f16(NULL, b.f, b.h, n));
  ASSERT_OK(NULL, bf16 ? acc_to_bf16(NULL, b.back, b.f, n) : acc_to_f16(NULL, b.back, b.f, n));
  return b;
}

static void conv_bufs_free(conv_bufs_t *b) {
  free(b->h), free(b->back), free(b->f);
}

/* n pseudo-random f32 bit patterns (every exponent: overflow,
 * subnormals, NaN) into f, converted to the half type in back. */
static void random_to_half(int bf16, uint32_t seed, float *f, uint16_t *back, size_t n) {
  uint32_t x = seed;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    memcpy(&f[i], &x, 4);
  }
  ASSERT_OK(NULL, bf16 ? acc_to_bf16(NULL, back, f, n) : acc_to_f16(NULL, back, f, n));
}

/* Every fp16 value converts to f32 and back unchanged (NaN stays NaN);
 * f32 values round exactly as the scalar reference of acc_half.h (which
 * test_half checks against brute force). */
NBF_TEST(convert_f16) {
  const size_t n = 65536;
  conv_bufs_t b = round_trip_all(0, n);
  for (size_t i = 0; i < n; i++) {
    int is_nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
    ASSERT_TRUE(is_nan ? isnan(b.f[i]) : b.f[i] == acc_f16_to_f32(b.h[i]));
    if (is_nan)
      ASSERT_TRUE((b.back[i] & 0x7c00) == 0x7c00 && (b.back[i] & 0x3ff));
    else if (b.back[i] != b.h[i])
      NBF_TEST_FAIL("half 0x%04zx -> %.9g -> 0x%04x", i, b.f[i], b.back[i]);
  }
  random_to_half(0, 7, b.f, b.back, n);
  for (size_t i = 0; i < n; i++)
    if (!isnan(b.f[i]) && b.back[i] != acc_f32_to_f16(b.f[i]))
      NBF_TEST_FAIL("f32 %.9g: 0x%04x vs reference 0x%04x", b.f[i], b.back[i],
                    acc_f32_to_f16(b.f[i]));
  ASSERT_EQ(acc_to_f16(NULL, NULL, b.f, 4), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_OK(NULL, acc_to_f16(NULL, NULL, NULL, 0));
  conv_bufs_free(&b);
}

NBF_TEST(convert_bf16) {
  const size_t n = 65536;
  conv_bufs_t b = round_trip_all(1, n);
  for (size_t i = 0; i < n; i++) {
    if (isnan(b.f[i]))
      ASSERT_TRUE(isnan(acc_bf16_to_f32(b.back[i])));
    else if (b.back[i] != b.h[i])
      NBF_TEST_FAIL("bf16 0x%04zx -> %.9g -> 0x%04x", i, b.f[i], b.back[i]);
  }
  random_to_half(1, 11, b.f, b.back, n);
  for (size_t i = 0; i < n; i++)
    if (isnan(b.f[i]))
      ASSERT_TRUE(isnan(acc_bf16_to_f32(b.back[i])));
    else if (b.back[i] != acc_f32_to_bf16(b.f[i]))
      NBF_TEST_FAIL("f32 %.9g: 0x%04x vs reference 0x%04x", b.f[i], b.back[i],
                    acc_f32_to_bf16(b.f[i]));
  /* ties to even: 1 + 2^-8 rounds to 1, 1 + 3*2^-8 rounds up */
  float t[2] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256};
  ASSERT_OK(NULL, acc_to_bf16(NULL, b.back, t, 2));
  ASSERT_EQ(b.back[0], 0x3f80);
  ASSERT_EQ(b.back[1], 0x3f82);
  conv_bufs_free(&b);
}

/* One SGD step (lr 1, no momentum) on gradients g scaled by the current
 * loss scale, as the model toolkit leaves them. */
static int step_with(acc_t *acc, acc_optim_t *o, float *g, float value) {
  g[0] = value * acc_loss_scale(acc);
  g[1] = -2.0f * acc_loss_scale(acc);
  acc_accumulate_begin(acc, 0);
  int stepped = acc_optim_step(acc, o);
  acc_accumulate_end(acc);
  return stepped;
}

/* An injected overflow: the step is skipped (parameters unchanged), the
 * scale halves, the clean-step count restarts; NaN behaves the same. */
NBF_TEST(scaler_overflow) {
  acc_t *acc = new_acc("fp16");
  ASSERT_EQ(acc_mixed_precision(acc), ACC_PRECISION_FP16);
  ASSERT_TRUE(acc_loss_scale(acc) == 65536.0f); /* 2^16 */
  float p[2] = {1.0f, 1.0f}, g[2];
  acc_optim_t *o = acc_sgd_new(p, g, 2, 1.0f, 0.0f, 0.0f);
  /* a clean step: gradients unscaled before the update */
  ASSERT_EQ(step_with(acc, o, g, 0.5f), 1);
  ASSERT_TRUE(p[0] == 0.5f && p[1] == 3.0f);
  ASSERT_TRUE(g[0] == 0.5f); /* unscaled in place */
  ASSERT_EQ(acc_optimizer_step_was_skipped(acc), 0);
  ASSERT_EQ(acc_loss_scale_growth_tracker(acc), 1);
  /* overflow: inf */
  ASSERT_EQ(step_with(acc, o, g, INFINITY), 0);
  ASSERT_TRUE(p[0] == 0.5f && p[1] == 3.0f);
  ASSERT_EQ(acc_optimizer_step_was_skipped(acc), 1);
  ASSERT_TRUE(acc_loss_scale(acc) == 32768.0f);
  ASSERT_EQ(acc_loss_scale_growth_tracker(acc), 0);
  /* NaN */
  ASSERT_EQ(step_with(acc, o, g, NAN), 0);
  ASSERT_TRUE(p[0] == 0.5f && p[1] == 3.0f);
  ASSERT_TRUE(acc_loss_scale(acc) == 16384.0f);
  /* back to clean */
  ASSERT_EQ(step_with(acc, o, g, 0.25f), 1);
  ASSERT_TRUE(p[0] == 0.25f && p[1] == 5.0f);
  ASSERT_EQ(acc_optimizer_step_was_skipped(acc), 0);
  ASSERT_TRUE(acc_loss_scale(acc) == 16384.0f);
  /* a non-sync micro-step neither steps nor touches the scaler */
  acc_optim_destroy(&o);
  acc_destroy(&acc);

  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.mixed_precision = "fp16";
  cfg.gradient_accumulation_steps = 2;
  acc = acc_new(&cfg);
  o = acc_sgd_new(p, g, 2, 1.0f, 0.0f, 0.0f);
  g[0] = INFINITY;
  acc_accumulate_begin(acc, 0); /* step 1 of 2: no sync */
  ASSERT_EQ(acc_optim_step(acc, o), 0);
  ASSERT_TRUE(acc_loss_scale(acc) == 65536.0f);
  acc_accumulate_end(acc);
  acc_optim_destroy(&o);
  acc_destroy(&acc);
}

/* `interval` clean steps: the scale stays `before` through the first
 * interval - 1 and is `after` once the last one is taken. */
static void grows_after(acc_t *acc, acc_optim_t *o, float *g, int interval, float before,
                        float after) {
  for (int i = 0; i < interval - 1; i++)
    ASSERT_EQ(step_with(acc, o, g, 1.0f), 1);
  ASSERT_TRUE(acc_loss_scale(acc) == before);
  ASSERT_EQ(step_with(acc, o, g, 1.0f), 1);
  ASSERT_TRUE(acc_loss_scale(acc) == after);
}

/* Growth after `growth_interval` consecutive clean steps (3 here, 2000
 * by default), restarted by an overflow; custom factors. */
NBF_TEST(scaler_growth) {
  acc_t *acc = new_acc("fp16");
  float p[2] = {0, 0}, g[2];
  acc_optim_t *o = acc_sgd_new(p, g, 2, 0.0f, 0.0f, 0.0f);
  ASSERT_OK(acc, acc_set_grad_scaler(acc, 1024.0f, 2.0f, 0.5f, 3));
  ASSERT_TRUE(acc_loss_scale(acc) == 1024.0f);
  grows_after(acc, o, g, 3, 1024.0f, 2048.0f);
  ASSERT_EQ(acc_loss_scale_growth_tracker(acc), 0);
  ASSERT_EQ(step_with(acc, o, g, 1.0f), 1);
  ASSERT_EQ(step_with(acc, o, g, 1.0f), 1);
  ASSERT_EQ(step_with(acc, o, g, INFINITY), 0); /* restarts the count */
  ASSERT_TRUE(acc_loss_scale(acc) == 1024.0f);
  grows_after(acc, o, g, 3, 1024.0f, 2048.0f);
  /* the default interval is 2000 */
  ASSERT_OK(acc, acc_set_grad_scaler(acc, 65536.0f, 2.0f, 0.5f, 2000));
  grows_after(acc, o, g, 2000, 65536.0f, 131072.0f);
  /* growth stops where the scale would overflow f32 */
  ASSERT_OK(acc, acc_set_grad_scaler(acc, 3e38f, 2.0f, 0.5f, 1));
  g[0] = 1.0f, g[1] = 1.0f;
  acc_update_loss_scale(acc, 0);
  ASSERT_TRUE(acc_loss_scale(acc) == 3e38f);
  /* bad settings */
  ASSERT_EQ(acc_set_grad_scaler(acc, 0.0f, 2.0f, 0.5f, 10), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_CONTAINS(acc_last_error(acc), "init_scale > 0");
  ASSERT_EQ(acc_set_grad_scaler(acc, 1.0f, 1.0f, 0.5f, 10), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_set_grad_scaler(acc, 1.0f, 2.0f, 1.0f, 10), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_set_grad_scaler(acc, 1.0f, 2.0f, 0.5f, 0), ACC_ERR_INVALID_ARGUMENT);
  /* unscale twice before an update: the second call does nothing */
  ASSERT_OK(acc, acc_set_grad_scaler(acc, 4.0f, 2.0f, 0.5f, 10));
  g[0] = 8.0f;
  ASSERT_EQ(acc_unscale_gradients(acc, g, 2), 1);
  ASSERT_EQ(acc_unscale_gradients(acc, g, 2), 1);
  ASSERT_TRUE(g[0] == 2.0f);
  acc_update_loss_scale(acc, 0);
  acc_optim_destroy(&o);
  acc_destroy(&acc);
}

/* no / bf16: the scale is 1 and gradients are used as they are; an inf
 * gradient is not skipped (there is no scaler, as in Accelerate). */
NBF_TEST(scaler_off) {
  const char *modes[] = {"no", "bf16"};
  for (int k = 0; k < 2; k++) {
    acc_t *acc = new_acc(modes[k]);
    ASSERT_TRUE(acc_loss_scale(acc) == 1.0f);
    float p[2] = {1, 1}, g[2] = {0.5f, 0.5f};
    acc_optim_t *o = acc_sgd_new(p, g, 2, 1.0f, 0.0f, 0.0f);
    acc_accumulate_begin(acc, 0);
    ASSERT_EQ(acc_optim_step(acc, o), 1);
    ASSERT_TRUE(p[0] == 0.5f);
    ASSERT_EQ(acc_unscale_gradients(acc, g, 2), 1);
    ASSERT_TRUE(g[0] == 0.5f);
    acc_optim_destroy(&o);
    acc_destroy(&acc);
  }
}

/* Two ranks, an overflow on rank 1 only: after acc_backward's all-reduce
 * both ranks see it, both skip and both halve the scale (they stay in
 * step); clean steps then agree bit for bit. */
static int ranks_body(int rank, int world, void *arg) {
  (void)world, (void)arg;
  acc_t *acc = new_acc("fp16");
  float p[4] = {1, 2, 3, 4}, g[4];
  acc_optim_t *o = acc_sgd_new(p, g, 4, 0.5f, 0.9f, 0.0f);
  for (int step = 0; step < 6; step++) {
    float S = acc_loss_scale(acc);
    for (int i = 0; i < 4; i++)
      g[i] = (float)(rank + 1 + i) * 0.125f * S;
    if (step == 2 && rank == 1)
      g[3] = INFINITY;
    acc_accumulate_begin(acc, 0);
    ASSERT_OK(acc, acc_backward(acc, g, 4));
    int stepped = acc_optim_step(acc, o);
    acc_accumulate_end(acc);
    ASSERT_EQ(stepped, step != 2);
    ASSERT_TRUE(acc_loss_scale(acc) == (step >= 2 ? 32768.0f : 65536.0f));
  }
  float all[8];
  ASSERT_OK(acc, acc_all_gather(acc, p, all, 4, ACC_F32));
  ASSERT_TRUE(memcmp(all, all + 4, 4 * sizeof(float)) == 0);
  acc_optim_destroy(&o);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(scaler_ranks) {
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, ranks_body, NULL, NULL), 0);
}

/* ---- training ---- */

typedef struct {
  const char *precision;
  int skipped_max; /* at most this many skipped steps */
} train_arg_t;

/* Train 784-256-10 for one epoch on 12000 Fashion-MNIST images (SGD
 * 0.1/0.9, batch 64 per rank) in `precision`, evaluate on 2000 test
 * images; rank 0 writes accuracy and skipped steps to the pipe fd. */
static double train_once(const char *precision, int *skipped) {
  acc_t *acc = new_acc(precision);
  acc_set_seed(acc, 0, 0);
  const size_t N = 12000, NT = 2000;
  rt_fmnist_run_t r;
  rt_fmnist_run_new(&r, acc, N, NT);
  size_t nb = acc_sampler_num_batches(r.s);
  *skipped = 0;
  for (size_t b = 0; b < nb; b++) {
    size_t len = rt_mlp_batch(r.s, b, r.d.X, r.d.y, r.xb, r.yb);
    acc_mlp_zero_grad(r.m);
    acc_mlp_forward(r.m, r.xb, (int)len);
    float loss = acc_mlp_backward_xent(r.m, r.yb);
    ASSERT_TRUE(isfinite(loss));
    acc_accumulate_begin(acc, b + 1 == nb);
    ASSERT_OK(acc, acc_backward(acc, acc_mlp_grads(r.m), acc_mlp_num_params(r.m)));
    if (!acc_optim_step(acc, r.o))
      (*skipped)++;
    acc_accumulate_end(acc);
  }
  double accuracy = rt_mlp_accuracy(acc, r.m, r.d.XT, r.d.ty, NT, 64, r.xb);
  acc_print(acc, "%-4s: %zu steps, %d skipped, final scale %g, accuracy %.4f\n", precision, nb,
            *skipped, (double)acc_loss_scale(acc), accuracy);
  rt_fmnist_run_free(&r);
  acc_destroy(&acc);
  return accuracy;
}

static int pipe_fd[2];

static int train_body(int rank, int world, void *arg) {
  (void)world;
  const train_arg_t *a = arg;
  int sk_ref = 0, sk = 0;
  double ref = train_once("no", &sk_ref);
  double got = train_once(a->precision, &sk);
  ASSERT_EQ(sk_ref, 0);
  ASSERT_LE(sk, a->skipped_max);
  if (rank == 0) {
    double r[2] = {ref, got};
    ASSERT_EQ(write(pipe_fd[1], r, sizeof r), (long long)sizeof r);
  }
  return 0;
}

static void train(const char *precision, int skipped_max) {
  if (access(RT_FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0)
    NBF_TEST_SKIP("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
  ASSERT_EQ(pipe(pipe_fd), 0);
  train_arg_t a = {precision, skipped_max};
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 100};
  ASSERT_EQ(rt_spawn(&o, train_body, &a, NULL), 0);
  double r[2];
  ASSERT_EQ(read(pipe_fd[0], r, sizeof r), (long long)sizeof r);
  printf("accuracy: no %.4f, %s %.4f\n", r[0], precision, r[1]);
  ASSERT_DBL_LT(0.72, r[1]);               /* it learns */
  ASSERT_DBL_LT(fabs(r[1] - r[0]), 0.025); /* as well as f32, within 2.5 points */
}

/* ---- device conversions (SKIP without a GPU) ---- */

NBF_TEST(gpu_convert) {
  rt_cudart_load();
  if (acc_nccl_device_count() <= 0)
    NBF_TEST_SKIP("no GPU visible (or nbfork built without CUDA)");
  unsetenv("ACCELERATE_USE_CPU");
  acc_t *acc = new_acc("fp16");
  ASSERT_TRUE(acc_device(acc) >= 0);
  const size_t n = 100000;
  float *h = malloc(n * 4), *hb = malloc(n * 4), *d = NULL, *d2 = NULL;
  uint16_t *hh = malloc(n * 2), *dh = NULL;
  uint32_t x = 3;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    h[i] = (float)((double)x / 4294967296.0 * 200000.0 - 100000.0);
  }
  ASSERT_EQ(p_malloc((void **)&d, n * 4), 0);
  ASSERT_EQ(p_malloc((void **)&d2, n * 4), 0);
  ASSERT_EQ(p_malloc((void **)&dh, n * 2), 0);
  ASSERT_EQ(p_memcpy(d, h, n * 4, 1), 0);
  const char *names[2] = {"fp16", "bf16"};
  for (int k = 0; k < 2; k++) {
    ASSERT_OK(acc, k ? acc_to_bf16(acc, dh, d, n) : acc_to_f16(acc, dh, d, n));
    ASSERT_OK(acc, k ? acc_from_bf16(acc, d2, dh, n) : acc_from_f16(acc, d2, dh, n));
    ASSERT_EQ(p_memcpy(hh, dh, n * 2, 2), 0);
    ASSERT_EQ(p_memcpy(hb, d2, n * 4, 2), 0);
    for (size_t i = 0; i < n; i++) {
      uint16_t want = k ? acc_f32_to_bf16(h[i]) : acc_f32_to_f16(h[i]);
      if (hh[i] != want)
        NBF_TEST_FAIL("%s: %.9g -> 0x%04x, want 0x%04x", names[k], h[i], hh[i], want);
      float back = k ? acc_bf16_to_f32(want) : acc_f16_to_f32(want);
      ASSERT_TRUE(hb[i] == back || (isnan(hb[i]) && isnan(back)));
    }
  }
  /* unscale on device: finite, then with an inf */
  ASSERT_EQ(acc_unscale_gradients(acc, d, n), 1);
  acc_update_loss_scale(acc, 0);
  ASSERT_EQ(p_memcpy(hb, d, n * 4, 2), 0);
  ASSERT_TRUE(hb[7] == h[7] / 65536.0f);
  h[5] = INFINITY;
  ASSERT_EQ(p_memcpy(d, h, n * 4, 1), 0);
  ASSERT_EQ(acc_unscale_gradients(acc, d, n), 0);
  p_free(d), p_free(d2), p_free(dh);
  free(h), free(hb), free(hh);
  acc_destroy(&acc);
}

NBF_TEST(train_fp16) {
  train("fp16", 30);
}

NBF_TEST(train_bf16) {
  train("bf16", 0);
}

/* Ranks print progress from forked children: keep stdout line-buffered
 * so that their lines do not interleave mid-line. */
__attribute__((constructor)) static void line_buffered_stdout(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
}

NBF_TEST_MAIN()
