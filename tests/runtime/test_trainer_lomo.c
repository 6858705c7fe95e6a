/*
 * test_trainer_lomo.c — LOMO and AdaLomo (acc_lomo.c, nbf_trainer.h):
 *   lomo_reference       LOMO's fused steps, with and without two-pass
 *                        clipping, against p -= lr·coef·g computed here in
 *                        double from the gradient of an unfused backward;
 *                        no gradient left in the buffer after a step
 *   adalomo_reference    AdaLomo's steps (factored moments, grouped update
 *                        normalization, relative step, weight decay)
 *                        against Adafactor-style formulas written out here
 *   distributed N        N ranks on different data: every rank's update is
 *                        the one of the averaged gradient (each layer
 *                        all-reduced before its update)
 *   refusals             accumulation, fp16, LOMO with weight decay, a model
 *                        without the MLP's per-layer hook, a training_step
 *                        override that skips the fused backward: clear errors
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

#define NIN 6
#define NHID 5
#define NCLS 3
#define B 8
#define MAXW 3
#define STEPS 4

static float X[MAXW * B * NIN];
static int64_t Y[MAXW * B];

static void make_data(void) {
  uint32_t s = 777;
  for (int i = 0; i < MAXW * B; i++) {
    Y[i] = i % NCLS;
    for (int j = 0; j < NIN; j++) {
      s = s * 1664525u + 1013904223u;
      X[i * NIN + j] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
  }
}

/* The reference optimizer, in double. */
typedef struct {
  int adaptive;
  double lr, max_norm, wd;
  double p[512];
  double st[512]; /* AdaLomo's moments, the layout of acc_lomo.c */
  long t;
  double norm;
} ref_t;

/* The averaged gradient over `world` batches at the reference's
 * parameters, from a plain (unfused) backward of a second MLP. */
static void ref_grad(acc_mlp_t *plain, const ref_t *r, int world, double *g) {
  size_t n = acc_mlp_num_params(plain);
  float *pp = acc_mlp_params(plain), *pg = acc_mlp_grads(plain);
  for (size_t i = 0; i < n; i++) {
    pp[i] = (float)r->p[i];
    g[i] = 0;
  }
  for (int w = 0; w < world; w++) {
    acc_mlp_zero_grad(plain);
    ASSERT_NOT_NULL(acc_mlp_forward(plain, X + (size_t)w * B * NIN, B));
    ASSERT_TRUE(!isnan(acc_mlp_backward_xent(plain, Y + (size_t)w * B)));
    for (size_t i = 0; i < n; i++)
      g[i] += (double)pg[i] / world;
  }
}

static void ref_adalomo(ref_t *r, const acc_tensor_info_t *t, double *st, double *p,
                        const double *g) {
  const int rows = t->rows, cols = t->cols;
  const size_t n = (size_t)rows * cols;
  const double beta = 1.0 - pow((double)r->t, -0.8);
  double u[512];
  if (cols > 1) {
    double *R = st, *C = st + rows, rmean = 0;
    for (int i = 0; i < rows; i++) {
      double m = 0;
      for (int j = 0; j < cols; j++)
        m += (g[i * cols + j] * g[i * cols + j] + 1e-30) / cols;
      R[i] = beta * R[i] + (1 - beta) * m;
      rmean += R[i] / rows;
    }
    for (int j = 0; j < cols; j++) {
      double m = 0;
      for (int i = 0; i < rows; i++)
        m += (g[i * cols + j] * g[i * cols + j] + 1e-30) / rows;
      C[j] = beta * C[j] + (1 - beta) * m;
    }
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < cols; j++) /* v_ij = R_i C_j / mean(R) */
        u[i * cols + j] = g[i * cols + j] / sqrt(R[i] * C[j] / rmean);
  } else {
    for (size_t i = 0; i < n; i++) {
      st[i] = beta * st[i] + (1 - beta) * (g[i] * g[i] + 1e-30);
      u[i] = g[i] / sqrt(st[i]);
    }
  }
  double uu = 0, pp = 0;
  for (size_t i = 0; i < n; i++)
    uu += u[i] * u[i], pp += p[i] * p[i];
  double div = fmax(sqrt(uu / n) / 1.0, 1.0);
  double lr = r->lr * fmax(1e-3, sqrt(pp / n));
  for (size_t i = 0; i < n; i++)
    p[i] = p[i] * (1 - lr * r->wd) - lr * u[i] / div;
}

