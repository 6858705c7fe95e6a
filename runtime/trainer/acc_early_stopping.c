/*
 * acc_early_stopping.c — Transformers' EarlyStoppingCallback:
 *   on_evaluate: the metric (metric_for_best_model, "eval_" prefixed)
 *   improves when state.best_metric is None or it beats best_metric (by
 *   greater_is_better) by more than early_stopping_threshold; then the
 *   patience counter resets, else it grows; at early_stopping_patience
 *   control.should_training_stop is set.
 * The counter lives in the Trainer's loop state so checkpoints keep it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "acc_trainer_internal.h"

static void early_stopping_on_evaluate(const acc_training_args_t *args, acc_trainer_state_t *state,
                                       acc_trainer_control_t *control, const acc_metrics_t *logs,
                                       void *user) {
  acc_trainer_t *tr = user;
  char key[80];
  int greater;
  tr_best_metric_key(tr, key, sizeof key, &greater);
  double v = acc_metrics_get(logs, key);
  if (isnan(v)) {
    acc_trainer_log(tr, ACC_LOG_WARNING,
                    "early stopping required metric_for_best_model, but did not find %s so "
                    "early stopping is disabled",
                    key);
    return;
  }
  int better = greater ? v > state->best_metric : v < state->best_metric;
  if (!state->has_best_metric ||
      (better && fabs(v - state->best_metric) > args->early_stopping_threshold))
    tr->loop.es_counter = 0;
  else
    tr->loop.es_counter++;
  if (tr->loop.es_counter >= args->early_stopping_patience)
    control->should_training_stop = 1;
}

acc_result_t tr_add_early_stopping(acc_trainer_t *tr) {
  acc_trainer_callback_t cb = {.on_evaluate = early_stopping_on_evaluate, .user = tr};
  return acc_trainer_add_callback(tr, &cb);
}
