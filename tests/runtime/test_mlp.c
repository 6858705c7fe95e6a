/*
 * test_mlp.c — the model toolkit: MLP gradients (finite differences),
 * nn.Linear initialization bounds, SGD/AdamW against hand-computed
 * PyTorch updates, and a short Fashion-MNIST training run.
 *   test_mlp gradcheck|host_backward_equals_reference|init|sgd|adamw|
 *            train_fashion_mnist|buckets|buckets_fp16|buckets_peer_exit
 *
 * host_backward_equals_reference: the host backward's gradients are
 * bit-for-bit those of a plain reference in this file (the same CBLAS
 * calls, the ReLU mask as the conditional store it replaced).
 *
 * buckets*: the gradient all-reduce of acc_mlp_backward_xent per bucket
 * (NBFORK_GRAD_BUCKETS=1) and per bucket overlapping the backward pass
 * (=2) give parameters bit-for-bit equal to one all-reduce of the whole
 * buffer in acc_backward (=0), 2 processes; a peer that exits in the
 * middle makes the other fail within the timeout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "nbfork.h"
#include "rt_mlp.h"
#include "rt_spawn.h"
#include "rt_test.h"

NBF_TEST(gradcheck) {
  const int sizes[] = {5, 7, 6, 4};
  acc_set_seed(NULL, 3, 0);
  acc_mlp_t *m = acc_mlp_new(NULL, sizes, 3, 8);
  ASSERT_NOT_NULL(m);
  const int B = 6;
  float x[6 * 5];
  int64_t y[6] = {0, 3, 1, 2, 3, 0};
  for (int i = 0; i < B * 5; i++)
    x[i] = (float)(acc_rand_normal(NULL));
  size_t n = acc_mlp_num_params(m);
  ASSERT_EQ(n, 5 * 7 + 7 + 7 * 6 + 6 + 6 * 4 + 4);
  float *p = acc_mlp_params(m), *g = acc_mlp_grads(m);
  acc_mlp_zero_grad(m);
  ASSERT_NOT_NULL(acc_mlp_forward(m, x, B));
  float loss = acc_mlp_backward_xent(m, y);
  ASSERT_TRUE(isfinite(loss) && loss > 0);
  double max_rel = 0;
  for (size_t i = 0; i < n; i++) {
    float keep = p[i];
    const float h = 1e-3f;
    p[i] = keep + h;
    acc_mlp_forward(m, x, B);
    float *gs = malloc(n * sizeof(float));
    memcpy(gs, g, n * sizeof(float)); /* backward ADDS: save and restore */
    float lp = acc_mlp_backward_xent(m, y);
    p[i] = keep - h;
    acc_mlp_forward(m, x, B);
    float lm = acc_mlp_backward_xent(m, y);
    memcpy(g, gs, n * sizeof(float));
    free(gs);
    p[i] = keep;
    double num = ((double)lp - (double)lm) / (2.0 * h);
    double err = fabs(num - g[i]) / fmax(1e-2, fabs(num) + fabs(g[i]));
    if (err > max_rel)
      max_rel = err;
    if (err > 2e-2)
      NBF_TEST_FAIL("param %zu: analytic %.6g numeric %.6g", i, g[i], num);
  }
  /* backward ADDS into the gradient buffer */
  float g0 = g[0];
  acc_mlp_forward(m, x, B);
  acc_mlp_backward_xent(m, y);
  ASSERT_NEAR(g[0], 2 * g0, 1e-5 + 1e-4 * fabs(g0));
  /* predict = argmax */
  int64_t pred[6];
  const float *z = acc_mlp_forward(m, x, B);
  acc_mlp_predict(m, pred);
  for (int r = 0; r < B; r++)
    for (int c = 0; c < 4; c++)
      ASSERT_TRUE(z[r * 4 + c] <= z[r * 4 + pred[r]]);
  ASSERT_NULL(acc_mlp_forward(m, x, 9)); /* > max_batch */
  int64_t bad[6] = {0, 9, 0, 0, 0, 0};
  acc_mlp_forward(m, x, B);
  ASSERT_TRUE(isnan(acc_mlp_backward_xent(m, bad)));
  printf("max relative gradient error %.2e\n", max_rel);
  acc_mlp_destroy(&m);
  ASSERT_NULL(m);
}

