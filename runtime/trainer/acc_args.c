/*
 * acc_args.c — TrainingArguments: Transformers' defaults, one table of
 * fields (name, type, allowed values) that both acc_training_args_set and
 * the command-line parser use, the cross-field checks of
 * TrainingArguments.__post_init__, and get_process_log_level.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "acc_internal.h"

typedef enum { T_DOUBLE, T_INT, T_LONG, T_LLONG, T_BOOL, T_STR } arg_type_t;

typedef struct {
  const char *name;
  arg_type_t type;
  size_t off, size;
  const char *choices; /* "a|b|c" for strings; NULL = free text */
  double min;          /* numbers: smallest accepted value */
  const char *dflt;    /* Transformers' default as text; NULL = 0 / "" / false */
} arg_def_t;

#define F(name, type, choices, min, dflt)                                                          \
  {                                                                                                \
#name, type, offsetof(acc_training_args_t, name), sizeof(((acc_training_args_t *)0)->name),    \
        choices, min, dflt                                                                         \
  }
#define LEVELS "debug|info|warning|error|critical|passive"
#define SCHEDULERS "linear|cosine|cosine_with_min_lr|constant|constant_with_warmup|inverse_sqrt"

static const arg_def_t ARGS[] = {
    F(output_dir, T_STR, NULL, 0, "trainer_output"),
    F(learning_rate, T_DOUBLE, NULL, 0, "5e-5"),
    F(per_device_train_batch_size, T_INT, NULL, 1, "8"),
    F(per_device_eval_batch_size, T_INT, NULL, 1, "8"),
    F(num_train_epochs, T_DOUBLE, NULL, 0, "3"),
    F(max_steps, T_LONG, NULL, -1, "-1"),
    F(weight_decay, T_DOUBLE, NULL, 0, NULL),
    F(adam_beta1, T_DOUBLE, NULL, 0, "0.9"),
    F(adam_beta2, T_DOUBLE, NULL, 0, "0.999"),
    F(adam_epsilon, T_DOUBLE, NULL, 0, "1e-8"),
    F(warmup_steps, T_DOUBLE, NULL, 0, NULL),
    F(lr_scheduler_type, T_STR, SCHEDULERS, 0, "linear"),
    F(lr_scheduler_kwargs, T_STR, NULL, 0, NULL),
    F(eval_strategy, T_STR, "no|steps|epoch", 0, "no"),
    F(save_strategy, T_STR, "no|steps|epoch|best", 0, "steps"),
    F(logging_strategy, T_STR, "no|steps|epoch", 0, "steps"),
    F(eval_steps, T_DOUBLE, NULL, 0, NULL),
    F(save_steps, T_DOUBLE, NULL, 0, "500"),
    F(logging_steps, T_DOUBLE, NULL, 0, "500"),
    F(save_total_limit, T_INT, NULL, -1, "-1"),
    F(load_best_model_at_end, T_BOOL, NULL, 0, NULL),
    F(metric_for_best_model, T_STR, NULL, 0, NULL),
    F(greater_is_better, T_BOOL, NULL, 0, NULL),
    F(gradient_accumulation_steps, T_INT, NULL, 1, "1"),
    F(max_grad_norm, T_DOUBLE, NULL, 0, "1.0"),
    F(seed, T_LLONG, NULL, 0, "42"),
    F(mixed_precision, T_STR, "no|fp16|bf16", 0, "no"),
    F(log_level, T_STR, LEVELS, 0, "passive"),
    F(log_level_replica, T_STR, LEVELS, 0, "warning"),
    F(log_on_each_node, T_BOOL, NULL, 0, "true"),
    F(neftune_noise_alpha, T_DOUBLE, NULL, 0, NULL),
    F(optim, T_STR, "sgd|adamw|galore_adamw|lomo|adalomo", 0, "adamw"),
    F(optim_args, T_STR, NULL, 0, NULL),
    F(optim_target_modules, T_STR, NULL, 0, NULL),
    F(resume_from_checkpoint, T_STR, NULL, 0, NULL),
    F(early_stopping_patience, T_INT, NULL, 0, NULL),
    F(early_stopping_threshold, T_DOUBLE, NULL, 0, NULL),
    F(disable_tqdm, T_BOOL, NULL, 0, NULL),
    F(do_train, T_BOOL, NULL, 0, NULL),
    F(do_eval, T_BOOL, NULL, 0, NULL),
    F(report_to, T_STR, "none|all", 0, "none"),
    F(fsdp, T_STR, NULL, 0, NULL),
    F(fsdp_config, T_STR, NULL, 0, NULL),
    F(deepspeed, T_STR, NULL, 0, NULL),
};
#define NARGS (sizeof ARGS / sizeof ARGS[0])

