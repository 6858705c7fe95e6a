/*
 * acc_trainer.c — the Trainer: construction, the default steps, and the
 * training loop of transformers' Trainer._inner_training_loop on the
 * Accelerator:
 *   steps per epoch = max(batches // gradient_accumulation_steps, 1);
 *   max_steps = args.max_steps, or ceil(num_train_epochs × steps per epoch);
 *   per micro-step: on_step_begin (first of a window), training_step,
 *   acc_backward (scaling by 1/accumulation, all-reduce on sync steps);
 *   per optimizer step: unscale (fp16), clip by global norm
 *   (clip_grad_norm_: coefficient max_grad_norm / (norm + 1e-6), capped at
 *   1), optimizer step, scheduler step (not after a skipped fp16 step, as
 *   Accelerate's AcceleratedScheduler), zero_grad, global_step += 1,
 *   on_step_end, then _maybe_log_save_evaluate.
 * With LOMO/AdaLomo the update happens inside training_step (fused into
 * backward, acc_lomo.c, which also all-reduces and clips): the optimizer
 * step then only counts the step and moves the scheduler.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_nccl.h"
#include "acc_trainer_internal.h"
#include "nbf_util.h"

static acc_optim_t *make_optimizer(acc_trainer_t *tr) {
  const acc_training_args_t *a = &tr->args;
  acc_model_t *m = tr->model;
  if (!strcmp(a->optim, "sgd")) {
    double momentum = tr_kwarg(a->optim_args, "momentum");
    if (isnan(momentum))
      momentum = 0.0;
    return acc_sgd_new(m->params, m->grads, m->num_params, (float)a->learning_rate, (float)momentum,
                       (float)a->weight_decay);
  }
  return acc_adamw_new(m->params, m->grads, m->num_params, (float)a->learning_rate,
                       (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                       (float)a->weight_decay);
}

/* The named tensors lie in the flat buffer, in order, without overlap
 * (GaLore, checkpoints and the documentation read them as a partition). */
static acc_result_t check_tensors(acc_t *acc, const acc_model_t *model) {
  if (model->num_tensors > 0 && !model->tensors)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_new: num_tensors is %d but tensors is NULL",
                          model->num_tensors);
  for (int i = 0; i < model->num_tensors; i++) {
    const acc_tensor_info_t *t = &model->tensors[i], *p = i ? t - 1 : NULL;
    size_t n = (size_t)(t->rows > 0 ? t->rows : 0) * (size_t)(t->cols > 0 ? t->cols : 0);
    if (t->rows < 1 || t->cols < 1 || t->offset + n > model->num_params)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "acc_trainer_new: tensor %d '%s' (%d x %d at offset %zu) does not lie "
                            "inside the %zu parameters",
                            i, t->name, t->rows, t->cols, t->offset, model->num_params);
    if (p && t->offset < p->offset + (size_t)p->rows * (size_t)p->cols)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "acc_trainer_new: tensor %d '%s' (elements %zu..%zu) overlaps tensor "
                            "%d '%s' (elements %zu..%zu): each parameter belongs to one tensor, "
                            "in order of offset",
                            i, t->name, t->offset, t->offset + n - 1, i - 1, p->name, p->offset,
                            p->offset + (size_t)p->rows * (size_t)p->cols - 1);
  }
  return ACC_OK;
}

static acc_result_t check_inputs(acc_t *acc, const acc_training_args_t *args, acc_model_t *model,
                                 const acc_dataset_t *train, const acc_dataset_t *eval) {
  if (!acc || !args || !model || !train)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_new: NULL accelerator, arguments, model or train dataset");
  if (acc_training_args_validate(args) != ACC_OK)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "%s", acc_last_error(NULL));
  if (!model->params || !model->grads || !model->num_params || !model->forward_loss ||
      !model->backward || !model->predict)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_new: the model interface needs params, grads, num_params, "
                          "forward_loss, backward and predict");
  const acc_dataset_t *ds[2] = {train, eval};
  for (int i = 0; i < 2; i++)
    if (ds[i] && (!ds[i]->x || !ds[i]->y || !ds[i]->n || ds[i]->dim != model->input_dim))
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "acc_trainer_new: the %s dataset is empty or its dim (%d) is not the "
                            "model's input_dim (%d)",
                            i ? "eval" : "train", ds[i]->dim, model->input_dim);
  const struct {
    const char *name;
    int value;
  } bs[2] = {{"per_device_train_batch_size", args->per_device_train_batch_size},
             {"per_device_eval_batch_size", args->per_device_eval_batch_size}};
  for (int i = 0; i < 2; i++)
    if (model->max_batch > 0 && bs[i].value > model->max_batch)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "acc_trainer_new: --%s %d is larger than the model's max_batch %d "
                            "(the rows its forward takes at most, acc_mlp_new's last argument): "
                            "give --%s %d or build the model with max_batch >= %d",
                            bs[i].name, bs[i].value, model->max_batch, bs[i].name, model->max_batch,
                            bs[i].value);
  ACC_CHECK(check_tensors(acc, model));
  if (args->neftune_noise_alpha > 0 && !model->input_embeddings)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "--neftune_noise_alpha %g: the model has no input_embeddings (NEFTune "
                          "adds noise to an acc_embedding_t's outputs)",
                          args->neftune_noise_alpha);
  if (acc->accum_steps != args->gradient_accumulation_steps)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_trainer_new: the accelerator accumulates %d micro-steps but "
                          "gradient_accumulation_steps is %d (use acc_trainer_accelerator_new)",
                          acc->accum_steps, args->gradient_accumulation_steps);
  return ACC_OK;
}

