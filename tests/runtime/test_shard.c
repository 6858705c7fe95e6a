/*
 * test_shard.c — sharded data parallel (nbf_shard.h) against DDP.
 *
 * match_ddp STAGE NP VARIANT: NP forked ranks train the same MLP twice,
 * first as DDP (acc_backward + the Trainer's unscale / clip /
 * acc_optim_step), then through acc_shard at STAGE, from the same seed
 * on the same batches; every step's loss and the final parameters must
 * be equal bit for bit (no clipping above stage 0) where the sums have
 * one order (rt_fixed_reduction_order: 2 ranks, or shared memory on one
 * node, the default), else within 1e-5 relative (losses; parameters: of
 * the largest parameter; nbf_shard.h says why). The units (726, 578
 * and 90 elements) divide by 2 but not by 4: NP 2 runs the unpadded path
 * (gathered into and reduced from the model's buffer), NP 4 the padded
 * one (through the staging buffer). VARIANT: f32,
 * fp16, bf16, accum (2 micro-steps per step), clip (max_grad_norm below
 * the norm), generic (an acc_model_t without the MLP's layer hooks),
 * sgd (SGD with momentum instead of AdamW).
 *
 * memory STAGE NP [prefetch]: the measured peak model-state bytes of a
 * rank (acc_shard_state_bytes) within 10% of acc_shard_estimate_bytes
 * (without prefetch); with stage 3's prefetch, within 10% of it plus
 * the second unit buffer (the largest layer's neighbour); at stage 3 the
 * bytes after the last step within 10% of the estimate less its unit
 * buffer (the shards alone).
 * prefetch NP VARIANT: stage 3 with and without prefetch, bit for bit.
 * hybrid STAGE NP VARIANT: HYBRID_SHARD over 2 simulated nodes, as
 * match_ddp (bitwise at NP 4 too: see the case).
 * hybrid_traffic STAGE NP: HYBRID_SHARD's bytes between the nodes in a
 * backward: this member's block of each unit, on every rank.
 *
 * resume STAGE NP TYPE VARIANT [hybrid]: a run saved (TYPE full|sharded)
 * after some micro-steps (VARIANT accum: inside an accumulation window)
 * and resumed by new processes from a model of another seed continues
 * bit for bit as the uninterrupted run (1e-5 where the order is not
 * fixed, as above); generic: an acc_model_t without the MLP's layer
 * sizes and hooks; hybrid: HYBRID_SHARD over 2 simulated nodes (one
 * replica's shards saved, every node resuming from them).
 * resume_layout STAGE: a HYBRID_SHARD SHARDED checkpoint of 4 ranks (2
 * nodes of 2) is refused, naming both layouts, by FULL_SHARD on 4 ranks
 * (4 shards), and the other way round.
 * resume_other_world STAGE NP_SAVE NP_LOAD: a FULL_STATE_DICT saved on
 * NP_SAVE ranks, resumed on NP_LOAD at STAGE, against stage 0 from the
 * same checkpoint (at NP_LOAD 1: against DDP's acc_load_state).
 * merge_weights STAGE NP [hybrid]: `nbfork merge-weights` of a SHARDED
 * checkpoint equals the FULL one saved at the same step: the same rank-0
 * file, and DDP resumed from either (acc_load_state) trains alike bit for
 * bit (hybrid: of HYBRID_SHARD's one-replica checkpoint).
 */
#define _GNU_SOURCE /* nftw, mkdtemp */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "acc_internal.h" /* acc__node_cross_bytes */
#include "nbf_test.h"
#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

#define STEPS 6
#define B 8
static const int SIZES[] = {21, 33, 17, 5};
#define NL 3

typedef struct {
  int stage;
  const char *variant;
  int hybrid;   /* HYBRID_SHARD over 2 simulated nodes (NODE_RANK = rank % 2) */
  int prefetch; /* cfg.prefetch of the sharded run */
} case_t;

