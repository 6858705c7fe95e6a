/*
 * test_trainer_args.c — TrainingArguments (defaults, the command line,
 * bad names and values rejected naming them, cross-field checks),
 * get_process_log_level, each scheduler's curve against the formulas of
 * transformers/optimization.py written out here, and the Python float
 * repr of the log lines and of trainer_state.json's numbers.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_trainer_internal.h"
#include "rt_test.h"

NBF_TEST(defaults) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  ASSERT_EQ_STR(a.output_dir, "trainer_output");
  ASSERT_NEAR(a.learning_rate, 5e-5, 0);
  ASSERT_EQ(a.per_device_train_batch_size, 8);
  ASSERT_NEAR(a.num_train_epochs, 3.0, 0);
  ASSERT_EQ(a.max_steps, -1);
  ASSERT_EQ_STR(a.lr_scheduler_type, "linear");
  ASSERT_EQ_STR(a.save_strategy, "steps");
  ASSERT_NEAR(a.save_steps, 500.0, 0);
  ASSERT_NEAR(a.logging_steps, 500.0, 0);
  ASSERT_NEAR(a.max_grad_norm, 1.0, 0);
  ASSERT_EQ(a.seed, 42);
  ASSERT_EQ_STR(a.log_level, "passive");
  ASSERT_EQ_STR(a.log_level_replica, "warning");
  ASSERT_EQ(a.log_on_each_node, 1);
  ASSERT_EQ_STR(a.optim, "adamw");
  ASSERT_OK(NULL, acc_training_args_validate(&a));
}

NBF_TEST(parse_command_line) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  char *argv[] = {"prog",
                  "--log_level",
                  "warning",
                  "--log_level_replica",
                  "error",
                  "--log_on_each_node",
                  "0",
                  "--learning_rate=0.1",
                  "--max_steps",
                  "7",
                  "--load_best_model_at_end",
                  "TRUE",
                  "--eval_strategy",
                  "epoch",
                  "--save_strategy",
                  "epoch",
                  "--warmup_steps",
                  "0.1",
                  "--optim",
                  "sgd",
                  "--output_dir",
                  "/tmp/x"};
  ASSERT_OK(NULL, acc_training_args_parse(&a, (int)(sizeof argv / sizeof argv[0]), argv));
  ASSERT_EQ_STR(a.log_level, "warning");
  ASSERT_EQ_STR(a.log_level_replica, "error");
  ASSERT_EQ(a.log_on_each_node, 0);
  ASSERT_NEAR(a.learning_rate, 0.1, 0);
  ASSERT_EQ(a.max_steps, 7);
  ASSERT_EQ(a.load_best_model_at_end, 1);
  ASSERT_NEAR(a.warmup_steps, 0.1, 0);
  ASSERT_EQ_STR(a.optim, "sgd");
  ASSERT_EQ_STR(a.output_dir, "/tmp/x");
  ASSERT_OK(NULL, acc_training_args_validate(&a));
}

/* The command line "p ARGS..." (NULL-ended) must be rejected, by parsing
 * or by validation, with a message containing `needle`. */
static void rejected(const char *needle, ...) {
  char *argv[16] = {"p"};
  int argc = 1;
  va_list ap;
  va_start(ap, needle);
  for (char *arg; (arg = va_arg(ap, char *));) {
    ASSERT_LT(argc, (int)(sizeof argv / sizeof argv[0]));
    argv[argc++] = arg;
  }
  va_end(ap);
  acc_training_args_t a;
  acc_training_args_init(&a);
  acc_result_t r = acc_training_args_parse(&a, argc, argv);
  if (r == ACC_OK)
    r = acc_training_args_validate(&a);
  ASSERT_NE(r, ACC_OK);
  if (!strstr(acc_last_error(NULL), needle))
    NBF_TEST_FAIL("error '%s' does not name '%s'", acc_last_error(NULL), needle);
}

NBF_TEST(bad_arguments_named) {
  rejected("learning_rat", "--learning_rat", "0.1", NULL);
  rejected("--learning_rate: bad value 'fast'", "--learning_rate", "fast", NULL);
  rejected("--per_device_train_batch_size", "--per_device_train_batch_size", "0", NULL);
  rejected("--lr_scheduler_type: bad value 'cosine_restarts'", "--lr_scheduler_type",
           "cosine_restarts", NULL);
  rejected("--log_on_each_node", "--log_on_each_node", "maybe", NULL);
  rejected("--seed: missing value", "--seed", NULL);
  rejected("--log_level", "--log_level", "loud", NULL);
  rejected("oops", "oops", NULL);
  rejected("load_best_model_at_end", "--load_best_model_at_end", "1", "--eval_strategy", "epoch",
           NULL);
  rejected("min_lr", "--lr_scheduler_type", "cosine_with_min_lr", NULL);
  rejected("early_stopping_patience", "--early_stopping_patience", "2", NULL);
  /* a rejected value leaves the field unchanged */
  acc_training_args_t a;
  acc_training_args_init(&a);
  ASSERT_NE(acc_training_args_set(&a, "num_train_epochs", "1e999"), ACC_OK);
  ASSERT_NEAR(a.num_train_epochs, 3.0, 0);
}