/* 1 when `v` is one of the '|'-separated `choices`. */
static int in_choices(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *p = choices; p && *p;) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0)
      return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

static int parse_bool(const char *v, int *out) {
  static const char *const T[] = {"true", "1", "yes"}, *const Fl[] = {"false", "0", "no"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(v, T[i]))
      return *out = 1, 0;
    if (!strcasecmp(v, Fl[i]))
      return *out = 0, 0;
  }
  return -1;
}

static acc_result_t bad_value(const arg_def_t *d, const char *v, const char *expected) {
  return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "--%s: bad value '%s' (expected %s)",
                        d->name, v, expected);
}

/* Store `v` into the field of `d` in `a`. */
static acc_result_t set_field(acc_training_args_t *a, const arg_def_t *d, const char *v) {
  char *field = (char *)a + d->off, *end = NULL;
  char expect[160];
  if (d->type == T_STR) {
    if (d->choices && !in_choices(d->choices, v)) {
      snprintf(expect, sizeof expect, "one of %s", d->choices);
      return bad_value(d, v, expect);
    }
    if (strlen(v) >= d->size)
      return bad_value(d, v, "a shorter text");
    snprintf(field, d->size, "%s", v);
    return ACC_OK;
  }
  if (d->type == T_BOOL) {
    int b;
    if (parse_bool(v, &b))
      return bad_value(d, v, "true, false, 1 or 0");
    *(int *)field = b;
    return ACC_OK;
  }
  errno = 0;
  double x = d->type == T_DOUBLE ? strtod(v, &end) : (double)strtoll(v, &end, 10);
  if (!*v || *end || errno || !isfinite(x)) {
    snprintf(expect, sizeof expect, "%s", d->type == T_DOUBLE ? "a number" : "an integer");
    return bad_value(d, v, expect);
  }
  if (x < d->min || (d->type == T_INT && x > 2147483647.0)) {
    snprintf(expect, sizeof expect, "a value >= %g", d->min);
    return bad_value(d, v, expect);
  }
  if (d->type == T_DOUBLE)
    *(double *)field = x;
  else if (d->type == T_INT)
    *(int *)field = (int)x;
  else if (d->type == T_LONG)
    *(long *)field = (long)strtoll(v, NULL, 10);
  else
    *(long long *)field = strtoll(v, NULL, 10);
  return ACC_OK;
}

/* Transformers' defaults: each field's default text of ARGS, stored as the
 * command line would store it. */
void acc_training_args_init(acc_training_args_t *a) {
  memset(a, 0, sizeof *a);
  for (size_t i = 0; i < NARGS; i++)
    if (ARGS[i].dflt && set_field(a, &ARGS[i], ARGS[i].dflt) != ACC_OK)
      abort(); /* a default the table itself refuses: a bug in ARGS */
  a->greater_is_better = -1; /* None: follows metric_for_best_model */
}

/* --fp16 / --bf16 (TrainingArguments' booleans) are mixed_precision here;
 * as in TrainingArguments, at most one of them may be true. */