/* Deterministic batch `step` of `rank` (LCG). */
static void batch(int rank, int step, float *x, int64_t *y) {
  unsigned long long s = 0x9e3779b97f4a7c15ull * (unsigned long long)(rank * 1000 + step + 1);
  for (int i = 0; i < B * SIZES[0]; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  for (int i = 0; i < B; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    y[i] = (int64_t)((s >> 33) % (unsigned long long)SIZES[NL]);
  }
}

static int is(const case_t *c, const char *v) {
  return !strcmp(c->variant, v);
}

static int accum_of(const case_t *c) {
  return is(c, "accum") ? 2 : 1;
}

/* The DDP run: losses of each micro-step into `loss`, final parameters
 * into `params`. */
static void run_ddp(acc_t *acc, const case_t *c, float *loss, float *params) {
  acc_set_seed(acc, 1234, 0);
  ASSERT_EQ(acc_set_grad_scaler(acc, 65536.0f, 2.0f, 0.5f, 2000), ACC_OK);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  ASSERT_NOT_NULL(m);
  size_t n = acc_mlp_num_params(m);
  acc_optim_t *o = is(c, "sgd")
                       ? acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.05f, 0.9f, 0.01f)
                       : acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.01f, 0.9f, 0.999f,
                                       1e-8f, 0.01f);
  ASSERT_NOT_NULL(o);
  float x[B * 21];
  int64_t y[B];
  for (int k = 0; k < STEPS * accum_of(c); k++) {
    batch(acc_rank(acc), k, x, y);
    acc_accumulate_begin(acc, 0);
    ASSERT_NOT_NULL(acc_mlp_forward(m, x, B));
    loss[k] = acc_mlp_backward_xent(m, y);
    ASSERT_EQ(acc_backward(acc, acc_mlp_grads(m), n), ACC_OK);
    acc_accumulate_end(acc);
    if (!acc_sync_gradients(acc))
      continue;
    float *g = acc_mlp_grads(m);
    ASSERT_TRUE(acc_unscale_gradients(acc, g, n) >= 0);
    if (is(c, "clip")) { /* the Trainer's clip_grad_norm */
      double ss = 0;
      double a8[8] = {0};
      size_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
          a8[l] += (double)g[i + l] * (double)g[i + l];
      for (; i < n; i++)
        a8[0] += (double)g[i] * (double)g[i];
      ss = ((a8[0] + a8[1]) + (a8[2] + a8[3])) + ((a8[4] + a8[5]) + (a8[6] + a8[7]));
      float norm = (float)sqrt(ss);
      float coef = (float)(0.05 / ((double)norm + 1e-6));
      if (isfinite(norm) && coef < 1.0f)
        for (size_t j = 0; j < n; j++)
          g[j] *= coef;
    }
    ASSERT_TRUE(acc_optim_step(acc, o) >= 0);
    acc_optim_zero_grad(acc, o);
  }
  memcpy(params, acc_mlp_params(m), n * sizeof(float));
  acc_optim_destroy(&o);
  acc_mlp_destroy(&m);
}

/* The sharded run, same seed and batches. */
static void run_shard(acc_t *acc, const case_t *c, float *loss, float *params) {
  acc_set_seed(acc, 1234, 0);
  ASSERT_EQ(acc_set_grad_scaler(acc, 65536.0f, 2.0f, 0.5f, 2000), ACC_OK);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  ASSERT_NOT_NULL(m);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  if (is(c, "generic"))
    model.mlp = NULL; /* no layer hooks: the generic path */
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = c->stage;
  cfg.lr = 0.01f;
  if (is(c, "sgd")) {
    cfg.adamw = 0;
    cfg.lr = 0.05f, cfg.momentum = 0.9f;
  }
  cfg.max_grad_norm = is(c, "clip") ? 0.05 : 0.0;
  cfg.hybrid = c->hybrid;
  cfg.prefetch = c->prefetch;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  if (!sh)
    fprintf(stderr, "%s\n", acc_last_error(acc));
  if (acc_rank(acc) == 0 && c->hybrid)
    printf("%s\n", acc_shard_describe(sh));
  ASSERT_NOT_NULL(sh);
  float x[B * 21];
  int64_t y[B];
  for (int k = 0; k < STEPS * accum_of(c); k++) {
    batch(acc_rank(acc), k, x, y);
    acc_accumulate_begin(acc, 0);
    loss[k] = acc_shard_forward_loss(sh, x, y, B, 1);
    ASSERT_EQ(acc_shard_backward(sh), ACC_OK);
    acc_accumulate_end(acc);
    ASSERT_TRUE(acc_shard_step(sh) >= 0);
  }
  ASSERT_EQ(acc_shard_gather_params(sh), ACC_OK);
  memcpy(params, model.params, model.num_params * sizeof(float));
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
}

static double rel(float a, float b) {
  double d = fabs((double)a - (double)b), s = fmax(fabs((double)a), fabs((double)b));
  return s > 0 ? d / s : d;
}

/* HYBRID_SHARD's cases: ranks on 2 simulated nodes, interleaved (the
 * nodes hold ranks {0, 2} and {1, 3}: a node's members are not
 * consecutive ranks). */
static void simulate_nodes(const case_t *c, int rank) {
  char node[16];
  snprintf(node, sizeof node, "%d", c->hybrid ? rank % 2 : 0);
  setenv("NODE_RANK", node, 1);
}

/* The accelerator of a case: its accumulation and precision. */
static acc_t *case_acc(const case_t *c) {
  acc_config_t ac = ACC_CONFIG_INIT;
  ac.gradient_accumulation_steps = accum_of(c);
  ac.mixed_precision = is(c, "fp16") ? "fp16" : is(c, "bf16") ? "bf16" : "no";
  acc_t *acc = acc_new(&ac);
  ASSERT_NOT_NULL(acc);
  return acc;
}

