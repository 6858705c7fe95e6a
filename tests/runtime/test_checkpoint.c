/*
 * test_checkpoint.c — acc_save_state / acc_load_state.
 *   test_checkpoint resume_np1|resume_np2|errors
 *
 * resume_*: a training run interrupted after K steps (its processes exit)
 * and resumed by new processes from the checkpoint ends with parameters
 * bit-for-bit identical to an uninterrupted run of the same length. The
 * run uses everything a checkpoint must carry: shuffled sampler epochs
 * (loop counters registered for checkpointing), RNG draws every step
 * (input noise), optimizer state, and for np2 AdamW, fp16 loss scaling
 * with growth inside the run, accumulation 2 with the interruption in the
 * middle of a window, and per-rank RNG streams.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

#define N 96
#define NIN 20
#define NCLS 4
#define BATCH 8
#define TOTAL 30
#define STOP 13

typedef struct {
  const char *precision;
  int accum;
  int adamw;
  int per_rank;
  int stop_at;   /* 0 = run to TOTAL; > 0: save at this step and exit */
  int resume;    /* load the checkpoint first */
  char dir[256]; /* checkpoint directory */
  char out[256]; /* final parameters of rank 0 go here */
} run_t;

typedef struct {
  int64_t epoch, batch, step;
} counters_t;

static int run_body(int rank, int world, void *arg) {
  (void)world;
  const run_t *r = arg;
  acc_t *acc = rt_acc_new(r->precision, r->accum);
  ASSERT_NOT_NULL(acc);
  /* a resumed run starts from other parameters: the load must set them */
  acc_set_seed(acc, r->resume ? 999 : 7, r->per_rank);
  if (!strcmp(r->precision, "fp16"))
    ASSERT_OK(acc, acc_set_grad_scaler(acc, 1024.0f, 2.0f, 0.5f, 4));
  static float X[N * NIN];
  static int64_t Y[N];
  rt_make_data(X, Y, N, NIN, NCLS);
  const int sizes[] = {NIN, 16, NCLS};
  acc_mlp_t *m = acc_mlp_new(acc, sizes, 2, BATCH);
  ASSERT_NOT_NULL(m);
  size_t np = acc_mlp_num_params(m);
  acc_optim_t *o = r->adamw
                       ? acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.01f, 0.9f, 0.999f,
                                       1e-8f, 0.01f)
                       : acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.1f, 0.9f, 0.0f);
  ASSERT_NOT_NULL(o);
  counters_t st = {0, 0, 0};
  ASSERT_OK(acc, acc_register_for_checkpointing(acc, "counters", &st, sizeof st));
  if (r->resume)
    ASSERT_OK(acc, acc_load_state(acc, r->dir, m, o));
  acc_sampler_t *s = acc_sampler_new(acc, N, BATCH, 1, 5);
  acc_sampler_set_epoch(s, (int)st.epoch);
  size_t nb = acc_sampler_num_batches(s);
  float xb[BATCH * NIN];
  int64_t yb[BATCH];
  while (st.step < TOTAL) {
    if (r->stop_at && st.step == r->stop_at) {
      ASSERT_OK(acc, acc_save_state(acc, r->dir, m, o));
      break;
    }
    size_t len;
    const size_t *idx = acc_sampler_batch(s, (size_t)st.batch, &len);
    for (size_t i = 0; i < len; i++) {
      for (int j = 0; j < NIN; j++)
        xb[i * NIN + j] = X[idx[i] * NIN + j] + 0.05f * (float)acc_rand_normal(acc);
      yb[i] = Y[idx[i]];
    }
    acc_accumulate_begin(acc, (size_t)st.batch + 1 == nb);
    acc_mlp_forward(m, xb, (int)len);
    acc_mlp_backward_xent(m, yb);
    ASSERT_OK(acc, acc_backward(acc, acc_mlp_grads(m), np));
    acc_optim_step(acc, o);
    acc_optim_zero_grad(acc, o);
    acc_accumulate_end(acc);
    st.step++;
    if ((size_t)++st.batch == nb) {
      st.batch = 0;
      acc_sampler_set_epoch(s, (int)++st.epoch);
    }
  }
  if (!r->stop_at && rank == 0) {
    FILE *f = fopen(r->out, "wb");
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(fwrite(acc_mlp_params(m), sizeof(float), np, f), np);
    float sc = acc_loss_scale(acc);
    ASSERT_EQ(fwrite(&sc, sizeof sc, 1, f), 1);
    fclose(f);
  }
  acc_sampler_destroy(&s);
  acc_optim_destroy(&o);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

static void resume(int world, const char *precision, int accum, int adamw, int per_rank) {
  char tmp[] = "/tmp/nbfork-ckpt-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(tmp));
  run_t r = {precision, accum, adamw, per_rank, 0, 0, "", ""};
  snprintf(r.dir, sizeof r.dir, "%s/ckpt/nested", tmp); /* created by save */
  rt_spawn_opts_t o = {.world = world, .deadline_s = 60};
  /* uninterrupted */
  snprintf(r.out, sizeof r.out, "%s/full.bin", tmp);
  ASSERT_EQ(rt_spawn(&o, run_body, &r, NULL), 0);
  /* interrupted after STOP steps: these processes exit */
  r.stop_at = STOP;
  ASSERT_EQ(rt_spawn(&o, run_body, &r, NULL), 0);
  /* no temporary files left behind, one file per rank plus the shared one */
  DIR *d = opendir(r.dir);
  ASSERT_NOT_NULL(d);
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      files++;
    else if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      NBF_TEST_FAIL("temporary file left: %s", e->d_name);
  closedir(d);
  ASSERT_EQ(files, world + 1);
  /* resumed by new processes */
  r.stop_at = 0;
  r.resume = 1;
  snprintf(r.out, sizeof r.out, "%s/resumed.bin", tmp);
  ASSERT_EQ(rt_spawn(&o, run_body, &r, NULL), 0);
  static unsigned char a[1 << 16], b[1 << 16];
  size_t na;
  size_t diff = rt_compare_files(tmp, "full.bin", "resumed.bin", a, b, sizeof a, &na);
  if (diff)
    NBF_TEST_FAIL("resumed run differs from the uninterrupted one in %zu of %zu bytes", diff, na);
  float scale;
  memcpy(&scale, a + na - 4, 4);
  printf("np%d %s accum %d %s: %zu parameter bytes identical after resume (final loss scale %g)\n",
         world, precision, accum, adamw ? "AdamW" : "SGD", na - 4, (double)scale);
  rm_rf(r.dir);
  const char *leftovers[] = {"ckpt", "resumed.bin", "full.bin"};
  for (int i = 0; i < 3; i++) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", tmp, leftovers[i]);
    i == 0 ? rmdir(p) : unlink(p);
  }
  rmdir(tmp);
}

