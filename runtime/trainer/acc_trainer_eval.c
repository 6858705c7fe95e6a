/*
 * acc_trainer_eval.c — Trainer.evaluate: the evaluation loop over the
 * eval dataset's distributed sampler (no shuffling), prediction_step per
 * batch, gather_for_metrics of predictions, labels and per-sample losses
 * (each sample once), compute_metrics, the "eval_" prefix and
 * speed_metrics (eval_runtime rounded to 4 places, samples and steps per
 * second to 3), as transformers' evaluation_loop does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_callbacks.h"
#include "acc_trainer_internal.h"
#include "nbf_util.h"

void acc_accuracy_metric(const int64_t *preds, const int64_t *labels, size_t n, acc_metrics_t *out,
                         void *user) {
  (void)user;
  size_t ok = 0;
  for (size_t i = 0; i < n; i++)
    ok += preds[i] == labels[i];
  acc_metrics_put(out, "accuracy", n ? (double)ok / (double)n : 0.0);
}

float acc_trainer_prediction_step(acc_trainer_t *tr, const float *x, const int64_t *y, int batch,
                                  int64_t *preds) {
  float loss = tr->compute_loss ? tr->compute_loss(tr, x, y, batch, 0, tr->steps_user)
                                : acc_trainer_compute_loss(tr, x, y, batch, 0);
  tr->model->predict(tr->model->self, preds);
  return loss;
}

typedef struct {
  int64_t *preds, *labels, *losses; /* gathered: losses hold f64 bits */
  size_t n;
} gathered_t;

/* Gather one batch's predictions, labels and losses onto every rank. */
static acc_result_t gather_batch(acc_trainer_t *tr, gathered_t *g, const int64_t *y, int batch,
                                 float loss, int last, size_t dataset_n) {
  int64_t lbits[batch];
  double dl = (double)loss;
  for (int i = 0; i < batch; i++)
    memcpy(&lbits[i], &dl, sizeof dl);
  size_t k =
      acc_gather_for_metrics(tr->acc, tr->preds, (size_t)batch, g->preds + g->n, last, dataset_n);
  if (k == (size_t)-1 ||
      acc_gather_for_metrics(tr->acc, y, (size_t)batch, g->labels + g->n, last, dataset_n) != k ||
      acc_gather_for_metrics(tr->acc, lbits, (size_t)batch, g->losses + g->n, last, dataset_n) != k)
    return ACC_ERR_PEER; /* the reason is in acc_last_error */
  g->n += k;
  return ACC_OK;
}

/* Run the evaluation loop into `g`; fills steps. */
static acc_result_t eval_loop(acc_trainer_t *tr, gathered_t *g, size_t *steps) {
  const acc_dataset_t *ds = tr->eval;
  int bs = tr->args.per_device_eval_batch_size, dim = ds->dim;
  acc_sampler_t *s = acc_sampler_new(tr->acc, ds->n, (size_t)bs, 0, 0);
  if (!s)
    return acc__set_error(tr->acc, ACC_ERR_NO_MEMORY, "Trainer.evaluate: no memory");
  acc_result_t r = ACC_OK;
  size_t nb = acc_sampler_num_batches(s);
  for (size_t b = 0; b < nb && r == ACC_OK; b++) {
    size_t len;
    const size_t *idx = acc_sampler_batch(s, b, &len);
    for (size_t i = 0; i < len; i++) {
      memcpy(tr->xb + i * (size_t)dim, ds->x + idx[i] * (size_t)dim, (size_t)dim * sizeof(float));
      tr->yb[i] = ds->y[idx[i]];
    }
    float loss = tr->prediction_step
                     ? tr->prediction_step(tr, tr->xb, tr->yb, (int)len, tr->preds, tr->steps_user)
                     : acc_trainer_prediction_step(tr, tr->xb, tr->yb, (int)len, tr->preds);
    if (isnan(loss))
      r = acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                         "Trainer.evaluate: the loss of eval batch %zu is NaN (%s)", b,
                         acc_last_error(NULL));
    else
      r = gather_batch(tr, g, tr->yb, (int)len, loss, b + 1 == nb, ds->n);
  }
  *steps = nb;
  acc_sampler_destroy(&s);
  return r;
}