static int match_body(int rank, int world, void *arg) {
  const case_t *c = arg;
  simulate_nodes(c, rank);
  acc_t *acc = case_acc(c);
  enum { NP = 33 * 21 + 33 + 17 * 33 + 17 + 5 * 17 + 5, NK = STEPS * 2 };
  static float l0[NK], l1[NK], p0[NP], p1[NP];
  run_ddp(acc, c, l0, p0);
  run_shard(acc, c, l1, p1);
  /* through Gloo at 4 ranks two DDP runs in one process already differ
   * in the last bit (see nbf_shard.h, rt_fixed_reduction_order) */
  int exact = (rt_fixed_reduction_order(world) || c->hybrid) &&
              !(is(c, "clip") && c->stage > 0 && world > 1);
  double worst = 0;
  for (int k = 0; k < STEPS * accum_of(c); k++)
    worst = fmax(worst, rel(l0[k], l1[k]));
  /* parameters: relative to the largest one (AdamW's normalized update
   * turns a rounding difference of a near-zero gradient into a step of
   * lr on a near-zero parameter) */
  double pmax = 0, pdiff = 0;
  for (int i = 0; i < NP; i++) {
    pmax = fmax(pmax, fabs((double)p0[i]));
    pdiff = fmax(pdiff, fabs((double)p0[i] - (double)p1[i]));
  }
  worst = fmax(worst, pdiff / pmax);
  if (rank == 0)
    printf("stage %d np %d %s: largest relative difference %.3g (%s expected)\n", c->stage, world,
           c->variant, worst, exact ? "bitwise" : "1e-5");
  fflush(stdout);
  if (exact) {
    ASSERT_EQ(memcmp(l0, l1, sizeof(float) * (size_t)(STEPS * accum_of(c))), 0);
    ASSERT_EQ(memcmp(p0, p1, sizeof p0), 0);
  } else {
    ASSERT_TRUE(worst <= 1e-5);
  }
  acc_destroy(&acc);
  return 0;
}

/* `body` on nbf_test_arg(1) ranks, for stage nbf_test_arg(0) and
 * `variant`, HYBRID_SHARD when `hybrid`, with the `prefetch` bits. */
static void spawn_case(int (*body)(int, int, void *), const char *variant, int hybrid,
                       int prefetch) {
  static case_t c;
  c.stage = atoi(nbf_test_arg(0));
  c.variant = variant;
  c.hybrid = hybrid;
  c.prefetch = prefetch;
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(1)), .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, body, &c, NULL), 0);
}

enum { BOTH = ACC_SHARD_PREFETCH_FORWARD | ACC_SHARD_PREFETCH_BACKWARD };

NBF_TEST_P(match_ddp) {
  spawn_case(match_body, nbf_test_arg(2), 0, BOTH);
}

/* hybrid STAGE NP VARIANT: HYBRID_SHARD (the stage within each of 2
 * simulated nodes) against DDP on the same ranks, as match_ddp. With 2
 * ranks a node the sums have two addends within a node and two across:
 * bitwise at NP 4 too (clipping: 1e-5, its norm is summed in another
 * order). */
NBF_TEST_P(hybrid) {
  spawn_case(match_body, nbf_test_arg(2), 1, BOTH);
}

/* hybrid_traffic STAGE NP: what a rank sends between the 2 simulated
 * nodes during a backward (the gradient reduction) with HYBRID_SHARD, as
 * counted by the node groups (acc__node_cross_bytes: the payload handed
 * to Gloo between nodes): exactly this member's block of every unit,
 * 4 * sum ceil(n_u / members) bytes, on every rank. An all-reduce of each
 * unit over the world instead has each node's leader send the whole
 * model (4 * sum n_u) and the other members nothing. */
static int traffic_body(int rank, int world, void *arg) {
  const case_t *c = arg;
  simulate_nodes(c, rank);
  acc_t *acc = case_acc(c);
  acc_set_seed(acc, 1234, 0);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  ASSERT_NOT_NULL(m);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = c->stage;
  cfg.hybrid = 1;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  ASSERT_NOT_NULL(sh);
  const int members = world / 2;
  uint64_t want = 0, whole = 0;
  for (int l = 0; l < NL; l++) {
    uint64_t n = (uint64_t)SIZES[l + 1] * (uint64_t)SIZES[l] + (uint64_t)SIZES[l + 1];
    want += 4 * ((n + (uint64_t)members - 1) / (uint64_t)members);
    whole += 4 * n;
  }
  float x[B * 21];
  int64_t y[B];
  for (int k = 0; k < 2; k++) {
    batch(rank, k, x, y);
    ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, B, 1)));
    uint64_t before = acc__node_cross_bytes(acc);
    ASSERT_EQ(acc_shard_backward(sh), ACC_OK);
    uint64_t sent = acc__node_cross_bytes(acc) - before;
    printf("rank %d (member %d of node %d), stage %d: %llu bytes between nodes in a backward "
           "(its block of each unit: %llu; the whole model, an all-reduce's leader: %llu)\n",
           rank, rank / 2, rank % 2, c->stage, (unsigned long long)sent, (unsigned long long)want,
           (unsigned long long)whole);
    fflush(stdout);
    ASSERT_EQ(sent, want);
    ASSERT_TRUE(acc_shard_step(sh) >= 0);
  }
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(hybrid_traffic) {
  spawn_case(traffic_body, "f32", 1, 0);
}