acc_trainer_t *acc_trainer_new(acc_t *acc, const acc_training_args_t *args, acc_model_t *model,
                               const acc_dataset_t *train, const acc_dataset_t *eval) {
  if (check_inputs(acc, args, model, train, eval) != ACC_OK)
    return NULL;
  acc_trainer_t *tr = calloc(1, sizeof *tr);
  if (!tr)
    goto oom;
  tr->acc = acc;
  tr->args = *args;
  tr->model = model;
  tr->train = train;
  tr->eval = eval;
  tr->loop.grad_norm = NAN;
  tr->log_level = acc_training_args_process_log_level(args, acc_rank(acc), acc_local_rank(acc));
  tr->state.is_world_process_zero = acc_is_main_process(acc);
  tr->state.is_local_process_zero = acc_is_local_main_process(acc);
  int maxb = args->per_device_train_batch_size > args->per_device_eval_batch_size
                 ? args->per_device_train_batch_size
                 : args->per_device_eval_batch_size;
  tr->xb = malloc((size_t)maxb * (size_t)model->input_dim * sizeof(float));
  tr->yb = malloc((size_t)maxb * sizeof(int64_t));
  tr->preds = malloc((size_t)maxb * sizeof(int64_t));
  if (!tr->xb || !tr->yb || !tr->preds)
    goto oom;
  tr->grads_on_device = acc_device(acc) >= 0 && acc_nccl_is_device_ptr(model->grads);
  const int custom_dev = tr->grads_on_device && !model->mlp;
  acc_shard_config_t shard_cfg;
  int shard = tr_shard_wanted(acc, args);
  /* sharded, its checkpoints go through acc_shard_save_state's host copies */
  if (custom_dev && !shard &&
      (strcmp(args->save_strategy, "no") || args->resume_from_checkpoint[0])) {
    /* its parameters are checkpointed ("trainer.params") as host bytes */
    acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                   "acc_trainer_new: checkpoints of a custom model (not acc_mlp_model) with "
                   "parameters in device memory are not supported without sharding: use "
                   "save_strategy \"no\", --fsdp (its checkpoints then go through host copies), "
                   "keep its params/grads on the host, or use the toolkit MLP");
    goto fail;
  }
  if (shard && tr_shard_config(acc, args, &shard_cfg, &tr->state_dict_type) != ACC_OK)
    goto fail;
  if (shard) {
    /* acc_shard_new below, once every rank holds rank 0's parameters */
  } else if (!strcmp(args->optim, "galore_adamw")) {
    /* Transformers' defaults: rank 128, update_proj_gap 200, scale 0.25 */
    double rank = tr_kwarg(args->optim_args, "rank"),
           gap = tr_kwarg(args->optim_args, "update_proj_gap"),
           scale = tr_kwarg(args->optim_args, "scale");
    tr->galore =
        acc_galore_new(acc, model, args->optim_target_modules, isnan(rank) ? 128 : (int)rank,
                       isnan(gap) ? 200 : (int)gap, isnan(scale) ? 0.25f : (float)scale,
                       (float)args->learning_rate, (float)args->adam_beta1, (float)args->adam_beta2,
                       (float)args->adam_epsilon, (float)args->weight_decay);
    if (!tr->galore)
      goto fail;
  } else if (!strcmp(args->optim, "lomo") || !strcmp(args->optim, "adalomo")) {
    tr->lomo = acc_lomo_new(acc, model, !strcmp(args->optim, "adalomo"), (float)args->learning_rate,
                            (float)args->max_grad_norm, (float)args->weight_decay);
    if (!tr->lomo)
      goto fail;
  } else if (!(tr->opt = make_optimizer(tr))) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_trainer_new: cannot create optimizer %s",
                   args->optim);
    goto fail;
  }
  if (acc_register_for_checkpointing(acc, "trainer.loop", &tr->loop, sizeof tr->loop) ||
      (!model->mlp && !custom_dev &&
       acc_register_for_checkpointing(acc, "trainer.params", model->params,
                                      model->num_params * sizeof(float))) ||
      (args->early_stopping_patience > 0 && tr_add_early_stopping(tr)))
    goto fail;
  /* every rank starts from rank 0's parameters, as DDP broadcasts
   * module states at construction: a model initialized per rank (another
   * seed, rand()) would otherwise train as N different models whose
   * averaged gradients fit none of them */
  if (acc_world_size(acc) > 1 &&
      acc_broadcast(acc, model->params, model->num_params, ACC_F32, 0) != ACC_OK)
    goto fail;
  if (shard && !(tr->shard = acc_shard_new(acc, model, &shard_cfg)))
    goto fail;
  if (shard)
    acc_trainer_log(tr, ACC_LOG_INFO, "Sharding: %s", acc_shard_describe(tr->shard));
  tr->lr = args->learning_rate;
  return tr;
