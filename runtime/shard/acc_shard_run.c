/*
 * acc_shard_run.c — what sharded data parallel does each step
 * (nbf_shard.h): the all-gather of a unit's parameters (acc_shard_gather.c;
 * stages 1/2 after the update; stage 3 before each use, with the next
 * unit prefetched by acc_shard_prefetch.c), the reduce-scatter of a unit's
 * gradient (stages 2/3), the toolkit MLP's layer hooks that do both
 * during forward and backward, and the step (unscale with one inf/NaN
 * decision for all ranks, clipping by the global norm over the shards,
 * the owned update). A unit's copies, zeroing and releases and the
 * step's arithmetic on the owned gradients are acc_shard_dev.c's, on host
 * or device memory.
 */
#include <math.h>

#include "acc_shard_internal.h"

/* Reduce-scatter (AVG) unit u's gradient at g (the model's buffer, or
 * a unit buffer with room for the padding, `ub`: stage 3's, or stage 2's
 * when its hooks reduce) into the owned elements, then release the rest
 * of the model's buffer (all of it where the owned elements live in G:
 * stage 3, a lean device MLP's stage 2); a unit buffer is kept for the
 * next unit. */
static acc_result_t reduce_unit(acc_shard_t *sh, const acc__shard_unit_t *u, float *g, int ub) {
  const size_t N = (size_t)sh->sworld, start = (size_t)sh->srank * u->s;
  if (acc__shard_unpadded(sh, u)) {
    /* owned gradients in G, and stage 2's when g is a unit buffer, lie
     * apart from g; else inside it, where the result may not land (it
     * overlaps the input) */
    float *own = acc__shard_own_grads(sh, u), *out = sh->G || ub ? own : sh->buf;
    ACC_CHECK(acc__shard_reduce_scatter(sh, g, out, u->s));
    if (out != own)
      ACC_CHECK(acc__shard_copy(sh, own, out, u->own));
  } else {
    float *b = ub ? g : sh->buf; /* the padded unit: staged unless g has room */
    if (b != g)
      ACC_CHECK(acc__shard_copy(sh, b, g, u->n));
    ACC_CHECK(acc__shard_zero(sh, b + u->n, N * u->s - u->n));
    /* in place: the result lands on this rank's block of the input */
    ACC_CHECK(acc__shard_reduce_scatter(sh, b, b + start, u->s));
    ACC_CHECK(acc__shard_copy(sh, acc__shard_own_grads(sh, u), b + start, u->own));
  }
  if (ub)
    return ACC_OK;
  if (sh->G)
    return acc__shard_drop(sh, g, u->n);
  size_t s0 = start < u->n ? start : u->n;
  ACC_CHECK(acc__shard_drop(sh, g, s0));
  return acc__shard_drop(sh, g + s0 + u->own, u->n - s0 - u->own);
}

/* Stage 3: give back unit u's pages in the model's parameter buffer (a
 * custom device model's zeroed; a lean device MLP's buffer is freed
 * whole by the caller) and its half shadow (mixed precision; a device
 * model's is one layer's, rounded at each use). */
static acc_result_t release_params(acc_shard_t *sh, const acc__shard_unit_t *u, int model_buffer) {
  float *wh = sh->model->mlp && !sh->dev ? acc__mlp_host_buffer(sh->model->mlp, 2) : NULL;
  if (wh)
    acc__shard_release(wh + u->off, u->n);
  return model_buffer && !sh->lean ? acc__shard_drop(sh, sh->model->params + u->off, u->n) : ACC_OK;
}

/* The gradients are reduced in the backward hooks only when this
 * micro-step's contribution needs no accumulation scaling. */
static int reduce_in_hooks(const acc_shard_t *sh) {
  return sh->acc->accum_steps == 1 && sh->acc->sync_gradients;
}

/* Stage 3: have unit `layer`'s parameters in the unit buffer in use
 * (from the prefetch when it gathered that one into the other buffer;
 * kept from its forward when still there: the last layer), the layer's
 * view on it, then hand the next one (`next`, -1 none) to the helper,
 * into the other buffer. */