/* prefetch NP VARIANT: stage 3 with the next unit's gather on the helper
 * thread trains bit for bit as without it (at any NP: the same
 * collectives in the same order; its memory: memory_prefetch). */
static int prefetch_body(int rank, int world, void *arg) {
  const case_t *c0 = arg;
  acc_t *acc = case_acc(c0);
  enum { NP = 33 * 21 + 33 + 17 * 33 + 17 + 5 * 17 + 5, NK = STEPS * 2 };
  static float l0[NK], l1[NK], p0[NP], p1[NP];
  case_t c = *c0;
  c.prefetch = 0;
  run_shard(acc, &c, l0, p0);
  c.prefetch = ACC_SHARD_PREFETCH_FORWARD | ACC_SHARD_PREFETCH_BACKWARD;
  run_shard(acc, &c, l1, p1);
  if (rank == 0)
    printf("stage 3 np %d %s: prefetch %s\n", world, c.variant,
           memcmp(l0, l1, sizeof l0) || memcmp(p0, p1, sizeof p0) ? "differs" : "bitwise equal");
  ASSERT_EQ(memcmp(l0, l1, sizeof(float) * (size_t)(STEPS * accum_of(&c))), 0);
  ASSERT_EQ(memcmp(p0, p1, sizeof p0), 0);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(prefetch) {
  static case_t c;
  c.stage = 3;
  int world = atoi(nbf_test_arg(0));
  c.variant = nbf_test_arg(1);
  rt_spawn_opts_t o = {.world = world, .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, prefetch_body, &c, NULL), 0);
}

static int memory_body(int rank, int world, void *arg) {
  const case_t *c = arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  static const int sizes[] = {784, 512, 512, 10};
  acc_mlp_t *m = acc_mlp_new(acc, sizes, 3, 16);
  ASSERT_NOT_NULL(m);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = c->stage;
  cfg.prefetch = c->prefetch;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  ASSERT_NOT_NULL(sh);
  static float x[16 * 784];
  int64_t y[16];
  for (int i = 0; i < 16 * 784; i++)
    x[i] = (float)((i * 7 + rank) % 13) / 13.0f;
  for (int i = 0; i < 16; i++)
    y[i] = i % 10;
  long faults = 0; /* minor page faults of the last step */
  for (int k = 0; k < 3; k++) {
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    acc_accumulate_begin(acc, 0);
    ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, 16, 1)));
    ASSERT_EQ(acc_shard_backward(sh), ACC_OK);
    acc_accumulate_end(acc);
    ASSERT_EQ(acc_shard_step(sh), 1);
    getrusage(RUSAGE_SELF, &ru1);
    faults = ru1.ru_minflt - ru0.ru_minflt;
  }
  /* stage 2 computes each layer's gradient in its kept unit buffer: a
   * step no longer faults in the model's gradient pages outside the
   * owned slices (then given back), (1 - 1/N) of them, every step */
  const long churn = (long)(model.num_params * sizeof(float) / 4096) * (world - 1) / world;
  if (rank == 0)
    printf("stage %d np %d: %ld minor page faults in the last step (the gradient pages outside "
           "the owned slices: %ld)\n",
           c->stage, world, faults, churn);
#ifndef RT_TEST_ASAN /* its quarantine faults in fresh pages every step (185 of them here) */
  if (c->stage == 2 && world > 1)
    ASSERT_TRUE(faults < churn / 4);
#endif
  size_t largest = 512 * 784 + 512;
  double est = acc_shard_estimate_bytes(model.num_params, largest, world, c->stage, 1, 0);
  double got = (double)acc_shard_state_bytes(sh, 1);
  if (rank == 0)
    printf("%s\nstage %d np %d: measured peak %.0f bytes, estimate %.0f (%.1f%%), DDP 16P = %.0f\n",
           acc_shard_describe(sh), c->stage, world, got, est, 100.0 * (got - est) / est,
           16.0 * (double)model.num_params);
  /* prefetch (with more than one rank): + the second unit buffer, which
   * holds the largest layer's neighbour while the largest is in use */
  const double neighbour = 512 * 512 + 512;
  double want = est + (c->stage == 3 && c->prefetch && world > 1 ? 4.0 * neighbour : 0.0);
  ASSERT_TRUE(fabs(got - want) <= 0.10 * want);
  if (c->stage == 3) { /* after a step the unit buffers are given back: the shards alone */
    double after = (double)acc_shard_state_bytes(sh, 0), shards = est - 4.0 * (double)largest;
    ASSERT_TRUE(fabs(after - shards) <= 0.10 * shards);
  }
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(memory) {
  spawn_case(memory_body, "f32", 0,
             nbf_test_argc > 2 && !strcmp(nbf_test_arg(2), "prefetch") ? BOTH : 0);
}

