/*
 * acc_trainer_internal.h — the Trainer's state shared by its files
 * (acc_trainer*.c, acc_callbacks.c, acc_early_stopping.c). Not installed.
 */
#ifndef ACC_TRAINER_INTERNAL_H
#define ACC_TRAINER_INTERNAL_H

#include <jansson.h>

#include "acc_internal.h"

#define TR_MAX_CALLBACKS 16

/* The loop's position and accumulators: registered for checkpointing
 * ("trainer.loop"), so a resumed run continues where the saved one was.
 * Fixed-size fields only (the bytes are the checkpoint's format). */
typedef struct {
  int64_t epoch_index;    /* epoch the loop is in */
  int64_t batch_in_epoch; /* batches of that epoch done */
  int64_t global_step;
  int64_t sched_step; /* optimizer steps the scheduler counted (skipped ones excluded) */
  int64_t last_logged_step;
  int64_t es_counter; /* EarlyStoppingCallback's early_stopping_patience_counter */
  double tr_loss;     /* sum of step losses since the last log */
  double total_loss;  /* sum of every step loss: train_loss */
  double grad_norm;   /* of the last optimizer step (NaN before) */
  /* state.best_metric / has_best_metric / best_global_step: the same on
   * every rank (early stopping must stop every rank at the same step) */
  double best_metric;
  int64_t has_best_metric, best_global_step;
} tr_loop_t;

struct acc_trainer {
  acc_t *acc;
  acc_training_args_t args;
  acc_model_t *model;
  const acc_dataset_t *train, *eval;
  acc_optim_t *opt;     /* sgd, adamw */
  acc_galore_t *galore; /* galore_adamw */
  acc_lomo_t *lomo;     /* lomo, adalomo: the update happens in training_step */
  acc_trainer_state_t state;
  acc_trainer_control_t control;
  acc_trainer_callback_t cbs[TR_MAX_CALLBACKS];
  int ncbs;
  acc_compute_metrics_fn compute_metrics;
  void *metrics_user;
  acc_compute_loss_fn compute_loss;
  acc_training_step_fn training_step;
  acc_prediction_step_fn prediction_step;
  void *steps_user;
  tr_loop_t loop;
  long warmup;          /* num_warmup_steps */
  size_t train_batches; /* per epoch, per rank */
  double lr;            /* the learning rate of the next step */
  int log_level;        /* this process's (get_process_log_level) */
  float *xb;            /* one batch: max batch × input_dim */
  int64_t *yb, *preds;  /* max batch */
  acc_progress_t *bar;
  int grads_on_device; /* the model's params/grads are device memory (a GPU model) */
};

/* The model's gradients are device memory: never read them on the host. */
static inline int tr_grads_on_device(const acc_trainer_t *tr) {
  return tr->grads_on_device;
}

/* The number after `key=` in a "k=v, k=v" text (optim_args,
 * lr_scheduler_kwargs), or NaN when absent (acc_sched.c). */
double tr_kwarg(const char *text, const char *key);

/* Add the EarlyStoppingCallback of args.early_stopping_patience
 * (acc_early_stopping.c). */
acc_result_t tr_add_early_stopping(acc_trainer_t *tr);

/* Logging (acc_trainer_log.c): append `logs` to log_history, print it as
 * Transformers does (main process) and fire on_log. */
acc_result_t tr_log(acc_trainer_t *tr, acc_metrics_t *logs);
/* Python's repr of a float (shortest round-trip text) into out. */
void tr_float_repr(double v, char *out, size_t len);

/* trainer_state.json's text (acc_trainer_json.c): reals go into the
 * document as placeholders (tr_json_real: a new reference, json_null for
 * a non-finite value, NULL when out of memory) that tr_json_dumps
 * replaces by their Python repr; it returns json.dumps(indent=2,
 * sort_keys=True) + "\n" (caller frees), or NULL when out of memory or
 * a placeholder is missing. */
typedef struct {
  double *v;
  size_t n, cap;
} tr_reals_t;
json_t *tr_json_real(tr_reals_t *r, double v);
char *tr_json_dumps(const json_t *o, const tr_reals_t *r);
void tr_reals_free(tr_reals_t *r);

/* Checkpoints (acc_trainer_ckpt.c). */
acc_result_t tr_resume(acc_trainer_t *tr, const char *spec);
/* state.log_history from a parsed trainer_state.json `o` (its
 * "log_history" array; anything else is ignored, entries that are not
 * objects are empty). Replaces the old history. tests/fuzz feeds it. */
void tr_history_from_json(acc_trainer_state_t *st, const json_t *o);
acc_result_t tr_load_best(acc_trainer_t *tr);
/* After an evaluation: update best_metric; *is_best = 1 when the metric is
 * a new best. ACC_ERR_INVALID_ARGUMENT, naming the metrics computed, when
 * the metric compared is not among them. */
acc_result_t tr_determine_best(acc_trainer_t *tr, const acc_metrics_t *metrics, int *is_best);
/* 1 when the Trainer tracks a best metric (metric_for_best_model,
 * load_best_model_at_end, save_strategy best or early stopping). */
int tr_tracks_best(const acc_trainer_t *tr);
/* The metric compared for best / early stopping ("eval_loss", ...) and
 * whether greater is better. */
void tr_best_metric_key(const acc_trainer_t *tr, char *key, size_t len, int *greater);

#endif /* ACC_TRAINER_INTERNAL_H */