static acc_result_t gather_for(acc_shard_t *sh, int layer, int next) {
  int ready = -1;
  acc_result_t r = acc__shard_pf_wait(sh->pf, &ready, 1);
  if (r == ACC_OK && ready == layer)
    sh->ucur ^= 1;
  else if (r == ACC_OK && sh->uheld != layer)
    r = acc__shard_gather_into(sh, &sh->units[layer], sh->ubuf[sh->ucur]);
  sh->uheld = r == ACC_OK ? layer : -1;
  acc__mlp_set_unit_view(sh->model->mlp, layer, sh->ubuf[sh->ucur], NULL);
  if (r == ACC_OK && sh->pf && next >= 0 && next < sh->nunits)
    acc__shard_pf_start(sh->pf, next, sh->ubuf[sh->ucur ^ 1]);
  return r;
}

/* Layer `layer`'s parameters read for the last time in this backward:
 * at stage 3 its half shadow goes; its gradient is computed in the unit
 * buffer (stage 3: the one that held them; zeroed: the backward adds
 * into it) when the hooks reduce it, else into the model's buffer
 * (accumulation; a lean device MLP's allocated for it). Host stage 2 so
 * never touches the model's gradient pages outside its slices, which it
 * gave back once (acc_shard.c): it used to fault them in and give them
 * back, page by page, every step. */
static acc_result_t weights_done(acc_shard_t *sh, int layer, int in_unit_buffer) {
  const acc__shard_unit_t *u = &sh->units[layer];
  if (sh->stage == 3)
    (void)release_params(sh, u, 0); /* host pages only: cannot fail */
  float *g = NULL;
  if (in_unit_buffer) {
    g = sh->ubuf[sh->ucur];
    ACC_CHECK(acc__shard_zero(sh, g, u->n));
    sh->uheld = -1;
  } else {
    ACC_CHECK(acc__shard_whole(sh, 1, 1));
  }
  sh->ugrad = g ? layer : -1;
  acc__mlp_set_unit_view(sh->model->mlp, layer, NULL, g);
  return ACC_OK;
}

/* BWD_END: the pending prefetch done (before this rank's next
 * collective; its unit stays for the next BWD_BEGIN), the layer's
 * gradient reduced when the hooks reduce. */
static acc_result_t backward_end(acc_shard_t *sh, int layer) {
  const acc__shard_unit_t *u = &sh->units[layer];
  acc_result_t r = acc__shard_pf_wait(sh->pf, NULL, 0);
  acc__shard_sample(sh); /* this unit's gradient and the next unit's parameters */
  if (reduce_in_hooks(sh) && r == ACC_OK) {
    int ub = sh->ugrad == layer; /* the gradient is in the unit buffer (weights_done) */
    sh->ugrad = -1;
    r = reduce_unit(sh, u, ub ? sh->ubuf[sh->ucur] : sh->model->grads + u->off, ub);
    sh->reduced = layer == 0 && r == ACC_OK;
  }
  return r;
}

int acc__shard_mlp_hook(void *user, int phase, int layer, size_t offset, size_t n) {
  acc_shard_t *sh = user;
  (void)offset, (void)n; /* the MLP's layers are the units, in order */
  acc_result_t r = ACC_OK;
  int gather = sh->stage == 3 && !sh->gathered;
  const int pf = sh->cfg.prefetch;
  if (!gather && (phase == ACC__UNIT_FWD_BEGIN || phase == ACC__UNIT_BWD_BEGIN))
    acc__mlp_set_unit_view(sh->model->mlp, layer, NULL, NULL); /* the model's buffers */
  if (!gather && phase == ACC__UNIT_BWD_BEGIN && sh->stage == 3)
    r = acc__shard_whole(sh, 1, 1); /* gathered whole (a checkpoint): a lean one's gradients */
  if (phase == ACC__UNIT_FWD_BEGIN && gather)
    r = gather_for(sh, layer, pf & ACC_SHARD_PREFETCH_FORWARD ? layer + 1 : -1);
  if (phase == ACC__UNIT_BWD_BEGIN && gather)
    r = gather_for(sh, layer, pf & ACC_SHARD_PREFETCH_BACKWARD ? layer - 1 : -1);
  acc__shard_sample(sh); /* the layer is in memory now */
  if (phase == ACC__UNIT_FWD_END && gather)
    (void)release_params(sh, &sh->units[layer], 0); /* host pages only: cannot fail */
  if (phase == ACC__UNIT_BWD_WEIGHTS_DONE && (gather || (sh->stage == 2 && sh->ubuf[0])))
    r = weights_done(sh, layer, reduce_in_hooks(sh));
  if (phase == ACC__UNIT_BWD_END)
    r = backward_end(sh, layer);
  return r == ACC_OK ? 0 : -1;
}