/* The launcher's environment picks the stage (Accelerate's names). */
NBF_TEST(stage_from_environment) {
  static const struct {
    const char *fsdp, *strategy, *ds, *zero;
    int stage;
  } t[] = {{"true", "1", NULL, NULL, 3},        {"true", "SHARD_GRAD_OP", NULL, NULL, 2},
           {"true", "NO_SHARD", NULL, NULL, 0}, {NULL, NULL, "true", "1", 1},
           {NULL, NULL, "true", "3", 3},        {NULL, NULL, NULL, NULL, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    t[i].fsdp ? setenv("ACCELERATE_USE_FSDP", t[i].fsdp, 1) : unsetenv("ACCELERATE_USE_FSDP");
    t[i].strategy ? setenv("FSDP_SHARDING_STRATEGY", t[i].strategy, 1)
                  : unsetenv("FSDP_SHARDING_STRATEGY");
    t[i].ds ? setenv("ACCELERATE_USE_DEEPSPEED", t[i].ds, 1) : unsetenv("ACCELERATE_USE_DEEPSPEED");
    t[i].zero ? setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", t[i].zero, 1)
              : unsetenv("ACCELERATE_DEEPSPEED_ZERO_STAGE");
    acc_t *acc = acc_new(NULL);
    acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
    acc_model_t model;
    ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
    acc_shard_t *sh = acc_shard_new(acc, &model, NULL);
    ASSERT_NOT_NULL(sh);
    ASSERT_EQ(acc_shard_stage(sh), t[i].stage);
    acc_shard_destroy(&sh);
    acc_model_release(&model);
    acc_mlp_destroy(&m);
    acc_destroy(&acc);
  }
}

/* HYBRID_SHARD (4) and _HYBRID_SHARD_ZERO2 (5) at world 1: the stage
 * (one node: nothing to replicate); a prefetch value not understood is
 * named. */
static void env_case(const char *strategy, const char *bwd, int stage, const char *err) {
  setenv("ACCELERATE_USE_FSDP", "true", 1);
  setenv("FSDP_SHARDING_STRATEGY", strategy, 1);
  bwd ? setenv("FSDP_BACKWARD_PREFETCH", bwd, 1) : unsetenv("FSDP_BACKWARD_PREFETCH");
  acc_t *acc = acc_new(NULL);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  acc_shard_t *sh = acc_shard_new(acc, &model, NULL);
  if (err) {
    ASSERT_TRUE(sh == NULL);
    ASSERT_NOT_NULL(strstr(acc_last_error(acc), err));
  } else {
    ASSERT_NOT_NULL(sh);
    ASSERT_EQ(acc_shard_stage(sh), stage);
  }
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  unsetenv("ACCELERATE_USE_FSDP");
  unsetenv("FSDP_SHARDING_STRATEGY");
  unsetenv("FSDP_BACKWARD_PREFETCH");
}

NBF_TEST(hybrid_and_prefetch_from_environment) {
  env_case("4", NULL, 3, NULL);
  env_case("HYBRID_SHARD", "NO_PREFETCH", 3, NULL);
  env_case("_HYBRID_SHARD_ZERO2", NULL, 2, NULL);
  env_case("1", "BACKWARD_SOMETIMES", 3, "BACKWARD_SOMETIMES");
  env_case("6", NULL, 3, "FSDP_SHARDING_STRATEGY=6");
}

/* HYBRID_SHARD's refusals, each naming the reason: nodes of unequal
 * sizes (3 ranks on 2 nodes); no node groups (shared memory off). */
static int hybrid_refused_body(int rank, int world, void *arg) {
  const char *why = arg;
  char node[16];
  snprintf(node, sizeof node, "%d", rank % 2);
  setenv("NODE_RANK", node, 1);
  if (!strcmp(why, "shm_off"))
    setenv("NBFORK_SHM_COLLECTIVES", "0", 1);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  acc_model_t model;
  ASSERT_EQ(acc_mlp_model(m, &model), ACC_OK);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = 3;
  cfg.hybrid = 1;
  ASSERT_TRUE(acc_shard_new(acc, &model, &cfg) == NULL);
  if (rank == 0)
    printf("%d ranks, %s: %s\n", world, why, acc_last_error(acc));
  ASSERT_NOT_NULL(strstr(acc_last_error(acc),
                         !strcmp(why, "shm_off") ? "NBFORK_SHM_COLLECTIVES=0" : "equal sizes"));
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(hybrid_refuses_unequal_nodes) {
  rt_spawn_opts_t o = {.world = 3, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, hybrid_refused_body, "unequal", NULL), 0);
}

NBF_TEST(hybrid_refuses_without_shared_memory) {
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, hybrid_refused_body, "shm_off", NULL), 0);
}

/* ---- checkpoints ------------------------------------------------------ */

typedef struct {
  int stage, np_load;
  const char *type, *variant;
  char dir[128];
} ck_t;

/* A checkpoint case of f32 runs at the stage of the test's first
 * argument, saving `type` (full, sharded, both). */
static void ck_case(ck_t *c, const char *type) {
  c->stage = atoi(nbf_test_arg(0));
  c->type = type;
  c->variant = "f32";
}