/* The reference forward of layer l: out (B × nout) = in · W^T + b, ReLU
 * on hidden layers; the calls acc_mlp.c makes. */
static void ref_forward(const float *w, const float *b, const float *in, int B, int nin, int nout,
                        int relu, float *out) {
  for (int r = 0; r < B; r++)
    memcpy(out + (size_t)r * nout, b, (size_t)nout * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, nout, nin, 1.0f, in, nin, w, nin, 1.0f,
              out, nout);
  for (int i = 0; relu && i < B * nout; i++)
    out[i] = out[i] > 0.0f ? out[i] : 0.0f;
}

/* dz = (softmax(z) - onehot(y)) / B, in acc_mlp.c's order of operations. */
static void ref_xent(const float *z, const int64_t *y, int B, int C, float *dz) {
  const float invB = 1.0f / (float)B;
  for (int r = 0; r < B; r++) {
    const float *zr = z + (size_t)r * C;
    float *d = dz + (size_t)r * C, mx = zr[0], s = 0.0f;
    for (int c = 1; c < C; c++)
      mx = zr[c] > mx ? zr[c] : mx;
    for (int c = 0; c < C; c++) {
      d[c] = expf(zr[c] - mx);
      s += d[c];
    }
    float inv = invB / s;
    for (int c = 0; c < C; c++)
      d[c] *= inv;
    d[y[r]] -= invB;
  }
}

NBF_TEST(host_backward_equals_reference) {
  enum { L = 3, B = 16 };
  const int sizes[L + 1] = {5, 7, 6, 4};
  acc_set_seed(NULL, 5, 0);
  acc_mlp_t *m = acc_mlp_new(NULL, sizes, L, B);
  ASSERT_NOT_NULL(m);
  float x[B * 5], act[L + 1][B * 7], dz[B * 7], dprev[B * 7];
  int64_t y[B];
  for (int i = 0; i < B * 5; i++)
    x[i] = (float)acc_rand_normal(NULL);
  for (int r = 0; r < B; r++)
    y[r] = r % 4;
  size_t n = acc_mlp_num_params(m), w_off[L], off = 0;
  for (int l = 0; l < L; l++) {
    w_off[l] = off;
    off += (size_t)sizes[l + 1] * (size_t)(sizes[l] + 1); /* W_l, then b_l */
  }
  ASSERT_EQ(off, n);
  const float *p = acc_mlp_params(m);
  float *want = calloc(n, sizeof(float));
  memcpy(act[0], x, sizeof x);
  for (int l = 0; l < L; l++)
    ref_forward(p + w_off[l], p + w_off[l] + (size_t)sizes[l + 1] * sizes[l], act[l], B, sizes[l],
                sizes[l + 1], l < L - 1, act[l + 1]);
  ref_xent(act[L], y, B, sizes[L], dz);
  int masked = 0;
  for (int l = L - 1; l >= 0; l--) {
    const int nin = sizes[l], nout = sizes[l + 1];
    float *gw = want + w_off[l], *gb = gw + (size_t)nout * nin;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nout, nin, B, 1.0f, dz, nout, act[l], nin,
                1.0f, gw, nin);
    for (int r = 0; r < B; r++)
      for (int c = 0; c < nout; c++)
        gb[c] += dz[r * nout + c];
    if (l == 0)
      break;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, nin, nout, 1.0f, dz, nout,
                p + w_off[l], nin, 0.0f, dprev, nin);
    for (int i = 0; i < B * nin; i++)
      if (!(act[l][i] > 0.0f)) { /* the mask as acc_mlp.c had it */
        dprev[i] = 0.0f;
        masked++;
      }
    memcpy(dz, dprev, (size_t)B * nin * sizeof(float));
  }
  ASSERT_GT(masked, B); /* the mask zeroed something: the test exercises it */
  acc_mlp_zero_grad(m);
  const float *z = acc_mlp_forward(m, x, B);
  ASSERT_NOT_NULL(z);
  ASSERT_TRUE(memcmp(z, act[L], (size_t)B * sizes[L] * sizeof(float)) == 0);
  ASSERT_TRUE(isfinite(acc_mlp_backward_xent(m, y)));
  const float *g = acc_mlp_grads(m);
  for (size_t i = 0; i < n; i++)
    if (memcmp(&g[i], &want[i], sizeof(float)) != 0)
      NBF_TEST_FAIL("gradient %zu: %.9g, reference %.9g", i, g[i], want[i]);
  free(want);
  acc_mlp_destroy(&m);
}