static void ref_step(ref_t *r, const acc_model_t *m, double *g) {
  double ss = 0, coef = 1;
  for (size_t i = 0; i < m->num_params; i++)
    ss += g[i] * g[i];
  r->norm = sqrt(ss);
  if (r->max_norm > 0)
    coef = fmin(r->max_norm / (r->norm + 1e-6), 1.0);
  for (size_t i = 0; i < m->num_params; i++)
    g[i] *= coef;
  r->t++;
  if (!r->adaptive) {
    for (size_t i = 0; i < m->num_params; i++)
      r->p[i] -= r->lr * g[i];
    return;
  }
  size_t so = 0;
  for (int ti = 0; ti < m->num_tensors; ti++) {
    const acc_tensor_info_t *t = &m->tensors[ti];
    ref_adalomo(r, t, r->st + so, r->p + t->offset, g + t->offset);
    so += (size_t)t->rows + (t->cols > 1 ? (size_t)t->cols : 0);
  }
}

/* STEPS fused steps on this rank's batch against the reference. */
static void check_steps(acc_t *acc, int adaptive, double lr, double max_norm, double wd) {
  int rank = acc_rank(acc), world = acc_world_size(acc);
  const int sizes[] = {NIN, NHID, NCLS};
  acc_mlp_t *mlp = acc_mlp_new(acc, sizes, 2, B), *plain = acc_mlp_new(NULL, sizes, 2, B);
  ASSERT_NOT_NULL(mlp);
  ASSERT_NOT_NULL(plain);
  acc_model_t m;
  ASSERT_OK(NULL, acc_mlp_model(mlp, &m));
  ASSERT_LE(m.num_params, 512);
  acc_lomo_t *o = acc_lomo_new(acc, &m, adaptive, (float)lr, (float)max_norm, (float)wd);
  if (!o)
    NBF_TEST_FAIL("acc_lomo_new: %s", acc_last_error(acc));
  size_t expect_state = 0;
  for (int ti = 0; adaptive && ti < m.num_tensors; ti++)
    expect_state += (size_t)m.tensors[ti].rows + (m.tensors[ti].cols > 1 ? m.tensors[ti].cols : 0);
  ASSERT_EQ_U(acc_lomo_state_bytes(o), expect_state * sizeof(float));
  static ref_t r;
  memset(&r, 0, sizeof r);
  r = (ref_t){.adaptive = adaptive, .lr = lr, .max_norm = max_norm, .wd = wd};
  for (size_t i = 0; i < m.num_params; i++)
    r.p[i] = m.params[i];
  double g[512];
  for (int step = 0; step < STEPS; step++) {
    ASSERT_TRUE(
        !isnan(m.forward_loss(m.self, X + (size_t)rank * B * NIN, Y + (size_t)rank * B, B, 1)));
    ASSERT_OK(acc, acc_lomo_backward(o));
    ref_grad(plain, &r, world, g);
    ref_step(&r, &m, g);
    for (size_t i = 0; i < m.num_params; i++) {
      if (fabs(m.params[i] - r.p[i]) > 2e-6 * fmax(1.0, fabs(r.p[i])))
        NBF_TEST_FAIL("%s step %d parameter %zu: %.9g, reference %.9g",
                      adaptive ? "AdaLomo" : "LOMO", step, i, m.params[i], r.p[i]);
      ASSERT_TRUE(m.grads[i] == 0.0f); /* no gradient outlives its layer */
    }
    if (max_norm > 0)
      ASSERT_NEAR(acc_lomo_grad_norm(o), r.norm, 1e-5 * r.norm);
    else
      ASSERT_TRUE(isnan(acc_lomo_grad_norm(o)));
  }
  /* the reference must have moved the parameters: not a vacuous check */
  double moved = 0;
  for (size_t i = 0; i < m.num_params; i++)
    moved += fabs(r.p[i] - acc_mlp_params(plain)[i]);
  ASSERT_DBL_LT(1e-4, moved);
  acc_lomo_destroy(&o);
  ASSERT_NULL(o);
  acc_model_release(&m);
  acc_mlp_destroy(&plain);
  acc_mlp_destroy(&mlp);
}

static acc_t *new_acc(void) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  acc_t *acc = acc_trainer_accelerator_new(&a);
  ASSERT_NOT_NULL(acc);
  return acc;
}

NBF_TEST(lomo_reference) {
  make_data();
  acc_t *acc = new_acc();
  check_steps(acc, 0, 0.1, 0.0, 0.0);  /* no clipping: one pass */
  check_steps(acc, 0, 0.1, 0.05, 0.0); /* a norm above 0.05: clipped */
  acc_destroy(&acc);
}

NBF_TEST(adalomo_reference) {
  make_data();
  acc_t *acc = new_acc();
  check_steps(acc, 1, 0.05, 0.0, 0.0);
  check_steps(acc, 1, 0.05, 0.05, 0.1);
  acc_destroy(&acc);
}

