/*
 * acc_sched.c — the learning-rate schedules of transformers.get_scheduler
 * (transformers/optimization.py), as the LambdaLR multipliers they are:
 * lr(step) = learning_rate * lambda(step), step = optimizer steps taken.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc_trainer_internal.h"

double tr_kwarg(const char *text, const char *key) {
  size_t n = strlen(key);
  for (const char *p = text; (p = strstr(p, key)) != NULL; p += n) {
    int starts = p == text || p[-1] == ' ' || p[-1] == ',';
    if (starts && p[n] == '=')
      return strtod(p + n + 1, NULL);
  }
  return NAN;
}

static double warmup_ramp(long step, long warmup) {
  return (double)step / (double)(warmup > 1 ? warmup : 1);
}

/* Fraction of the decay phase done (after warmup). */
static double progress(long step, long warmup, long total) {
  long span = total - warmup;
  return (double)(step - warmup) / (double)(span > 1 ? span : 1);
}

double acc_lr_lambda(const acc_training_args_t *a, long step, long warmup, long total) {
  const char *t = a->lr_scheduler_type;
  if (!strcmp(t, "constant"))
    return 1.0;
  if (step < warmup && strcmp(t, "inverse_sqrt"))
    return warmup_ramp(step, warmup);
  if (!strcmp(t, "constant_with_warmup"))
    return 1.0;
  if (!strcmp(t, "linear")) {
    long span = total - warmup;
    double f = (double)(total - step) / (double)(span > 1 ? span : 1);
    return f > 0.0 ? f : 0.0;
  }
  if (!strcmp(t, "cosine")) {
    double f = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress(step, warmup, total)));
    return f > 0.0 ? f : 0.0;
  }
  if (!strcmp(t, "cosine_with_min_lr")) {
    double rate = tr_kwarg(a->lr_scheduler_kwargs, "min_lr_rate");
    if (isnan(rate))
      rate = tr_kwarg(a->lr_scheduler_kwargs, "min_lr") / a->learning_rate;
    double f = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress(step, warmup, total)));
    return f * (1.0 - rate) + rate; /* NaN without min_lr / min_lr_rate */
  }
  if (!strcmp(t, "inverse_sqrt")) {
    double ts = tr_kwarg(a->lr_scheduler_kwargs, "timescale");
    if (isnan(ts))
      ts = warmup ? (double)warmup : 10000.0;
    if (step < warmup)
      return warmup_ramp(step, warmup);
    return 1.0 / sqrt(((double)step + (ts - (double)warmup)) / ts);
  }
  return NAN;
}