NBF_TEST(init) {
  const int sizes[] = {784, 256, 10};
  acc_set_seed(NULL, 42, 0);
  acc_mlp_t *m = acc_mlp_new(NULL, sizes, 2, 64);
  float *p = acc_mlp_params(m);
  double b0 = 1.0 / sqrt(784.0), b1 = 1.0 / sqrt(256.0);
  double mx0 = 0, mx1 = 0, sum0 = 0;
  size_t n0 = 784 * 256 + 256;
  for (size_t i = 0; i < n0; i++) {
    mx0 = fmax(mx0, fabs(p[i]));
    sum0 += p[i];
  }
  for (size_t i = n0; i < acc_mlp_num_params(m); i++)
    mx1 = fmax(mx1, fabs(p[i]));
  ASSERT_DBL_LE(mx0, b0);
  ASSERT_DBL_LT(b0 * 0.99, mx0); /* uses the whole range */
  ASSERT_DBL_LE(mx1, b1);
  ASSERT_NEAR(sum0 / (double)n0, 0.0, 3e-4);
  /* same seed, same parameters */
  float first = p[0];
  acc_mlp_destroy(&m);
  acc_set_seed(NULL, 42, 0);
  m = acc_mlp_new(NULL, sizes, 2, 64);
  ASSERT_TRUE(acc_mlp_params(m)[0] == first);
  acc_mlp_destroy(&m);
}

NBF_TEST(sgd) {
  /* torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), 3 steps */
  float p[2] = {1.0f, -2.0f}, g[2];
  acc_optim_t *o = acc_sgd_new(p, g, 2, 0.1f, 0.9f, 0.01f);
  double rp[2] = {1.0, -2.0}, buf[2] = {0, 0};
  const float grads[3][2] = {{0.5f, -1.0f}, {0.25f, 2.0f}, {-1.0f, 0.0f}};
  for (int t = 0; t < 3; t++) {
    memcpy(g, grads[t], sizeof g);
    ASSERT_EQ(acc_optim_step(NULL, o), 1);
    for (int i = 0; i < 2; i++) {
      double d = grads[t][i] + 0.01 * rp[i];
      buf[i] = t == 0 ? d : 0.9 * buf[i] + d;
      rp[i] -= 0.1 * buf[i];
      ASSERT_NEAR(p[i], rp[i], 1e-6);
    }
  }
  acc_optim_set_lr(o, 0.0f);
  memcpy(g, grads[0], sizeof g);
  float keep = p[0];
  acc_optim_step(NULL, o);
  ASSERT_TRUE(p[0] == keep);
  acc_optim_destroy(&o);
  ASSERT_NULL(o);
  ASSERT_NULL(acc_sgd_new(NULL, g, 2, 0.1f, 0, 0));
}

