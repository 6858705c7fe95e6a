/*
 * trainer_fmnist.c — Fashion-MNIST through the Trainer (nbf_trainer.h):
 * an MLP 784-256-10 trained and evaluated with Transformers'
 * TrainingArguments given as --flags, e.g.
 *
 *   build/bin/trainer_fmnist --output_dir /tmp/fm --num_train_epochs 1 \
 *       --learning_rate 0.1 --optim sgd --optim_args momentum=0.9 \
 *       --per_device_train_batch_size 64 --eval_strategy epoch \
 *       --save_strategy epoch --logging_steps 100 --dataset_limit 6000
 *   build/bin/nbfork launch --num_processes 2 build/bin/trainer_fmnist ...
 *
 * Every TrainingArguments field of nbf_trainer.h is a flag; the program's
 * own is --dataset_limit N (first N training images, N/6 test images).
 * Data: Debian's dataset-fashion-mnist; train on the 60000 training
 * images, evaluate on the 10000 test images. From a notebook, include
 * this file in a cell (#include "examples/trainer_fmnist.c" with
 * -DTRAINER_FMNIST_NO_MAIN) and %launch trainer_fmnist_run(argc, argv).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Read `limit` (0 = all) images and labels of one split into `ds`
 * (pixels scaled to [0, 1]). 0, or -1 after printing why. */
int fmnist_load(const char *split, size_t limit, acc_dataset_t *ds) {
  char pi[256], pl[256];
  snprintf(pi, sizeof pi, FMNIST_DIR "/%s-images-idx3-ubyte.gz", split);
  snprintf(pl, sizeof pl, FMNIST_DIR "/%s-labels-idx1-ubyte.gz", split);
  acc_idx_t *img = acc_idx_read(pi), *lab = acc_idx_read(pl);
  if (!img || !lab) {
    fprintf(stderr, "trainer_fmnist: cannot read %s (install dataset-fashion-mnist)\n", pi);
    acc_idx_destroy(&img);
    acc_idx_destroy(&lab);
    return -1;
  }
  size_t n = (size_t)img->dims[0];
  if (limit && limit < n)
    n = limit;
  float *x = malloc(n * 784 * sizeof(float));
  int64_t *y = malloc(n * sizeof(int64_t));
  if (!x || !y) {
    fprintf(stderr, "trainer_fmnist: out of memory\n");
    free(x), free(y);
    acc_idx_destroy(&img), acc_idx_destroy(&lab);
    return -1;
  }
  for (size_t i = 0; i < n * 784; i++)
    x[i] = img->u8[i] / 255.0f;
  for (size_t i = 0; i < n; i++)
    y[i] = lab->u8[i];
  acc_idx_destroy(&img);
  acc_idx_destroy(&lab);
  *ds = (acc_dataset_t){x, y, n, 784};
  return 0;
}

/* Split --dataset_limit N off argv (in place); returns N, 0 when absent. */
static size_t take_dataset_limit(int *argc, char **argv) {
  size_t limit = 0;
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    if (!strcmp(argv[i], "--dataset_limit") && i + 1 < *argc)
      limit = strtoul(argv[++i], NULL, 10);
    else if (!strncmp(argv[i], "--dataset_limit=", 16))
      limit = strtoul(argv[i] + 16, NULL, 10);
    else
      argv[out++] = argv[i];
  }
  *argc = out;
  return limit;
}

/* The whole run with these arguments: 0 on success, 1 on a failure
 * (printed), 2 on bad arguments (printed, naming the argument). */
int trainer_fmnist_run(int argc, char **argv) {
  size_t limit = take_dataset_limit(&argc, argv);
  acc_training_args_t args;
  acc_training_args_init(&args);
  if (acc_training_args_parse(&args, argc, argv) != ACC_OK ||
      acc_training_args_validate(&args) != ACC_OK) {
    fprintf(stderr, "trainer_fmnist: %s\n", acc_last_error(NULL));
    return 2;
  }
  acc_dataset_t train, eval;
  if (fmnist_load("train", limit, &train) || fmnist_load("t10k", limit ? limit / 6 + 1 : 0, &eval))
    return 1;
  int rc = 1;
  acc_t *acc = acc_trainer_accelerator_new(&args);
  int sizes[] = {784, 256, 10};
  int maxb = args.per_device_train_batch_size > args.per_device_eval_batch_size
                 ? args.per_device_train_batch_size
                 : args.per_device_eval_batch_size;
  acc_mlp_t *mlp = acc ? acc_mlp_new(acc, sizes, 2, maxb) : NULL;
  acc_model_t model = {0};
  acc_trainer_t *tr = NULL;
  if (mlp && acc_mlp_model(mlp, &model) == ACC_OK &&
      (tr = acc_trainer_new(acc, &args, &model, &train, &eval))) {
    acc_trainer_set_compute_metrics(tr, acc_accuracy_metric, NULL);
    rc = acc_trainer_train(tr) == ACC_OK ? 0 : 1;
  }
  if (rc)
    fprintf(stderr, "trainer_fmnist: %s\n", acc ? acc_last_error(acc) : acc_last_error(NULL));
  acc_trainer_destroy(&tr);
  acc_model_release(&model);
  acc_mlp_destroy(&mlp);
  acc_destroy(&acc);
  free((void *)train.x), free((void *)train.y), free((void *)eval.x), free((void *)eval.y);
  return rc;
}

#ifndef TRAINER_FMNIST_NO_MAIN
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: trainer_fmnist [--FIELD VALUE | --FIELD=VALUE ...] [--dataset_limit N]\n"
             "Fashion-MNIST (MLP 784-256-10) through the Trainer. FIELD is any field of\n"
             "acc_training_args_t (include/nbf_trainer.h), named as Transformers'\n"
             "TrainingArguments: --output_dir DIR --num_train_epochs 3 --learning_rate 0.1\n"
             "--optim sgd|adamw|galore_adamw|lomo|adalomo --per_device_train_batch_size 64\n"
             "--eval_strategy epoch --save_strategy epoch --resume_from_checkpoint true ...\n"
             "--dataset_limit N trains on the first N images (evaluates on N/6).\n");
      return 0;
    }
  return trainer_fmnist_run(argc, argv);
}
#endif