enum { CK_NP = 33 * 21 + 33 + 17 * 33 + 17 + 5 * 17 + 5, CK_NK = STEPS * 2 };

static acc_t *ck_acc(const char *variant) {
  acc_config_t ac = ACC_CONFIG_INIT;
  ac.gradient_accumulation_steps = !strcmp(variant, "accum") ? 2 : 1;
  ac.mixed_precision = !strcmp(variant, "fp16") ? "fp16" : "no";
  acc_t *acc = acc_new(&ac);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_set_grad_scaler(acc, 65536.0f, 2.0f, 0.5f, 2000), ACC_OK);
  return acc;
}

static int ck_generic; /* resume VARIANT generic: no layer sizes, no hooks */
static int ck_hybrid;  /* HYBRID_SHARD over 2 simulated nodes */

/* The simulated node of a rank (before acc_new), as simulate_nodes. */
static void ck_nodes(int rank) {
  case_t c = {.hybrid = ck_hybrid};
  simulate_nodes(&c, rank);
}

/* A fresh MLP (from `seed`) sharded at `stage`, AdamW lr 0.01. */
static acc_shard_t *ck_new(acc_t *acc, int stage, unsigned seed, acc_mlp_t **m,
                           acc_model_t *model) {
  acc_set_seed(acc, seed, 0);
  *m = acc_mlp_new(acc, SIZES, NL, B);
  ASSERT_NOT_NULL(*m);
  ASSERT_EQ(acc_mlp_model(*m, model), ACC_OK);
  if (ck_generic)
    model->mlp = NULL; /* checkpointed as another acc_model_t's */
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = stage;
  cfg.lr = 0.01f;
  cfg.hybrid = ck_hybrid;
  acc_shard_t *sh = acc_shard_new(acc, model, &cfg);
  ASSERT_NOT_NULL(sh);
  return sh;
}

/* Micro-steps k0..k1-1 (batch k of this rank); losses into loss[k]. */
static void ck_train(acc_t *acc, acc_shard_t *sh, int k0, int k1, float *loss) {
  float x[B * 21];
  int64_t y[B];
  for (int k = k0; k < k1; k++) {
    batch(acc_rank(acc), k, x, y);
    acc_accumulate_begin(acc, 0);
    loss[k] = acc_shard_forward_loss(sh, x, y, B, 1);
    ASSERT_EQ(acc_shard_backward(sh), ACC_OK);
    acc_accumulate_end(acc);
    ASSERT_TRUE(acc_shard_step(sh) >= 0);
  }
}

/* Final parameters into p, then free everything. */
static void ck_end(acc_shard_t **sh, acc_model_t *model, acc_mlp_t **m, float *p) {
  ASSERT_EQ(acc_shard_gather_params(*sh), ACC_OK);
  if (p)
    memcpy(p, model->params, model->num_params * sizeof(float));
  acc_shard_destroy(sh);
  acc_model_release(model);
  acc_mlp_destroy(m);
}

static int ck_k1(const ck_t *c) {              /* where the first run saves */
  return !strcmp(c->variant, "accum") ? 5 : 3; /* accum: inside a window */
}

static int ck_total(const ck_t *c) {
  return STEPS * (!strcmp(c->variant, "accum") ? 2 : 1);
}

static int ck_type(const ck_t *c) {
  return !strcmp(c->type, "sharded") ? ACC_SHARDED_STATE_DICT : ACC_FULL_STATE_DICT;
}

/* First processes: train to k1 and save. */
static int ck_save_body(int rank, int world, void *arg) {
  (void)world;
  const ck_t *c = arg;
  ck_nodes(rank);
  acc_t *acc = ck_acc(c->variant);
  acc_mlp_t *m;
  acc_model_t model;
  static float l[CK_NK];
  acc_shard_t *sh = ck_new(acc, c->stage, 1234, &m, &model);
  ck_train(acc, sh, 0, ck_k1(c), l);
  acc_result_t r = acc_shard_save_state(sh, c->dir, ck_type(c));
  if (r != ACC_OK)
    fprintf(stderr, "save: %s\n", acc_last_error(acc));
  ASSERT_EQ(r, ACC_OK);
  if (!strcmp(c->type, "both")) { /* merge_weights: the same step twice */
    char d[160];
    snprintf(d, sizeof d, "%s/sharded", c->dir);
    ASSERT_EQ(acc_shard_save_state(sh, d, ACC_SHARDED_STATE_DICT), ACC_OK);
  }
  ck_end(&sh, &model, &m, NULL);
  acc_destroy(&acc);
  return 0;
}