static acc_result_t set_half(acc_training_args_t *a, const char *name, const char *v) {
  int on;
  if (parse_bool(v, &on))
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                          "--%s: bad value '%s' (expected true, false, 1 or 0)", name, v);
  const char *other = !strcmp(name, "fp16") ? "bf16" : "fp16";
  if (on && !strcmp(a->mixed_precision, other))
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                          "--%s and --%s (or --mixed_precision %s) cannot both be set", name,
                          other, other);
  if (on)
    snprintf(a->mixed_precision, sizeof a->mixed_precision, "%s", name);
  else if (!strcmp(a->mixed_precision, name))
    snprintf(a->mixed_precision, sizeof a->mixed_precision, "no");
  return ACC_OK;
}

/* Arguments other versions of Transformers had, and what replaced them. */
static const struct {
  const char *name, *hint;
} RENAMED[] = {
    {"warmup_ratio", "use --warmup_steps: a value below 1 is a ratio of the total steps "
                     "(Transformers 5 deprecates --warmup_ratio for it)"},
    {"evaluation_strategy", "use --eval_strategy (its name since Transformers 4.41)"},
};

acc_result_t acc_training_args_set(acc_training_args_t *a, const char *name, const char *value) {
  if (!a || !name || !value)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_training_args_set: NULL argument");
  if (!strcmp(name, "fp16") || !strcmp(name, "bf16"))
    return set_half(a, name, value);
  int off;
  if (!strcmp(name, "resume_from_checkpoint") && !parse_bool(value, &off) && !off)
    value = ""; /* "false" means no resume, as None does */
  for (size_t i = 0; i < NARGS; i++)
    if (!strcmp(ARGS[i].name, name))
      return set_field(a, &ARGS[i], value);
  for (size_t i = 0; i < sizeof RENAMED / sizeof RENAMED[0]; i++)
    if (!strcmp(RENAMED[i].name, name))
      return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "unknown argument '%s': %s", name,
                            RENAMED[i].hint);
  return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                        "unknown argument '%s' (TrainingArguments has no such field)", name);
}

/* 1 when --NAME may stand without a value, meaning true (HfArgumentParser
 * gives boolean fields nargs="?" and const=True). */
static int takes_no_value(const char *name) {
  if (!strcmp(name, "fp16") || !strcmp(name, "bf16"))
    return 1;
  for (size_t i = 0; i < NARGS; i++)
    if (!strcmp(ARGS[i].name, name))
      return ARGS[i].type == T_BOOL;
  return 0;
}

acc_result_t acc_training_args_parse(acc_training_args_t *a, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0)
      return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                            "unexpected argument '%s' (arguments are --name value)", arg);
    char name[96];
    const char *eq = strchr(arg + 2, '='), *value;
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), arg + 2);
    if (eq)
      value = eq + 1;
    else if (takes_no_value(name) && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2)))
      value = "true";
    else if (i + 1 < argc)
      value = argv[++i];
    else
      return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "--%s: missing value", name);
    ACC_CHECK(acc_training_args_set(a, name, value));
  }
  return ACC_OK;
}

static acc_result_t invalid(const char *msg) {
  return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "%s", msg);
}