acc_result_t acc_trainer_evaluate(acc_trainer_t *tr, acc_metrics_t *out) {
  if (!tr || !tr->eval)
    return acc__set_error(tr ? tr->acc : NULL, ACC_ERR_INVALID_ARGUMENT,
                          "Trainer.evaluate: the Trainer has no eval dataset");
  double t0 = nbf_now_s();
  size_t cap =
      tr->eval->n + (size_t)acc_world_size(tr->acc) * (size_t)tr->args.per_device_eval_batch_size;
  gathered_t g = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 8), 0};
  size_t steps = 0;
  acc_result_t r = g.preds && g.labels && g.losses
                       ? eval_loop(tr, &g, &steps)
                       : acc__set_error(tr->acc, ACC_ERR_NO_MEMORY, "Trainer.evaluate: no memory");
  acc_metrics_t m = {0}, user = {0};
  if (r == ACC_OK) {
    double sum = 0;
    for (size_t i = 0; i < g.n; i++) {
      double l;
      memcpy(&l, &g.losses[i], sizeof l);
      sum += l;
    }
    acc_metrics_put(&m, "eval_loss", g.n ? sum / (double)g.n : NAN);
    if (tr->compute_metrics)
      tr->compute_metrics(g.preds, g.labels, g.n, &user, tr->metrics_user);
    char key[64];
    for (int i = 0; i < user.count; i++) {
      snprintf(key, sizeof key, "eval_%s", user.name[i]);
      acc_metrics_put(&m, key, user.value[i]);
    }
    double rt = nbf_now_s() - t0;
    acc_metrics_put(&m, "eval_runtime", round(rt * 1e4) / 1e4);
    acc_metrics_put(&m, "eval_samples_per_second", round((double)tr->eval->n / rt * 1e3) / 1e3);
    acc_metrics_put(&m, "eval_steps_per_second", round((double)steps / rt * 1e3) / 1e3);
    r = tr_log(tr, &m);
  }
  free(g.preds);
  free(g.labels);
  free(g.losses);
  if (r != ACC_OK)
    return r;
  TR_FIRE(tr, on_evaluate, &m);
  if (out)
    *out = m;
  return ACC_OK;
}

int tr_tracks_best(const acc_trainer_t *tr) {
  const acc_training_args_t *a = &tr->args;
  return a->metric_for_best_model[0] || a->load_best_model_at_end ||
         !strcmp(a->save_strategy, "best") || a->early_stopping_patience > 0;
}

/* Transformers' _determine_best_metric raises a KeyError naming the
 * metrics an evaluation produced when metric_for_best_model is not among
 * them; so does this, instead of never finding a best checkpoint. */
static acc_result_t unknown_metric(acc_trainer_t *tr, const char *key, const acc_metrics_t *m) {
  char names[ACC_METRICS_MAX * 50] = "";
  size_t len = 0;
  for (int i = 0; i < m->count && len < sizeof names; i++)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", m->name[i]);
  return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                        "--metric_for_best_model is '%s', which is not found in the evaluation "
                        "metrics. The available evaluation metrics are: %s. Make compute_metrics "
                        "return '%s' or choose another --metric_for_best_model",
                        key, names, key);
}

acc_result_t tr_determine_best(acc_trainer_t *tr, const acc_metrics_t *metrics, int *is_best) {
  char key[80];
  int greater;
  *is_best = 0;
  tr_best_metric_key(tr, key, sizeof key, &greater);
  double v = acc_metrics_get(metrics, key);
  if (isnan(v)) {
    for (int i = 0; i < metrics->count; i++)
      if (!strcmp(metrics->name[i], key))
        return ACC_OK; /* present but NaN: never a best, as NaN > x is false in Python */
    return unknown_metric(tr, key, metrics);
  }
  acc_trainer_state_t *st = &tr->state;
  if (st->has_best_metric && !(greater ? v > st->best_metric : v < st->best_metric))
    return ACC_OK;
  st->has_best_metric = 1;
  st->best_metric = v;
  *is_best = 1;
  return ACC_OK;
}
