/*
 * acc_callbacks.c — TrainerCallback dispatch (Transformers'
 * CallbackHandler): registering callbacks and firing their events, and
 * the best-metric key they and the evaluation share. The callbacks
 * themselves live above it (acc_early_stopping.c), so that logging, which
 * fires on_log, stays below them.
 */
#include <stdio.h>
#include <string.h>

#include "acc_callbacks.h"
#include "acc_trainer_internal.h"

void tr_fire(acc_trainer_t *tr, size_t which, const acc_metrics_t *logs) {
  for (int i = 0; i < tr->ncbs; i++) {
    acc_trainer_event_fn fn;
    memcpy(&fn, (const char *)&tr->cbs[i] + which, sizeof fn);
    if (fn)
      fn(&tr->args, &tr->state, &tr->control, logs, tr->cbs[i].user);
  }
}

acc_result_t acc_trainer_add_callback(acc_trainer_t *tr, const acc_trainer_callback_t *cb) {
  if (!tr || !cb)
    return acc__set_error(tr ? tr->acc : NULL, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_add_callback: NULL trainer or callback");
  if (tr->ncbs == TR_MAX_CALLBACKS)
    return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_add_callback: at most %d callbacks", TR_MAX_CALLBACKS);
  tr->cbs[tr->ncbs++] = *cb;
  if (cb->on_init_end)
    cb->on_init_end(&tr->args, &tr->state, &tr->control, NULL, cb->user);
  return ACC_OK;
}

void tr_best_metric_key(const acc_trainer_t *tr, char *key, size_t len, int *greater) {
  const char *m = tr->args.metric_for_best_model[0] ? tr->args.metric_for_best_model : "loss";
  snprintf(key, len, "%s%s", strncmp(m, "eval_", 5) ? "eval_" : "", m);
  size_t n = strlen(m);
  *greater = tr->args.greater_is_better >= 0 ? tr->args.greater_is_better
                                             : !(n >= 4 && !strcmp(m + n - 4, "loss"));
}