acc_result_t acc_shard_gather_params(acc_shard_t *sh) {
  if (!sh)
    return ACC_ERR_INVALID_ARGUMENT;
  if (sh->stage < 3 || sh->gathered)
    return ACC_OK;
  ACC_CHECK(acc__shard_pf_wait(sh->pf, NULL, 1));
  ACC_CHECK(acc__shard_whole(sh, 0, 1)); /* a lean device MLP's buffer back */
  sh->uheld = -1;                        /* the unit buffer may stage the gathers */
  for (int i = 0; i < sh->nunits; i++)
    ACC_CHECK(acc__shard_gather_unit(sh, &sh->units[i]));
  sh->gathered = 1;
  acc__shard_sample(sh);
  return ACC_OK;
}

/* Stage 3 after a backward: the unit buffers' pages back to the OS, so
 * that between steps a rank holds its shards alone (a device's unit
 * buffer stays allocated: it is one layer, in the estimate). */
static void release_unit_buffers(acc_shard_t *sh) {
  for (int i = 0; i < 2 && !sh->dev; i++)
    acc__shard_release(sh->ubuf[i], sh->ubuf[i] ? sh->buf_n : 0);
  sh->uheld = -1;
}

/* Stage 3 after a step (a prefetched unit is stale: dropped), a load or
 * a backward without layer hooks: the unit buffers, and every unit's
 * parameter pages when all were gathered. */
acc_result_t acc__shard_release_all(acc_shard_t *sh) {
  (void)acc__shard_pf_wait(sh->pf, NULL, 1);
  /* stage 2's unit buffer stays: the next backward uses it; a lean
   * device MLP's full gradient buffer goes unless it accumulates */
  if (sh->stage < 3)
    return sh->acc->accum_steps == 1 ? acc__shard_whole(sh, 1, 0) : ACC_OK;
  release_unit_buffers(sh);
  if (!sh->gathered)
    return ACC_OK;
  sh->gathered = 0;
  for (int i = 0; i < sh->nunits; i++)
    ACC_CHECK(release_params(sh, &sh->units[i], 1));
  /* a lean device MLP's: freed (the gradients' too, unless they
   * accumulate over micro-steps) */
  ACC_CHECK(acc__shard_whole(sh, 0, 0));
  return sh->acc->accum_steps == 1 ? acc__shard_whole(sh, 1, 0) : ACC_OK;
}

float acc_shard_forward_loss(acc_shard_t *sh, const float *x, const int64_t *labels, int batch,
                             int training) {
  if (!sh)
    return NAN;
  sh->uheld = -1; /* the shards may have been loaded since the last gather */
  /* a model without layer hooks needs all of its parameters at once */
  if (!sh->hooked && acc_shard_gather_params(sh) != ACC_OK)
    return NAN;
  float loss = sh->model->forward_loss(sh->model->self, x, labels, batch, training);
  acc__shard_sample(sh);
  return loss;
}

acc_result_t acc_shard_backward(acc_shard_t *sh) {
  if (!sh)
    return ACC_ERR_INVALID_ARGUMENT;
  acc_model_t *m = sh->model;
  acc_t *acc = sh->acc;
  sh->reduced = 0;
  if (m->backward(m->self) != 0) {
    if (acc->err[0])
      return ACC_ERR_INVALID_ARGUMENT; /* the model's or the hook's error is kept */
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_shard_backward: backward failed");
  }
  return acc__shard_reduce(sh);
}

acc_result_t acc__shard_reduce(acc_shard_t *sh) {
  acc_model_t *m = sh->model;
  acc_t *acc = sh->acc;
  ACC_CHECK(acc__shard_pf_wait(sh->pf, NULL, 0)); /* before this rank's next collective */
  int reduced = sh->reduced;                      /* by this backward's hooks */
  sh->reduced = 0;
  acc__shard_sample(sh);
  acc_result_t r = ACC_OK;
  if (sh->stage < 2) {
    r = acc_backward(acc, m->grads, m->num_params);
  } else if (!reduced) {
    r = acc__accumulate_scale(acc, m->grads, m->num_params);
    for (int i = 0; r == ACC_OK && acc->sync_gradients && i < sh->nunits; i++)
      r = reduce_unit(sh, &sh->units[i], m->grads + sh->units[i].off, 0);
  }
  if (!sh->hooked) {
    acc_result_t rr = acc__shard_release_all(sh);
    r = r == ACC_OK ? rr : r;
  } else if (sh->stage == 3) {
    release_unit_buffers(sh);
  }
  acc__shard_sample(sh);
  return r;
}

