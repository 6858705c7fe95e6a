/*
 * bench/trainer_overhead.c — steps per second of the Trainer
 * (nbf_trainer.h) against the hand-written loop of
 * notebooks/fashion_mnist.ipynb, side by side in one run: the same MLP
 * 784-256-10, the same Fashion-MNIST images, batch 64, SGD lr 0.1
 * momentum 0.9 with cosine decay, one process, one BLAS thread. The
 * Trainer runs with its defaults otherwise (clipping at max_grad_norm 1,
 * a log line every 50 steps, the progress bar), which is what its
 * overhead is. Runs alternate (hand, Trainer) --repeat times; medians are
 * compared. Also prints the optimizer state memory of AdamW against
 * GaLore's at rank 64 (the projectors and low-rank moments).
 *
 * Build and run: bench/trainer_overhead.sh [--repeat R] [--limit N] [-- FLAGS]
 * (FLAGS: more TrainingArguments for the Trainer's side, e.g.
 * --max_grad_norm 0 --disable_tqdm true to see what each costs).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nbfork.h"

#define TRAINER_FMNIST_NO_MAIN
#include "../examples/trainer_fmnist.c"

/* CPU time of this process: one process with one BLAS thread uses one
 * core, so on an idle machine this is the wall time; on a shared one
 * (the 2-core test VM) it does not count the time other programs took
 * the core, which made wall-clock runs vary by 3x. */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The notebook's training loop (one epoch, no evaluation): steps/s. */
static double hand_loop(const acc_dataset_t *ds, int bs) {
  acc_config_t cfg = ACC_CONFIG_INIT;
  acc_t *acc = acc_new(&cfg);
  acc_set_seed(acc, 42, 0);
  int sizes[] = {784, 256, 10};
  acc_mlp_t *model = acc_mlp_new(acc, sizes, 2, bs);
  size_t n_params = acc_mlp_num_params(model);
  acc_optim_t *opt =
      acc_sgd_new(acc_mlp_params(model), acc_mlp_grads(model), n_params, 0.1f, 0.9f, 0.0f);
  float *x = malloc((size_t)bs * 784 * sizeof(float));
  int64_t *y = malloc((size_t)bs * sizeof(int64_t));
  double t0 = now_s();
  acc_sampler_t *train = acc_sampler_new(acc, ds->n, (size_t)bs, 1, 42);
  acc_sampler_set_epoch(train, 0);
  size_t nb = acc_sampler_num_batches(train);
  acc_progress_t *bar = acc_progress_new(acc, "hand", nb);
  for (size_t b = 0; b < nb; b++) {
    size_t len;
    const size_t *idx = acc_sampler_batch(train, b, &len);
    for (size_t i = 0; i < len; i++) {
      memcpy(x + i * 784, ds->x + idx[i] * 784, 784 * sizeof(float));
      y[i] = ds->y[idx[i]];
    }
    acc_mlp_zero_grad(model);
    acc_mlp_forward(model, x, (int)len);
    float loss = acc_mlp_backward_xent(model, y);
    acc_accumulate_begin(acc, b + 1 == nb);
    acc_backward(acc, acc_mlp_grads(model), n_params);
    acc_optim_set_lr(opt, 0.1f * 0.5f * (1.0f + cosf(3.14159265f * (float)b / (float)nb)));
    acc_optim_step(acc, opt);
    acc_accumulate_end(acc);
    if ((b + 1) % 50 == 0) {
      char post[32];
      snprintf(post, sizeof post, "loss=%.3f", loss);
      acc_progress_update(bar, 50, post);
      acc_log_scalar(acc, "train loss", (long)b, loss);
    }
  }
  acc_progress_destroy(&bar);
  double sps = (double)nb / (now_s() - t0);
  acc_sampler_destroy(&train);
  free(x), free(y);
  acc_optim_destroy(&opt);
  acc_mlp_destroy(&model);
  acc_destroy(&acc);
  return sps;
}

/* The same through the Trainer: steps/s of acc_trainer_train. */
static int g_extra_argc;
static char **g_extra_argv;