static void ck_compare(const float *l0, const float *l1, int k0, int k1, const float *p0,
                       const float *p1, int exact, const char *what) {
  double worst = 0, pmax = 0, pdiff = 0;
  for (int k = k0; k < k1; k++)
    worst = fmax(worst, rel(l0[k], l1[k]));
  for (int i = 0; i < CK_NP; i++) {
    pmax = fmax(pmax, fabs((double)p0[i]));
    pdiff = fmax(pdiff, fabs((double)p0[i] - (double)p1[i]));
  }
  worst = fmax(worst, pdiff / pmax);
  printf("%s: largest relative difference %.3g (%s expected)\n", what, worst,
         exact ? "bitwise" : "1e-5");
  fflush(stdout);
  if (exact) {
    ASSERT_EQ(memcmp(l0 + k0, l1 + k0, sizeof(float) * (size_t)(k1 - k0)), 0);
    ASSERT_EQ(memcmp(p0, p1, sizeof(float) * CK_NP), 0);
  } else {
    ASSERT_TRUE(worst <= 1e-5);
  }
}

/* New processes: the uninterrupted run, then the resumed one. */
static int ck_resume_body(int rank, int world, void *arg) {
  const ck_t *c = arg;
  static float la[CK_NK], lb[CK_NK], pa[CK_NP], pb[CK_NP];
  ck_nodes(rank);
  acc_t *acc = ck_acc(c->variant);
  acc_mlp_t *m;
  acc_model_t model;
  acc_shard_t *sh = ck_new(acc, c->stage, 1234, &m, &model);
  ck_train(acc, sh, 0, ck_total(c), la);
  ck_end(&sh, &model, &m, pa);
  acc_destroy(&acc);
  acc = ck_acc(c->variant);
  sh = ck_new(acc, c->stage, 999, &m, &model); /* the load must set everything */
  acc_result_t r = acc_shard_load_state(sh, c->dir);
  if (r != ACC_OK)
    fprintf(stderr, "load: %s\n", acc_last_error(acc));
  ASSERT_EQ(r, ACC_OK);
  ck_train(acc, sh, ck_k1(c), ck_total(c), lb);
  ck_end(&sh, &model, &m, pb);
  if (rank == 0) {
    char what[96];
    snprintf(what, sizeof what, "resume stage %d np %d %s %s%s", c->stage, world, c->type,
             c->variant, ck_hybrid ? " hybrid" : "");
    /* HYBRID_SHARD's node-local sums have one order (see the hybrid case) */
    ck_compare(la, lb, ck_k1(c), ck_total(c), pa, pb, rt_fixed_reduction_order(world) || ck_hybrid,
               what);
  }
  acc_destroy(&acc);
  return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

static void ck_tmpdir(ck_t *c) {
  snprintf(c->dir, sizeof c->dir, "/tmp/nbfork-shardck-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(c->dir));
}

NBF_TEST_P(resume) {
  static ck_t c;
  c.stage = atoi(nbf_test_arg(0));
  int world = atoi(nbf_test_arg(1));
  c.type = nbf_test_arg(2);
  c.variant = nbf_test_arg(3);
  ck_generic = !strcmp(c.variant, "generic");
  ck_hybrid = nbf_test_argc > 4 && !strcmp(nbf_test_arg(4), "hybrid");
  ck_tmpdir(&c);
  rt_spawn_opts_t o = {.world = world, .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, ck_save_body, &c, NULL), 0);
  ASSERT_EQ(rt_spawn(&o, ck_resume_body, &c, NULL), 0);
  nftw(c.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* resume_layout: the load of c->dir at the other layout than the save's
 * (ck_hybrid is the save's) fails on every rank, naming both. */
static int ck_layout_body(int rank, int world, void *arg) {
  (void)world;
  const ck_t *c = arg;
  ck_hybrid = !ck_hybrid;
  ck_nodes(rank);
  acc_t *acc = ck_acc("f32");
  acc_mlp_t *m;
  acc_model_t model;
  acc_shard_t *sh = ck_new(acc, c->stage, 999, &m, &model);
  ASSERT_EQ(acc_shard_load_state(sh, c->dir), ACC_ERR_INVALID_ARGUMENT);
  const char *e = acc_last_error(acc);
  if (rank == 0)
    printf("refused: %s\n", e);
  ASSERT_NOT_NULL(strstr(e, "2 groups of 2"));
  ASSERT_NOT_NULL(strstr(e, "1 group of 4"));
  ck_end(&sh, &model, &m, NULL);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(resume_layout) {
  static ck_t c;
  ck_case(&c, "sharded");
  rt_spawn_opts_t o = {.world = 4, .deadline_s = 90};
  for (int save_hybrid = 0; save_hybrid < 2; save_hybrid++) {
    ck_tmpdir(&c);
    ck_hybrid = save_hybrid;
    ASSERT_EQ(rt_spawn(&o, ck_save_body, &c, NULL), 0);
    ASSERT_EQ(rt_spawn(&o, ck_layout_body, &c, NULL), 0);
    nftw(c.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  }
}

/* DDP from a checkpoint through acc_load_state: micro-steps k0..k1. */
static void ck_ddp(acc_t *acc, const char *dir, int k0, int k1, float *loss, float *params) {
  acc_set_seed(acc, 999, 0);
  acc_mlp_t *m = acc_mlp_new(acc, SIZES, NL, B);
  size_t n = acc_mlp_num_params(m);
  acc_optim_t *o =
      acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), n, 0.01f, 0.9f, 0.999f, 1e-8f, 0.01f);
  acc_result_t r = acc_load_state(acc, dir, m, o);
  if (r != ACC_OK)
    fprintf(stderr, "acc_load_state: %s\n", acc_last_error(acc));
  ASSERT_EQ(r, ACC_OK);
  float x[B * 21];
  int64_t y[B];
  for (int k = k0; k < k1; k++) {
    batch(acc_rank(acc), k, x, y);
    acc_accumulate_begin(acc, 0);
    ASSERT_NOT_NULL(acc_mlp_forward(m, x, B));
    loss[k] = acc_mlp_backward_xent(m, y);
    ASSERT_EQ(acc_backward(acc, acc_mlp_grads(m), n), ACC_OK);
    acc_accumulate_end(acc);
    ASSERT_TRUE(acc_optim_step(acc, o) >= 0);
    acc_optim_zero_grad(acc, o);
  }
  memcpy(params, acc_mlp_params(m), n * sizeof(float));
  acc_optim_destroy(&o);
  acc_mlp_destroy(&m);
}

/* A FULL checkpoint of another world size: STAGE against the reference
 * (world 1: DDP's acc_load_state; else stage 0). */
static int ck_other_body(int rank, int world, void *arg) {
  const ck_t *c = arg;
  static float l0[CK_NK], l1[CK_NK], p0[CK_NP], p1[CK_NP];
  acc_t *acc = ck_acc("f32");
  acc_mlp_t *m;
  acc_model_t model;
  acc_shard_t *sh;
  if (world == 1) {
    ck_ddp(acc, c->dir, 3, STEPS, l0, p0);
  } else {
    sh = ck_new(acc, 0, 999, &m, &model);
    ASSERT_EQ(acc_shard_load_state(sh, c->dir), ACC_OK);
    ck_train(acc, sh, 3, STEPS, l0);
    ck_end(&sh, &model, &m, p0);
  }
  sh = ck_new(acc, c->stage, 999, &m, &model);
  acc_result_t r = acc_shard_load_state(sh, c->dir);
  if (r != ACC_OK)
    fprintf(stderr, "load: %s\n", acc_last_error(acc));
  ASSERT_EQ(r, ACC_OK);
  ck_train(acc, sh, 3, STEPS, l1);
  ck_end(&sh, &model, &m, p1);
  if (rank == 0) {
    char what[96];
    snprintf(what, sizeof what, "full checkpoint resumed at stage %d np %d", c->stage, world);
    ck_compare(l0, l1, 3, STEPS, p0, p1, rt_fixed_reduction_order(world), what);
  }
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(resume_other_world) {
  static ck_t c;
  ck_case(&c, "full");
  ck_tmpdir(&c);
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(1)), .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, ck_save_body, &c, NULL), 0);
  o.world = atoi(nbf_test_arg(2));
  ASSERT_EQ(rt_spawn(&o, ck_other_body, &c, NULL), 0);
  nftw(c.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static size_t ck_read(const char *path, unsigned char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

NBF_TEST_P(merge_weights) {
  static ck_t c;
  ck_case(&c, "both"); /* FULL into dir, SHARDED into dir/sharded */
  ck_hybrid = nbf_test_argc > 2 && !strcmp(nbf_test_arg(2), "hybrid");
  ck_tmpdir(&c);
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(1)), .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, ck_save_body, &c, NULL), 0);
  char sharded[160], merged[160], a[200], b[200];
  snprintf(sharded, sizeof sharded, "%s/sharded", c.dir);
  snprintf(merged, sizeof merged, "%s/merged", c.dir);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  /* a FULL checkpoint is refused by name */
  ASSERT_EQ(acc_shard_merge_weights(acc, c.dir, merged), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_NOT_NULL(strstr(acc_last_error(acc), "SHARDED_STATE_DICT"));
  acc_result_t r = acc_shard_merge_weights(acc, sharded, merged);
  if (r != ACC_OK)
    fprintf(stderr, "merge: %s\n", acc_last_error(acc));
  ASSERT_EQ(r, ACC_OK);
  /* rank 0's file: byte for byte the FULL one's */
  static unsigned char fa[1 << 16], fb[1 << 16];
  snprintf(a, sizeof a, "%s/nbfork_rank0.bin", c.dir);
  snprintf(b, sizeof b, "%s/nbfork_rank0.bin", merged);
  size_t na = ck_read(a, fa, sizeof fa), nb = ck_read(b, fb, sizeof fb);
  ASSERT_EQ(na, nb);
  ASSERT_EQ(memcmp(fa, fb, na), 0);
  /* the state: DDP resumed from either trains alike */
  static float l0[CK_NK], l1[CK_NK], p0[CK_NP], p1[CK_NP];
  ck_ddp(acc, c.dir, 3, STEPS, l0, p0);
  ck_ddp(acc, merged, 3, STEPS, l1, p1);
  ck_compare(l0, l1, 3, STEPS, p0, p1, 1, "merged against full");
  acc_destroy(&acc);
  nftw(c.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

NBF_TEST_MAIN()