static int distributed_body(int rank, int world, void *arg) {
  (void)rank, (void)world, (void)arg;
  make_data();
  acc_t *acc = new_acc();
  check_steps(acc, 0, 0.1, 0.05, 0.0);
  check_steps(acc, 1, 0.05, 0.05, 0.1);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(distributed) {
  int world = atoi(nbf_test_arg(0));
  ASSERT_LE(world, MAXW);
  rt_spawn_opts_t o = {.world = world, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, distributed_body, NULL, NULL), 0);
}

static void expect_invalid(const char *optim, const char *name, const char *value,
                           const char *needle) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  ASSERT_OK(NULL, acc_training_args_set(&a, "optim", optim));
  ASSERT_OK(NULL, acc_training_args_set(&a, name, value));
  ASSERT_EQ(acc_training_args_validate(&a), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_CONTAINS(acc_last_error(NULL), needle);
}

static float um_loss(void *self, const float *x, const int64_t *y, int batch, int training) {
  (void)self, (void)x, (void)y, (void)batch, (void)training;
  return 0.0f;
}
static int um_backward(void *self) {
  (void)self;
  return 0;
}
static void um_predict(void *self, int64_t *pred) {
  (void)self, (void)pred;
}

/* A training_step that calls the model's backward itself. */
static float own_backward_step(acc_trainer_t *tr, const float *x, const int64_t *y, int batch,
                               void *user) {
  (void)user;
  acc_model_t *m = acc_trainer_model(tr);
  float loss = acc_trainer_compute_loss(tr, x, y, batch, 1);
  return m->backward(m->self) ? NAN : loss;
}

static void override_refused(void) {
  make_data();
  acc_training_args_t a;
  acc_training_args_init(&a);
  ASSERT_OK(NULL, acc_training_args_set(&a, "optim", "lomo"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "save_strategy", "no"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "disable_tqdm", "true"));
  acc_t *acc = acc_trainer_accelerator_new(&a);
  ASSERT_NOT_NULL(acc);
  const int sizes[] = {NIN, NHID, NCLS};
  acc_mlp_t *mlp = acc_mlp_new(acc, sizes, 2, 8);
  ASSERT_NOT_NULL(mlp);
  acc_model_t m;
  ASSERT_OK(NULL, acc_mlp_model(mlp, &m));
  acc_dataset_t ds = {X, Y, MAXW * B, NIN};
  acc_trainer_t *tr = acc_trainer_new(acc, &a, &m, &ds, NULL);
  ASSERT_NOT_NULL(tr);
  acc_trainer_set_steps(tr, NULL, own_backward_step, NULL, NULL);
  ASSERT_EQ(acc_trainer_train(tr), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_CONTAINS(acc_last_error(acc), "acc_trainer_training_step");
  acc_trainer_destroy(&tr);
  acc_model_release(&m);
  acc_mlp_destroy(&mlp);
  acc_destroy(&acc);
}

NBF_TEST(refusals) {
  override_refused();
  expect_invalid("lomo", "gradient_accumulation_steps", "2", "--gradient_accumulation_steps");
  expect_invalid("adalomo", "mixed_precision", "fp16", "--mixed_precision fp16");
  expect_invalid("lomo", "weight_decay", "0.01", "--weight_decay");
  acc_training_args_t a;
  acc_training_args_init(&a);
  ASSERT_OK(NULL, acc_training_args_set(&a, "optim", "adalomo"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "weight_decay", "0.01")); /* AdaLomo has it */
  ASSERT_OK(NULL, acc_training_args_validate(&a));
  /* a user model has no per-layer hook to fuse the update into */
  acc_t *acc = acc_trainer_accelerator_new(&a);
  ASSERT_NOT_NULL(acc);
  float p[4] = {0}, g[4] = {0};
  acc_model_t m = {.params = p,
                   .grads = g,
                   .num_params = 4,
                   .input_dim = 1,
                   .forward_loss = um_loss,
                   .backward = um_backward,
                   .predict = um_predict};
  float x[1] = {0};
  int64_t y[1] = {0};
  acc_dataset_t ds = {x, y, 1, 1};
  acc_trainer_t *tr = acc_trainer_new(acc, &a, &m, &ds, NULL);
  ASSERT_NULL(tr);
  ASSERT_CONTAINS(acc_last_error(acc), "acc_mlp_model");
  ASSERT_NULL(acc_lomo_new(acc, NULL, 0, 0.1f, 0, 0));
  ASSERT_EQ(acc_lomo_backward(NULL), ACC_ERR_INVALID_ARGUMENT);
  acc_destroy(&acc);
}

NBF_TEST_MAIN()