/* fp16: unscale the owned gradients; 1 when every rank's were finite.
 * The inverse is acc_unscale_gradients' (so stage 0 equals DDP). */
static int unscale_all(acc_shard_t *sh, acc_result_t *r) {
  acc_t *acc = sh->acc;
  if (acc->precision != ACC_PRECISION_FP16)
    return 1;
  const float inv = (float)(1.0 / (double)acc->scale);
  int32_t bad = acc__shard_unscale(sh, inv);
  if (bad < 0) { /* a device error, not an overflow */
    *r = ACC_ERR_BACKEND;
    return 0;
  }
  if (sh->stage > 0) /* below, every rank holds the same gradients */
    *r = acc_all_reduce(acc, &bad, 1, ACC_I32, ACC_MAX);
  return !bad;
}

/* The global norm of the gradients (torch.nn.utils.clip_grad_norm_):
 * f64 sums of squares of the owned elements in eight lanes, summed over
 * ranks; the gradients scaled by max_norm / (norm + 1e-6) when below 1. */
static acc_result_t clip(acc_shard_t *sh) {
  double ss = 0.0;
  ACC_CHECK(acc__shard_owned_sumsq(sh, &ss));
  if (sh->stage > 0)
    ACC_CHECK(acc_all_reduce(sh->acc, &ss, 1, ACC_F64, ACC_SUM));
  ss /= sh->ngroups; /* HYBRID_SHARD: every node holds all the shards */
  float norm = (float)sqrt(ss);
  sh->grad_norm = norm;
  double max_norm = sh->cfg.max_grad_norm;
  if (max_norm > 0 && isfinite(norm)) {
    float coef = (float)(max_norm / ((double)norm + 1e-6));
    if (coef < 1.0f)
      return acc__shard_owned_scale(sh, coef);
  }
  return ACC_OK;
}

/* Zero what holds gradients after the step: the model's whole buffer
 * below stage 2, the owned elements above (the rest was released). */
static acc_result_t zero_grads(acc_shard_t *sh) {
  if (sh->stage < 2)
    return acc__shard_zero(sh, sh->model->grads, sh->model->num_params);
  if (sh->G && sh->dev) /* one memset: the padding is zeros too */
    return acc__shard_zero(sh, sh->G, sh->S);
  for (int i = 0; i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    ACC_CHECK(acc__shard_zero(sh, acc__shard_own_grads(sh, u), u->own));
  }
  return ACC_OK;
}

int acc_shard_step(acc_shard_t *sh) {
  if (!sh)
    return -1;
  acc_t *acc = sh->acc;
  if (!acc->sync_gradients)
    return 0;
  acc_result_t r = acc__shard_pf_wait(sh->pf, NULL, 0);
  if (r != ACC_OK)
    return -1;
  int finite = unscale_all(sh, &r);
  if (r != ACC_OK)
    return -1;
  if (acc->precision == ACC_PRECISION_FP16)
    acc_update_loss_scale(acc, !finite);
  else
    acc->found_inf = 0;
  if (!finite)
    return zero_grads(sh) == ACC_OK ? 0 : -1;
  if (clip(sh) != ACC_OK)
    return -1;
  if (sh->offload) { /* on the host (acc_shard_offload.c) */
    if (acc__shard_offload_step(sh) != ACC_OK)
      return -1;
  } else {
    for (int i = 0; i < sh->nunits; i++)
      if (sh->units[i].opt && acc__optim_step_raw(acc, sh->units[i].opt) < 0)
        return -1;
  }
  /* stage 3: the gathered parameters are stale now */
  if (zero_grads(sh) != ACC_OK || acc__shard_release_all(sh) != ACC_OK)
    return -1;
  for (int i = 0; sh->stage == 1 || sh->stage == 2 ? i < sh->nunits : 0; i++)
    if (acc__shard_gather_unit(sh, &sh->units[i]) != ACC_OK)
      return -1;
  acc__shard_sample(sh);
  return 1;
}