NBF_TEST(adamw) {
  /* torch.optim.AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, wd=0.1) */
  float p[2] = {0.5f, -1.5f}, g[2];
  acc_optim_t *o = acc_adamw_new(p, g, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f);
  ASSERT_NOT_NULL(o);
  double rp[2] = {0.5, -1.5}, m[2] = {0}, v[2] = {0};
  const float grads[4][2] = {{0.1f, -0.2f}, {0.3f, 0.1f}, {-0.5f, 0.0f}, {0.2f, 0.2f}};
  for (int t = 1; t <= 4; t++) {
    memcpy(g, grads[t - 1], sizeof g);
    ASSERT_EQ(acc_optim_step(NULL, o), 1);
    for (int i = 0; i < 2; i++) {
      double gr = grads[t - 1][i];
      rp[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * gr;
      v[i] = 0.999 * v[i] + 0.001 * gr * gr;
      double mh = m[i] / (1 - pow(0.9, t)), vh = v[i] / (1 - pow(0.999, t));
      rp[i] -= 0.01 * mh / (sqrt(vh) + 1e-8);
      ASSERT_NEAR(p[i], rp[i], 2e-6);
    }
  }
  acc_optim_destroy(&o);
  ASSERT_NULL(acc_adamw_new(p, g, 2, 0.01f, 1.0f, 0.999f, 1e-8f, 0));
}

/* Train 784-256-10 on the first 10000 Fashion-MNIST training images for
 * one epoch (SGD 0.1/0.9, batch 64); test accuracy must beat 0.70, and
 * the time per step is printed (the benchmark's unit of work). */
static int train_rank(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  acc_set_seed(acc, 0, 0);
  rt_fmnist_run_t r;
  rt_fmnist_run_new(&r, acc, 10000, 10000);
  double t0 = rt_now();
  size_t nb = acc_sampler_num_batches(r.s);
  float loss = 0;
  for (size_t b = 0; b < nb; b++) {
    size_t len = rt_mlp_batch(r.s, b, r.d.X, r.d.y, r.xb, r.yb);
    acc_accumulate_begin(acc, b + 1 == nb);
    acc_mlp_forward(r.m, r.xb, (int)len);
    loss = acc_mlp_backward_xent(r.m, r.yb);
    ASSERT_OK(acc, acc_backward(acc, acc_mlp_grads(r.m), acc_mlp_num_params(r.m)));
    acc_optim_step(acc, r.o);
    acc_optim_zero_grad(acc, r.o);
    acc_accumulate_end(acc);
  }
  double dt = rt_now() - t0;
  /* evaluate on this rank's shard of the test set, gather for metrics */
  double accuracy = rt_mlp_accuracy(acc, r.m, r.d.XT, r.d.ty, 10000, 64, r.xb);
  acc_print(acc, "world %d: %zu steps in %.3f s (%.3f ms/step), last loss %.3f, accuracy %.4f\n",
            world, nb, dt, 1e3 * dt / (double)nb, loss, accuracy);
  ASSERT_DBL_LT(0.70, accuracy);
  (void)rank;
  rt_fmnist_run_free(&r);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(train_fashion_mnist) {
  if (access(RT_FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0)
    NBF_TEST_SKIP("Fashion-MNIST not installed (Debian package dataset-fashion-mnist)");
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 100};
  ASSERT_EQ(rt_spawn(&o, train_rank, NULL, NULL), 0);
}

/* 2 ranks train 30 steps of a 784-300-10 MLP (W0 is 940 KB: several
 * overlapped blocks) on synthetic data; rank 0 writes the parameters. */
typedef struct {
  const char *precision;
  const char *out;
  int exit_at; /* rank 1 exits before this step (0 = never) */
} bucket_run_t;

static int bucket_rank(int rank, int world, void *arg) {
  (void)world;
  const bucket_run_t *a = arg;
  acc_t *acc = rt_acc_new(a->precision, 1);
  if (acc) /* the survivor's returned error is what this test checks */
    acc_set_errhandler(acc, ACC_ERRORS_RETURN);
  ASSERT_NOT_NULL(acc);
  acc_set_seed(acc, 3, 0);
  const int sizes[] = {784, 300, 10};
  acc_mlp_t *m = acc_mlp_new(acc, sizes, 2, 32);
  size_t np = acc_mlp_num_params(m);
  acc_optim_t *o = acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.05f, 0.9f, 0.0f);
  static float x[32 * 784];
  int64_t y[32];
  for (int step = 0; step < 30; step++) {
    if (a->exit_at && step == a->exit_at && rank == 1)
      _exit(0); /* gone without a word */
    for (int i = 0; i < 32 * 784; i++)
      x[i] = (float)(((i + 1) * (step + 3) * (rank + 7)) % 101) / 101.0f;
    for (int i = 0; i < 32; i++)
      y[i] = (i + step + rank) % 10;
    acc_mlp_zero_grad(m);
    acc_mlp_forward(m, x, 32);
    acc_mlp_backward_xent(m, y);
    acc_accumulate_begin(acc, 0);
    acc_result_t r = acc_backward(acc, acc_mlp_grads(m), np);
    if (a->exit_at) {
      if (r != ACC_OK) { /* the surviving rank: an error, not a hang */
        ASSERT_TRUE(r == ACC_ERR_PEER || r == ACC_ERR_TIMEOUT || r == ACC_ERR_BACKEND);
        printf("rank %d after the peer left: %s\n", rank, acc_last_error(acc));
        acc_destroy(&acc);
        return 0;
      }
    } else {
      ASSERT_OK(acc, r);
    }
    acc_optim_step(acc, o);
    acc_accumulate_end(acc);
  }
  if (a->exit_at)
    NBF_TEST_FAIL("rank %d never noticed that rank 1 left", rank);
  if (rank == 0) {
    FILE *f = fopen(a->out, "wb");
    ASSERT_EQ(fwrite(acc_mlp_params(m), sizeof(float), np, f), np);
    fclose(f);
  }
  acc_optim_destroy(&o);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

static void buckets(const char *precision) {
  char path[3][64];
  static float p[3][784 * 300 + 300 + 3010];
  size_t np = 0;
  for (int mode = 0; mode < 3; mode++) {
    char v[8];
    snprintf(v, sizeof v, "%d", mode);
    setenv("NBFORK_GRAD_BUCKETS", v, 1);
    snprintf(path[mode], sizeof path[mode], "/tmp/nbfork-buckets-%d-%d.bin", (int)getpid(), mode);
    bucket_run_t a = {precision, path[mode], 0};
    rt_spawn_opts_t o = {.world = 2, .deadline_s = 60};
    ASSERT_EQ(rt_spawn(&o, bucket_rank, &a, NULL), 0);
    FILE *f = fopen(path[mode], "rb");
    ASSERT_NOT_NULL(f);
    np = fread(p[mode], sizeof(float), sizeof p[mode] / sizeof(float), f);
    fclose(f);
    unlink(path[mode]);
  }
  unsetenv("NBFORK_GRAD_BUCKETS");
  ASSERT_EQ(np, 784 * 300 + 300 + 3010);
  ASSERT_TRUE(memcmp(p[0], p[1], np * sizeof(float)) == 0);
  /* overlapped buckets compute the weight gradient in row blocks, whose
   * sums OpenBLAS may round differently: equal to rounding */
  double maxdiff = 0;
  for (size_t i = 0; i < np; i++)
    maxdiff = fmax(maxdiff, fabs((double)p[0][i] - (double)p[2][i]));
  printf("%s: %zu parameters identical with buckets 0 and 1; 2 within %.3g\n", precision, np,
         maxdiff);
  ASSERT_DBL_LT(maxdiff, strcmp(precision, "no") ? 2e-3 : 1e-5); /* fp16: an ulp is 1e-3 */
}

NBF_TEST(buckets_peer_exit) {
  setenv("NBFORK_GRAD_BUCKETS", "2", 1);
  bucket_run_t a = {"no", NULL, 7};
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 40, .timeout_s = "10"};
  double t0 = rt_now();
  ASSERT_EQ(rt_spawn(&o, bucket_rank, &a, NULL), 0);
  ASSERT_DBL_LT(rt_now() - t0, 30.0);
  unsetenv("NBFORK_GRAD_BUCKETS");
}

NBF_TEST(buckets) {
  buckets("no");
}

NBF_TEST(buckets_fp16) {
  buckets("fp16");
}

NBF_TEST_MAIN()