/* Transformers' command-line forms a script written for it uses:
 * boolean flags without a value, --fp16/--bf16, --report_to none,
 * --do_train/--do_eval, --resume_from_checkpoint false. */
NBF_TEST(transformers_flags_accepted) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  char *argv[] = {"prog",
                  "--do_train",
                  "--do_eval",
                  "--fp16",
                  "--report_to",
                  "none",
                  "--disable_tqdm",
                  "--resume_from_checkpoint",
                  "false",
                  "--seed",
                  "3"};
  ASSERT_OK(NULL, acc_training_args_parse(&a, (int)(sizeof argv / sizeof argv[0]), argv));
  ASSERT_EQ(a.do_train, 1);
  ASSERT_EQ(a.do_eval, 1);
  ASSERT_EQ_STR(a.mixed_precision, "fp16");
  ASSERT_EQ_STR(a.report_to, "none");
  ASSERT_EQ(a.disable_tqdm, 1);
  ASSERT_EQ_STR(a.resume_from_checkpoint, "");
  ASSERT_EQ(a.seed, 3);
  ASSERT_OK(NULL, acc_training_args_validate(&a));
  /* a flag ending the line, and --bf16 false undoing nothing it did not set */
  acc_training_args_init(&a);
  char *tail[] = {"prog", "--fp16", "false", "--bf16"};
  ASSERT_OK(NULL, acc_training_args_parse(&a, 4, tail));
  ASSERT_EQ_STR(a.mixed_precision, "bf16");
  char *off[] = {"prog", "--bf16", "false"};
  ASSERT_OK(NULL, acc_training_args_parse(&a, 3, off));
  ASSERT_EQ_STR(a.mixed_precision, "no");
}

NBF_TEST(transformers_flag_mistakes_named) {
  rejected("--bf16 and --fp16", "--fp16", "--bf16", NULL);
  rejected("non-zero --logging_steps", "--logging_steps", "0", NULL);
  rejected("use --warmup_steps", "--warmup_ratio", "0.1", NULL);
  rejected("--report_to: bad value 'wandb'", "--report_to", "wandb", NULL);
  /* a value-less flag is only for booleans */
  rejected("--seed: bad value '--fp16'", "--seed", "--fp16", NULL);
  /* logging_steps 0 is fine when nothing logs by steps */
  acc_training_args_t a;
  acc_training_args_init(&a);
  char *epoch[] = {"p", "--logging_steps", "0", "--logging_strategy", "epoch"};
  ASSERT_OK(NULL, acc_training_args_parse(&a, 5, epoch));
  ASSERT_OK(NULL, acc_training_args_validate(&a));
}

NBF_TEST(process_log_level) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  /* passive: the library default (warning) on every process */
  ASSERT_EQ(acc_training_args_process_log_level(&a, 0, 0), ACC_LOG_WARNING);
  ASSERT_EQ(acc_training_args_process_log_level(&a, 1, 1), ACC_LOG_WARNING);
  ASSERT_OK(NULL, acc_training_args_set(&a, "log_level", "info"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "log_level_replica", "error"));
  /* log_on_each_node: local rank 0 of every node is a main process */
  ASSERT_EQ(acc_training_args_process_log_level(&a, 0, 0), ACC_LOG_INFO);
  ASSERT_EQ(acc_training_args_process_log_level(&a, 4, 0), ACC_LOG_INFO);
  ASSERT_EQ(acc_training_args_process_log_level(&a, 5, 1), ACC_LOG_ERROR);
  ASSERT_OK(NULL, acc_training_args_set(&a, "log_on_each_node", "false"));
  ASSERT_EQ(acc_training_args_process_log_level(&a, 0, 0), ACC_LOG_INFO);
  ASSERT_EQ(acc_training_args_process_log_level(&a, 4, 0), ACC_LOG_ERROR);
}