oom:
  acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_trainer_new: no memory");
fail:
  acc_trainer_destroy(&tr);
  return NULL;
}

void acc_trainer_destroy(acc_trainer_t **tr_p) {
  acc_trainer_t *tr = tr_p ? *tr_p : NULL;
  if (!tr)
    return;
  acc__unregister_for_checkpointing(tr->acc, "trainer.loop");
  if (!tr->model->mlp)
    acc__unregister_for_checkpointing(tr->acc, "trainer.params");
  acc_optim_destroy(&tr->opt);
  acc_shard_destroy(&tr->shard); /* collective at stage 3: leaves the model whole */
  acc_galore_destroy(&tr->galore);
  acc_lomo_destroy(&tr->lomo);
  acc_progress_destroy(&tr->bar);
  free(tr->state.log_history);
  free(tr->xb);
  free(tr->yb);
  free(tr->preds);
  free(tr);
  *tr_p = NULL;
}

void acc_trainer_set_compute_metrics(acc_trainer_t *tr, acc_compute_metrics_fn fn, void *user) {
  if (!tr)
    return;
  tr->compute_metrics = fn;
  tr->metrics_user = user;
}

void acc_trainer_set_steps(acc_trainer_t *tr, acc_compute_loss_fn compute_loss,
                           acc_training_step_fn training_step,
                           acc_prediction_step_fn prediction_step, void *user) {
  if (!tr)
    return;
  tr->compute_loss = compute_loss;
  tr->training_step = training_step;
  tr->prediction_step = prediction_step;
  tr->steps_user = user;
}

acc_trainer_state_t *acc_trainer_state(acc_trainer_t *tr) {
  return tr ? &tr->state : NULL;
}
acc_trainer_control_t *acc_trainer_control(acc_trainer_t *tr) {
  return tr ? &tr->control : NULL;
}
const acc_training_args_t *acc_trainer_args(const acc_trainer_t *tr) {
  return tr ? &tr->args : NULL;
}
acc_model_t *acc_trainer_model(acc_trainer_t *tr) {
  return tr ? tr->model : NULL;
}
acc_t *acc_trainer_accelerator(acc_trainer_t *tr) {
  return tr ? tr->acc : NULL;
}
double acc_trainer_learning_rate(const acc_trainer_t *tr) {
  return tr ? tr->lr : NAN;
}

float acc_trainer_compute_loss(acc_trainer_t *tr, const float *x, const int64_t *y, int batch,
                               int training) {
  if (tr->shard) /* the parameters gathered as the stage needs */
    return acc_shard_forward_loss(tr->shard, x, y, batch, training);
  return tr->model->forward_loss(tr->model->self, x, y, batch, training);
}

float acc_trainer_training_step(acc_trainer_t *tr, const float *x, const int64_t *y, int batch) {
  float loss = tr->compute_loss ? tr->compute_loss(tr, x, y, batch, 1, tr->steps_user)
                                : acc_trainer_compute_loss(tr, x, y, batch, 1);
  if (isnan(loss))
    return NAN;
  /* LOMO: Accelerate's lomo_backward (fused_backward with the learning rate) */
  if (tr->lomo ? acc_lomo_backward(tr->lomo) != ACC_OK : tr->model->backward(tr->model->self) != 0)
    return NAN;
  /* sharded: acc_shard_backward's reduction, without a second backward */
  if (tr->shard && acc__shard_reduce(tr->shard) != ACC_OK)
    return NAN;
  return loss;
}