NBF_TEST(errors) {
  char tmp[] = "/tmp/nbfork-ckpt-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(tmp));
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  const int sizes[] = {6, 5, 3}, other[] = {6, 7, 3};
  acc_mlp_t *m = acc_mlp_new(acc, sizes, 2, 4), *m2 = acc_mlp_new(acc, other, 2, 4);
  size_t np = acc_mlp_num_params(m);
  acc_optim_t *o = acc_sgd_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.1f, 0.9f, 0.0f);
  acc_optim_t *adam =
      acc_adamw_new(acc_mlp_params(m), acc_mlp_grads(m), np, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f);
  /* missing directory: IO naming the file */
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", tmp);
  ASSERT_EQ(acc_load_state(acc, missing, m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), missing);
  ASSERT_CONTAINS(acc_last_error(acc), "No such file");
  /* a directory that cannot be created */
  ASSERT_EQ(acc_save_state(acc, "/proc/nbfork-cannot", m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), "/proc/nbfork-cannot");
  ASSERT_EQ(acc_save_state(acc, "", m, o), ACC_ERR_INVALID_ARGUMENT);
  /* save, then load into the wrong model / optimizer: refused, unchanged */
  ASSERT_OK(acc, acc_save_state(acc, tmp, m, o));
  float keep = acc_mlp_params(m2)[0];
  ASSERT_EQ(acc_load_state(acc, tmp, m2, NULL), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_CONTAINS(acc_last_error(acc), "other layer sizes");
  ASSERT_TRUE(acc_mlp_params(m2)[0] == keep);
  ASSERT_EQ(acc_load_state(acc, tmp, m, adam), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_CONTAINS(acc_last_error(acc), "SGD optimizer");
  /* a registered object missing from the checkpoint */
  int counter = 5;
  ASSERT_OK(acc, acc_register_for_checkpointing(acc, "counter", &counter, sizeof counter));
  ASSERT_EQ(acc_load_state(acc, tmp, m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), "'counter'");
  ASSERT_EQ(acc_register_for_checkpointing(acc, "", &counter, 4), ACC_ERR_INVALID_ARGUMENT);
  /* round trip of parameters, optimizer and the registered object */
  float *p = acc_mlp_params(m);
  float p0 = p[0];
  ASSERT_OK(acc, acc_save_state(acc, tmp, m, o));
  p[0] = 42.0f;
  counter = 9;
  ASSERT_OK(acc, acc_load_state(acc, tmp, m, o));
  ASSERT_TRUE(p[0] == p0);
  ASSERT_EQ(counter, 5);
  /* NULL model/optimizer: state without them */
  ASSERT_OK(acc, acc_load_state(acc, tmp, NULL, NULL));
  /* corruption: one flipped byte, then truncation */
  char path[300];
  snprintf(path, sizeof path, "%s/nbfork_state.bin", tmp);
  static unsigned char buf[1 << 16];
  size_t n = rt_read_file(path, buf, sizeof buf);
  buf[n - 3] ^= 0x40;
  FILE *f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
  p[0] = 42.0f;
  ASSERT_EQ(acc_load_state(acc, tmp, m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), "corrupt");
  ASSERT_CONTAINS(acc_last_error(acc), path);
  ASSERT_TRUE(p[0] == 42.0f); /* nothing applied */
  ASSERT_EQ(truncate(path, (off_t)n - 10), 0);
  ASSERT_EQ(acc_load_state(acc, tmp, m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), "truncated");
  f = fopen(path, "wb");
  fputs("not a checkpoint at all, but long enough for a header....", f);
  fclose(f);
  ASSERT_EQ(acc_load_state(acc, tmp, m, o), ACC_ERR_IO);
  ASSERT_CONTAINS(acc_last_error(acc), "not an nbfork checkpoint");
  /* saving again replaces the broken file atomically */
  ASSERT_OK(acc, acc_save_state(acc, tmp, m, o));
  ASSERT_OK(acc, acc_load_state(acc, tmp, m, o));
  acc_optim_destroy(&o);
  acc_optim_destroy(&adam);
  acc_mlp_destroy(&m);
  acc_mlp_destroy(&m2);
  acc_destroy(&acc);
  rm_rf(tmp);
}

NBF_TEST(resume_np1) {
  resume(1, "no", 1, 0, 0);
}

NBF_TEST(resume_np2) {
  resume(2, "fp16", 2, 1, 1);
}

NBF_TEST(resume_np2_sgd) {
  resume(2, "bf16", 1, 0, 0);
}

/* Ranks print progress from forked children: keep stdout line-buffered
 * so that their lines do not interleave mid-line. */
__attribute__((constructor)) static void line_buffered_stdout(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
}

NBF_TEST_MAIN()