acc_result_t acc_training_args_validate(const acc_training_args_t *a) {
  if (!a)
    return invalid("acc_training_args_validate: NULL arguments");
  int eval_no = !strcmp(a->eval_strategy, "no");
  if (a->load_best_model_at_end && strcmp(a->save_strategy, "best") &&
      strcmp(a->eval_strategy, a->save_strategy))
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                          "--load_best_model_at_end requires the save and eval strategy to match "
                          "(eval_strategy %s, save_strategy %s)",
                          a->eval_strategy, a->save_strategy);
  if (a->load_best_model_at_end && !strcmp(a->eval_strategy, "steps") &&
      !strcmp(a->save_strategy, "steps") && a->eval_steps >= 1 && a->save_steps >= 1 &&
      fmod(a->save_steps, a->eval_steps) != 0)
    return invalid("--load_best_model_at_end requires --save_steps to be a round multiple of "
                   "--eval_steps");
  if ((!strcmp(a->save_strategy, "best") || a->early_stopping_patience > 0) && eval_no)
    return invalid("--save_strategy best and --early_stopping_patience need an --eval_strategy "
                   "(steps or epoch) to compare metrics");
  if (!strcmp(a->lr_scheduler_type, "cosine_with_min_lr") &&
      !strstr(a->lr_scheduler_kwargs, "min_lr"))
    return invalid("--lr_scheduler_type cosine_with_min_lr needs --lr_scheduler_kwargs "
                   "min_lr=X or min_lr_rate=X");
  if (a->adam_beta1 >= 1 || a->adam_beta2 >= 1)
    return invalid("--adam_beta1 and --adam_beta2 must be below 1");
  if (!strcmp(a->optim, "lomo") || !strcmp(a->optim, "adalomo")) {
    /* the update is fused into one backward pass: there is no window of
     * micro-steps whose gradients could add up, and no unscale between
     * backward and update (lomo-optim's LOMO/AdaLomo refuse both too) */
    if (a->gradient_accumulation_steps != 1)
      return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                            "--optim %s updates inside backward: --gradient_accumulation_steps "
                            "must be 1",
                            a->optim);
    if (!strcmp(a->mixed_precision, "fp16"))
      return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT,
                            "--optim %s: --mixed_precision fp16 is not supported (the loss scale "
                            "would reach the fused update); use bf16 or no",
                            a->optim);
    if (!strcmp(a->optim, "lomo") && a->weight_decay != 0)
      return invalid("--optim lomo has no weight decay (LOMO, Lv et al. 2023): set "
                     "--weight_decay 0 or use --optim adalomo");
  }
  if (!strcmp(a->optim, "galore_adamw") && !a->optim_target_modules[0])
    return invalid("--optim galore_adamw needs --optim_target_modules (names of the layers to "
                   "project, e.g. layers.0)");
  if (!strcmp(a->logging_strategy, "steps") && a->logging_steps <= 0)
    return invalid("--logging_strategy steps requires a non-zero --logging_steps (or "
                   "--logging_strategy epoch or no)");
  if (a->max_steps <= 0 && a->num_train_epochs <= 0)
    return invalid("--num_train_epochs must be > 0 when --max_steps is not set");
  return ACC_OK;
}

/* Python logging's number for a log_level name (passive = -1). */
static int level_number(const char *name) {
  static const struct {
    const char *name;
    int level;
  } L[] = {{"debug", ACC_LOG_DEBUG},
           {"info", ACC_LOG_INFO},
           {"warning", ACC_LOG_WARNING},
           {"error", ACC_LOG_ERROR},
           {"critical", ACC_LOG_CRITICAL}};
  for (size_t i = 0; i < sizeof L / sizeof L[0]; i++)
    if (!strcmp(name, L[i].name))
      return L[i].level;
  return ACC_LOG_PASSIVE;
}

int acc_training_args_process_log_level(const acc_training_args_t *a, int rank, int local_rank) {
  /* transformers' library default verbosity is WARNING */
  int main_level = level_number(a->log_level), replica = level_number(a->log_level_replica);
  if (main_level == ACC_LOG_PASSIVE)
    main_level = ACC_LOG_WARNING;
  if (replica == ACC_LOG_PASSIVE)
    replica = ACC_LOG_WARNING;
  int is_main = a->log_on_each_node ? local_rank == 0 : rank == 0;
  return is_main ? main_level : replica;
}

acc_t *acc_trainer_accelerator_new(const acc_training_args_t *a) {
  if (!a) {
    acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_trainer_accelerator_new: NULL arguments");
    return NULL;
  }
  acc_config_t cfg = ACC_CONFIG_INIT;
  /* "no" (the default) leaves the choice to the launcher
   * (ACCELERATE_MIXED_PRECISION), as Accelerator(mixed_precision=None) */
  cfg.mixed_precision = strcmp(a->mixed_precision, "no") ? a->mixed_precision : NULL;
  cfg.gradient_accumulation_steps = a->gradient_accumulation_steps;
  cfg.seed = a->seed;
  return acc_new(&cfg);
}