/* Each scheduler at a few steps: warmup 10, total 110. */
NBF_TEST(scheduler_curves) {
  acc_training_args_t a;
  acc_training_args_init(&a);
  const long W = 10, T = 110;
  const long steps[] = {0, 5, 10, 35, 60, 109, 110};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    long s = steps[i];
    double warm = (double)s / 10.0, prog = (double)(s - W) / 100.0;
    struct {
      const char *type, *kwargs;
      double want;
    } c[] = {
        {"linear", "", s < W ? warm : (double)(T - s) / 100.0},
        {"constant", "", 1.0},
        {"constant_with_warmup", "", s < W ? warm : 1.0},
        {"cosine", "", s < W ? warm : 0.5 * (1 + cos(M_PI * prog))},
        {"cosine_with_min_lr", "min_lr_rate=0.1",
         s < W ? warm : 0.5 * (1 + cos(M_PI * prog)) * 0.9 + 0.1},
        {"inverse_sqrt", "", s < W ? warm : 1.0 / sqrt((double)s / 10.0)},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
      ASSERT_OK(NULL, acc_training_args_set(&a, "lr_scheduler_type", c[k].type));
      ASSERT_OK(NULL, acc_training_args_set(&a, "lr_scheduler_kwargs", c[k].kwargs));
      double got = acc_lr_lambda(&a, s, W, T);
      if (fabs(got - c[k].want) > 1e-12)
        NBF_TEST_FAIL("%s at step %ld: %.15g, expected %.15g", c[k].type, s, got, c[k].want);
    }
  }
  /* min_lr given absolutely: rate = min_lr / learning_rate */
  ASSERT_OK(NULL, acc_training_args_set(&a, "lr_scheduler_type", "cosine_with_min_lr"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "lr_scheduler_kwargs", "min_lr=1e-5"));
  ASSERT_OK(NULL, acc_training_args_set(&a, "learning_rate", "1e-4"));
  ASSERT_NEAR(acc_lr_lambda(&a, T, W, T), 0.1, 1e-12);
  /* inverse_sqrt without warmup: timescale 10000 */
  ASSERT_OK(NULL, acc_training_args_set(&a, "lr_scheduler_type", "inverse_sqrt"));
  ASSERT_NEAR(acc_lr_lambda(&a, 30000, 0, T), 0.5, 1e-12);
}

NBF_TEST(python_float_repr) {
  struct {
    double v;
    const char *want;
  } c[] = {{0.1, "0.1"},
           {5e-05, "5e-05"},
           {1.0, "1.0"},
           {0.0499, "0.0499"},
           {(double)1.2345679f, "1.2345678806304932"},
           {100000.0, "100000.0"},
           {0.53, "0.53"},
           {1e16, "1e+16"},
           {-2.5, "-2.5"},
           {0.07872340425531915, "0.07872340425531915"}};
  char buf[40];
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    tr_float_repr(c[i].v, buf, sizeof buf);
    ASSERT_EQ_STR(buf, c[i].want);
  }
}

/* trainer_state.json's numbers: each value's text as Python's json.dumps
 * writes it (the `want` column is Python 3.11's output, pasted), and a
 * document's layout as json.dumps(indent=2, sort_keys=True) + "\n". */
NBF_TEST(trainer_state_json_python) {
  static const struct {
    double v;
    const char *want;
  } c[] = {{0.53, "0.53"},
           {0.1, "0.1"},
           {1e-05, "1e-05"},
           {5e-05, "5e-05"},
           {0.0001, "0.0001"},
           {1.0, "1.0"},
           {-0.0, "-0.0"},
           {1.0 / 3.0, "0.3333333333333333"},
           {0.1 + 0.2, "0.30000000000000004"},
           {1e16, "1e+16"},
           {1.5e20, "1.5e+20"},
           {12345678901234568.0, "1.2345678901234568e+16"},
           {123456.7, "123456.7"},
           {6.02214076e23, "6.02214076e+23"},
           {4.9e-324, "5e-324"},
           {1.7976931348623157e308, "1.7976931348623157e+308"},
           {0.04999999999999999, "0.04999999999999999"},
           {9.5367431640625e-07, "9.5367431640625e-07"},
           {-1234.5678, "-1234.5678"}};
  const size_t n = sizeof c / sizeof c[0];
  tr_reals_t r = {0};
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(arr, tr_json_real(&r, c[i].v));
  char *text = tr_json_dumps(arr, &r);
  ASSERT_NOT_NULL(text);
  const char *p = text;
  for (size_t i = 0; i < n; i++) { /* "[\n  v0,\n  v1,\n ..." */
    p = strstr(p, "\n  ");
    ASSERT_NOT_NULL(p);
    p += 3;
    size_t len = strcspn(p, ",\n");
    char got[64];
    snprintf(got, sizeof got, "%.*s", (int)len, p);
    ASSERT_EQ_STR(got, c[i].want);
  }
  free(text);
  json_decref(arr);
  tr_reals_free(&r);
  json_t *doc =
      json_pack("{s:[{s:o,s:i}],s:o,s:n,s:b,s:o}", "b", "loss", tr_json_real(&r, 0.53), "step", 1,
                "a", tr_json_real(&r, 0.1 + 0.2), "n", "t", 1, "nan", tr_json_real(&r, NAN));
  ASSERT_NOT_NULL(doc);
  text = tr_json_dumps(doc, &r);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ_STR(text, "{\n  \"a\": 0.30000000000000004,\n  \"b\": [\n    {\n      \"loss\": 0.53,\n"
                      "      \"step\": 1\n    }\n  ],\n  \"n\": null,\n  \"nan\": null,\n"
                      "  \"t\": true\n}\n");
  free(text);
  /* a placeholder the table does not hold is refused, not printed */
  tr_reals_t short_table = {.v = r.v, .n = 1, .cap = r.cap};
  ASSERT_NULL(tr_json_dumps(doc, &short_table));
  json_decref(doc);
  tr_reals_free(&r);
}

NBF_TEST_MAIN()
