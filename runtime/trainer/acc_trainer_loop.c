/*
 * acc_trainer_loop.c — Trainer.train: the epochs, the micro-steps and
 * optimizer steps, and _maybe_log_save_evaluate (see acc_trainer.c for
 * the order of a step). The loop's position lives in tr->loop, which
 * checkpoints carry, so a resumed run skips the batches already done
 * (as Trainer does with steps_trained_in_current_epoch) and continues bit
 * for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_optim_cuda.h"
#include "acc_callbacks.h"
#include "acc_trainer_internal.h"
#include "nbf_util.h"

/* An interval in steps: a ratio (< 1) of max_steps rounds up. */
static long interval(double v, long max_steps) {
  return v > 0 && v < 1 ? (long)ceil(v * (double)max_steps) : (long)v;
}

/* max_steps, epochs, logging/eval/save intervals and warmup into state. */
static void setup_steps(acc_trainer_t *tr) {
  const acc_training_args_t *a = &tr->args;
  acc_trainer_state_t *st = &tr->state;
  long per_epoch = (long)tr->train_batches / a->gradient_accumulation_steps;
  if (per_epoch < 1)
    per_epoch = 1;
  if (a->max_steps > 0) {
    st->max_steps = a->max_steps;
    st->num_train_epochs = (int)((a->max_steps + per_epoch - 1) / per_epoch);
  } else {
    st->max_steps = (long)ceil(a->num_train_epochs * (double)per_epoch);
    st->num_train_epochs = (int)ceil(a->num_train_epochs);
  }
  st->logging_steps = interval(a->logging_steps, st->max_steps);
  st->eval_steps = a->eval_steps > 0 ? interval(a->eval_steps, st->max_steps) : st->logging_steps;
  st->save_steps = interval(a->save_steps, st->max_steps);
  st->train_batch_size = a->per_device_train_batch_size;
  tr->warmup = interval(a->warmup_steps, st->max_steps);
}

/* torch.nn.utils.clip_grad_norm_ over the flat gradient buffer; returns
 * the total norm before clipping (as f32, what torch returns). */
static double clip_grad_norm(float *g, size_t n, double max_norm) {
  double ss = acc__sumsq(g, n);
  float norm = (float)sqrt(ss);
  if (max_norm > 0 && isfinite(norm)) {
    float coef = (float)(max_norm / ((double)norm + 1e-6));
    if (coef < 1.0f) /* torch multiplies by min(coef, 1): a factor 1 changes nothing */
      for (size_t j = 0; j < n; j++)
        g[j] *= coef;
  }
  return (double)norm;
}

/* clip_grad_norm over the model's gradients wherever they are: a device
 * model's (acc_mlp_model on a GPU) are clipped by a kernel on the
 * accelerator's stream, never read on the host. *norm = the total norm;
 * a CUDA failure is an error. */
static acc_result_t clip_gradients(acc_trainer_t *tr, double *norm) {
  acc_model_t *m = tr->model;
  if (!tr_grads_on_device(tr)) {
    *norm = clip_grad_norm(m->grads, m->num_params, tr->args.max_grad_norm);
    return ACC_OK;
  }
  float *scratch = acc__device_scratch(tr->acc);
  if (!scratch)
    return ACC_ERR_BACKEND; /* the error is in acc_last_error */
  char err[512];
  acc_result_t r = acc_optim_cuda_clip_norm(m->grads, m->num_params, tr->args.max_grad_norm,
                                            scratch, tr->acc->stream, norm, err, sizeof err);
  if (r != ACC_OK)
    return acc__set_error(tr->acc, r, "Trainer: clipping the gradients on device %d: %s",
                          acc_device(tr->acc), err);
  return ACC_OK;
}

/* Set the learning rate of scheduler step sched_step on the optimizer. */
static void apply_lr(acc_trainer_t *tr) {
  tr->lr = tr->args.learning_rate *
           acc_lr_lambda(&tr->args, (long)tr->loop.sched_step, tr->warmup, tr->state.max_steps);
  acc_optim_set_lr(tr->opt, (float)tr->lr);
  acc_galore_set_lr(tr->galore, (float)tr->lr);
  acc_lomo_set_lr(tr->lomo, (float)tr->lr);
}

/* scheduler.step() after an optimizer step that was taken. */
static acc_result_t advance_schedule(acc_trainer_t *tr) {
  tr->loop.sched_step++;
  apply_lr(tr);
  return ACC_OK;
}