static double trainer_loop(const acc_dataset_t *ds, int bs) {
  char bsz[16];
  snprintf(bsz, sizeof bsz, "%d", bs);
  char *argv[] = {"bench",
                  "--optim",
                  "sgd",
                  "--optim_args",
                  "momentum=0.9",
                  "--learning_rate",
                  "0.1",
                  "--lr_scheduler_type",
                  "cosine",
                  "--num_train_epochs",
                  "1",
                  "--per_device_train_batch_size",
                  bsz,
                  "--logging_steps",
                  "50",
                  "--save_strategy",
                  "no",
                  "--output_dir",
                  "/tmp/nbfork-bench-trainer"};
  acc_training_args_t a;
  acc_training_args_init(&a);
  if (acc_training_args_parse(&a, (int)(sizeof argv / sizeof argv[0]), argv) ||
      acc_training_args_parse(&a, g_extra_argc, g_extra_argv)) {
    fprintf(stderr, "%s\n", acc_last_error(NULL));
    exit(1);
  }
  acc_t *acc = acc_trainer_accelerator_new(&a);
  int sizes[] = {784, 256, 10};
  acc_mlp_t *mlp = acc_mlp_new(acc, sizes, 2, bs);
  acc_model_t m;
  acc_mlp_model(mlp, &m);
  acc_trainer_t *tr = acc_trainer_new(acc, &a, &m, ds, NULL);
  double t0 = now_s();
  if (!tr || acc_trainer_train(tr) != ACC_OK) {
    fprintf(stderr, "trainer: %s\n", acc_last_error(acc));
    exit(1);
  }
  double sps = (double)acc_trainer_state(tr)->global_step / (now_s() - t0);
  acc_trainer_destroy(&tr);
  acc_model_release(&m);
  acc_mlp_destroy(&mlp);
  acc_destroy(&acc);
  return sps;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int repeat = 5;
  size_t limit = 12800;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--")) { /* the rest: TrainingArguments flags for the Trainer */
      g_extra_argc = argc - i;
      g_extra_argv = argv + i;
      break;
    }
    if (!strcmp(argv[i], "--repeat"))
      repeat = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--limit"))
      limit = strtoul(argv[i + 1], NULL, 10);
  }
  if (repeat < 1 || repeat > 64)
    repeat = 5;
  acc_dataset_t ds;
  if (fmnist_load("train", limit, &ds))
    return 1;
  const int bs = 64;
  double hand[64], trainer[64];
  for (int r = 0; r < repeat; r++) {
    hand[r] = hand_loop(&ds, bs);
    trainer[r] = trainer_loop(&ds, bs);
    fprintf(stderr, "run %d: hand %.1f steps/s, Trainer %.1f steps/s\n", r, hand[r], trainer[r]);
  }
  qsort(hand, (size_t)repeat, sizeof(double), cmp);
  qsort(trainer, (size_t)repeat, sizeof(double), cmp);
  double h = hand[repeat / 2], t = trainer[repeat / 2];
  printf("trainer_overhead: %zu images, batch %d, 1 process, median of %d, steps per CPU second\n",
         ds.n, bs, repeat);
  printf("  hand-written loop (notebooks/fashion_mnist.ipynb): %8.1f steps/s\n", h);
  printf("  Trainer (acc_trainer_train)                      : %8.1f steps/s\n", t);
  printf("  ratio Trainer / hand-written: %.3f (goal >= 0.95)\n", t / h);
  /* optimizer state: AdamW's two moments against GaLore rank 64 on the
   * weights (optim_target_modules "layers", Transformers' galore_adamw) */
  int sizes[] = {784, 256, 10};
  acc_mlp_t *mlp = acc_mlp_new(NULL, sizes, 2, bs);
  acc_model_t m;
  acc_mlp_model(mlp, &m);
  acc_galore_t *g =
      acc_galore_new(NULL, &m, "layers", 64, 200, 0.25f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
  size_t adamw = 2 * m.num_params * sizeof(float), galore = acc_galore_state_bytes(g);
  printf("optimizer state, MLP 784-256-10 (%zu parameters): AdamW %zu bytes, GaLore rank 64 %zu "
         "bytes (ratio %.3f)\n",
         m.num_params, adamw, galore, (double)galore / (double)adamw);
  acc_galore_destroy(&g);
  acc_model_release(&m);
  acc_mlp_destroy(&mlp);
  free((void *)ds.x), free((void *)ds.y);
  return 0;
}