/* The optimizer step of a sync micro-step. */
static acc_result_t optimizer_step(acc_trainer_t *tr) {
  acc_model_t *m = tr->model;
  if (tr->lomo) { /* updated in backward already */
    tr->loop.grad_norm = acc_lomo_grad_norm(tr->lomo);
    return advance_schedule(tr);
  }
  int finite = acc_unscale_gradients(tr->acc, m->grads, m->num_params);
  if (finite < 0)
    return ACC_ERR_BACKEND;
  ACC_CHECK(clip_gradients(tr, &tr->loop.grad_norm));
  int stepped;
  if (tr->galore) { /* GradScaler's step and update around GaLore's step */
    if (finite)
      ACC_CHECK(acc_galore_step(tr->galore));
    acc_update_loss_scale(tr->acc, !finite);
    memset(m->grads, 0, m->num_params * sizeof(float));
    stepped = finite;
  } else {
    stepped = acc_optim_step(tr->acc, tr->opt);
    if (stepped < 0)
      return ACC_ERR_BACKEND; /* the error is in acc_last_error */
    acc_optim_zero_grad(tr->acc, tr->opt);
  }
  return stepped ? advance_schedule(tr) : ACC_OK;
}

/* The training loss since the last log, averaged over ranks and steps. */
static acc_result_t log_loss(acc_trainer_t *tr) {
  double l = tr->loop.tr_loss;
  ACC_CHECK(acc_all_reduce(tr->acc, &l, 1, ACC_F64, ACC_AVG));
  long steps = (long)(tr->loop.global_step - tr->loop.last_logged_step);
  acc_metrics_t logs = {0};
  acc_metrics_put(&logs, "loss", round(l / (double)(steps > 0 ? steps : 1) * 1e4) / 1e4);
  if (!isnan(tr->loop.grad_norm))
    acc_metrics_put(&logs, "grad_norm", tr->loop.grad_norm);
  acc_metrics_put(&logs, "learning_rate", tr->lr);
  tr->loop.tr_loss = 0;
  tr->loop.last_logged_step = tr->loop.global_step;
  acc_log_scalar(tr->acc, "loss", (long)tr->loop.global_step, l / (double)(steps > 0 ? steps : 1));
  return tr_log(tr, &logs);
}

/* _maybe_log_save_evaluate: act on the control flags, then clear them. */
static acc_result_t log_save_evaluate(acc_trainer_t *tr) {
  acc_trainer_control_t *c = &tr->control;
  /* CallbackHandler.on_log / on_evaluate clear their flag before the
   * event, so a checkpoint's TrainerControl shows only should_save */
  int do_log = c->should_log, do_eval = c->should_evaluate;
  c->should_log = c->should_evaluate = 0;
  if (do_log && tr->loop.global_step > tr->loop.last_logged_step)
    ACC_CHECK(log_loss(tr));
  if (do_eval && tr->eval) {
    acc_metrics_t m;
    ACC_CHECK(acc_trainer_evaluate(tr, &m));
    /* _determine_best_metric, after the callbacks saw the evaluation */
    int best = 0;
    if (tr_tracks_best(tr))
      ACC_CHECK(tr_determine_best(tr, &m, &best));
    if (best) {
      tr->state.best_global_step = tr->state.global_step;
      c->should_save |= !strcmp(tr->args.save_strategy, "best");
    }
  }
  if (c->should_save)
    ACC_CHECK(acc_trainer_save_checkpoint(tr));
  c->should_log = c->should_evaluate = c->should_save = 0;
  return ACC_OK;
}

/* DefaultFlowCallback.on_step_end: which of log/evaluate/save are due. */
static void flow_on_step(acc_trainer_t *tr) {
  const acc_training_args_t *a = &tr->args;
  const acc_trainer_state_t *st = &tr->state;
  long s = st->global_step;
  acc_trainer_control_t *c = &tr->control;
  if (!strcmp(a->logging_strategy, "steps") && st->logging_steps > 0 && s % st->logging_steps == 0)
    c->should_log = 1;
  if (!strcmp(a->eval_strategy, "steps") && st->eval_steps > 0 && s % st->eval_steps == 0)
    c->should_evaluate = 1;
  if (!strcmp(a->save_strategy, "steps") && st->save_steps > 0 && s % st->save_steps == 0)
    c->should_save = 1;
  if (s >= st->max_steps) {
    c->should_training_stop = 1;
    if (!strcmp(a->save_strategy, "steps")) /* the final state, unless an epoch save follows */
      c->should_save = 1;
  }
}

/* One batch (micro-step) of epoch `epoch`. */
static acc_result_t micro_step(acc_trainer_t *tr, acc_sampler_t *s, size_t b) {
  const acc_dataset_t *ds = tr->train;
  int accum = tr->args.gradient_accumulation_steps, dim = ds->dim;
  size_t len;
  const size_t *idx = acc_sampler_batch(s, b, &len);
  for (size_t i = 0; i < len; i++) {
    memcpy(tr->xb + i * (size_t)dim, ds->x + idx[i] * (size_t)dim, (size_t)dim * sizeof(float));
    tr->yb[i] = ds->y[idx[i]];
  }
  if (b % (size_t)accum == 0)
    TR_FIRE(tr, on_step_begin, NULL);
  acc_accumulate_begin(tr->acc, b + 1 == tr->train_batches);
  int64_t fused = acc_lomo_num_steps(tr->lomo);
  float loss = tr->training_step ? tr->training_step(tr, tr->xb, tr->yb, (int)len, tr->steps_user)
                                 : acc_trainer_training_step(tr, tr->xb, tr->yb, (int)len);
  if (tr->lomo && !isnan(loss) && acc_lomo_num_steps(tr->lomo) != fused + 1)
    return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                          "Trainer.training_step: with --optim %s the update is fused into "
                          "backward, but this step ran none: an overriding training_step must "
                          "call acc_trainer_training_step",
                          tr->args.optim);
  if (isnan(loss))
    return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                          "Trainer.training_step: NaN loss at epoch %lld batch %zu (%s)",
                          (long long)tr->loop.epoch_index, b, acc_last_error(NULL));
  tr->loop.tr_loss += (double)loss / accum;
  tr->loop.total_loss += (double)loss / accum;
  if (!tr->lomo) /* LOMO all-reduced each layer inside backward */
    ACC_CHECK(acc_backward(tr->acc, tr->model->grads, tr->model->num_params));
  int sync = acc_sync_gradients(tr->acc);
  if (sync)
    ACC_CHECK(optimizer_step(tr));
  acc_accumulate_end(tr->acc);
  tr->loop.batch_in_epoch = (int64_t)b + 1;
  if (!sync) {
    TR_FIRE(tr, on_substep_end, NULL);
    return ACC_OK;
  }
  tr->state.global_step = (long)++tr->loop.global_step;
  tr->state.epoch = (double)tr->loop.epoch_index + (double)(b + 1) / (double)tr->train_batches;
  if (tr->bar)
    acc_progress_update(tr->bar, 1, NULL);
  flow_on_step(tr);
  TR_FIRE(tr, on_step_end, NULL);
  return log_save_evaluate(tr);
}

/* The rest of epoch `e` from the loop's position, and its end. */
static acc_result_t run_epoch(acc_trainer_t *tr, acc_sampler_t *s) {
  int64_t e = tr->loop.epoch_index;
  acc_sampler_set_epoch(s, (int)e);
  TR_FIRE(tr, on_epoch_begin, NULL);
  for (size_t b = (size_t)tr->loop.batch_in_epoch; b < tr->train_batches; b++) {
    ACC_CHECK(micro_step(tr, s, b));
    if (tr->control.should_epoch_stop || tr->control.should_training_stop)
      break;
  }
  tr->loop.epoch_index = e + 1;
  tr->loop.batch_in_epoch = 0;
  tr->control.should_epoch_stop = 0;
  /* DefaultFlowCallback.on_epoch_end */
  const acc_training_args_t *a = &tr->args;
  tr->control.should_log |= !strcmp(a->logging_strategy, "epoch");
  tr->control.should_evaluate |= !strcmp(a->eval_strategy, "epoch");
  tr->control.should_save |= !strcmp(a->save_strategy, "epoch");
  TR_FIRE(tr, on_epoch_end, NULL);
  return log_save_evaluate(tr);
}

static void log_start(acc_trainer_t *tr) {
  const acc_trainer_state_t *st = &tr->state;
  const acc_training_args_t *a = &tr->args;
  acc_trainer_log(tr, ACC_LOG_INFO, "***** Running training *****");
  acc_trainer_log(tr, ACC_LOG_INFO, "  Num examples = %zu", tr->train->n);
  acc_trainer_log(tr, ACC_LOG_INFO, "  Num Epochs = %d", st->num_train_epochs);
  acc_trainer_log(tr, ACC_LOG_INFO, "  Instantaneous batch size per device = %d",
                  a->per_device_train_batch_size);
  acc_trainer_log(
      tr, ACC_LOG_INFO, "  Total train batch size (w. parallel, distributed & accumulation) = %d",
      a->per_device_train_batch_size * a->gradient_accumulation_steps * acc_world_size(tr->acc));
  acc_trainer_log(tr, ACC_LOG_INFO, "  Gradient Accumulation steps = %d",
                  a->gradient_accumulation_steps);
  acc_trainer_log(tr, ACC_LOG_INFO, "  Total optimization steps = %ld", st->max_steps);
  acc_trainer_log(tr, ACC_LOG_INFO, "  Number of trainable parameters = %zu",
                  tr->model->num_params);
}

/* The train_* metrics line and on_train_end. */
static acc_result_t finish(acc_trainer_t *tr, double t0) {
  if (tr->args.load_best_model_at_end && tr->state.best_model_checkpoint[0])
    ACC_CHECK(tr_load_best(tr));
  double rt = nbf_now_s() - t0, gs = (double)tr->loop.global_step;
  double samples = gs * tr->args.per_device_train_batch_size *
                   tr->args.gradient_accumulation_steps * acc_world_size(tr->acc);
  acc_metrics_t m = {0};
  acc_metrics_put(&m, "train_runtime", round(rt * 1e4) / 1e4);
  acc_metrics_put(&m, "train_samples_per_second", round(samples / rt * 1e3) / 1e3);
  acc_metrics_put(&m, "train_steps_per_second", round(gs / rt * 1e3) / 1e3);
  double total = tr->loop.total_loss;
  ACC_CHECK(acc_all_reduce(tr->acc, &total, 1, ACC_F64, ACC_AVG));
  acc_metrics_put(&m, "train_loss", gs > 0 ? total / gs : 0.0);
  ACC_CHECK(tr_log(tr, &m));
  TR_FIRE(tr, on_train_end, NULL);
  acc_log_flush(tr->acc);
  return ACC_OK;
}

acc_result_t acc_trainer_train(acc_trainer_t *tr) {
  if (!tr)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_trainer_train: NULL trainer");
  double t0 = nbf_now_s();
  acc_sampler_t *s =
      acc_sampler_new(tr->acc, tr->train->n, (size_t)tr->args.per_device_train_batch_size, 1,
                      (unsigned long long)tr->args.seed);
  if (!s)
    return acc__set_error(tr->acc, ACC_ERR_NO_MEMORY, "Trainer.train: no memory for the sampler");
  tr->train_batches = acc_sampler_num_batches(s);
  setup_steps(tr);
  acc_result_t r = ACC_OK;
  if (tr->args.resume_from_checkpoint[0])
    ACC_CHECK_GOTO(tr_resume(tr, tr->args.resume_from_checkpoint), out);
  apply_lr(tr);
  log_start(tr);
  if (!tr->args.disable_tqdm && acc_is_main_process(tr->acc))
    tr->bar = acc_progress_new(tr->acc, "train", (size_t)tr->state.max_steps);
  if (tr->bar && tr->loop.global_step)
    acc_progress_update(tr->bar, (size_t)tr->loop.global_step, NULL);
  tr->control.should_training_stop = tr->loop.global_step >= tr->state.max_steps;
  /* _activate_neftune for the training loop only */
  acc_embedding_set_neftune_noise_alpha(tr->model->input_embeddings, tr->args.neftune_noise_alpha);
  TR_FIRE(tr, on_train_begin, NULL);
  while (!tr->control.should_training_stop && tr->loop.epoch_index < tr->state.num_train_epochs)
    ACC_CHECK_GOTO(run_epoch(tr, s), out);
  acc_progress_destroy(&tr->bar);
  r = finish(tr, t0);
out:
  acc_embedding_set_neftune_noise_alpha(tr->model->input_embeddings, 0.0);
  acc_progress_destroy(&tr->bar);
  acc_sampler_destroy(&s);
  return r;
}
