/*
 * acc_shard_dev.c — the memory operations of sharded data parallel on
 * host or device buffers (nbf_shard.h, issue 23 "Gloo on CPU, NCCL on
 * GPU"): a unit's copies and zeroing, the release of what a rank does not
 * own, the shards' allocation, and the step's unscale, partial norm and
 * scaling of the owned gradients. On the host: memcpy/memset, pages given
 * back (acc_shard_mem.c), the host loops; for a device model
 * (sh->dev): the device layer's calls (runtime/device/acc_optim_cuda.h,
 * acc_half_cuda.h), all on the accelerator's stream, the host never
 * reading device memory. Only the unscale's inf/NaN flag and the norm's
 * sum of squares come back (one synchronization each per step, as the
 * DDP device path's). Below acc_shard.c, acc_shard_gather.c and
 * acc_shard_run.c; above acc_shard_mem.c.
 */
#include <stdlib.h>
#include <string.h>

#include "acc_half_cuda.h"
#include "acc_optim_cuda.h"
#include "acc_shard_internal.h"

/* The device layer's error `err` of `what` as the accelerator's error. */
static acc_result_t dev_failed(acc_shard_t *sh, acc_result_t r, const char *what, const char *err) {
  return acc__set_error(sh->acc, r, "sharding (ZeRO stage %d) on device %d: %s: %s", sh->stage,
                        sh->acc->device, what, err);
}

/* Whether p is host memory of a device model's shards: the offloaded
 * parameter shards (stage 3, sh->hostP). */
static int host_shard(const acc_shard_t *sh, const float *p) {
  return sh->hostP && p >= sh->P && p < sh->P + sh->S;
}

acc_result_t acc__shard_copy(acc_shard_t *sh, float *dst, const float *src, size_t n) {
  if (!n || dst == src)
    return ACC_OK;
  const int hd = host_shard(sh, dst), hs = host_shard(sh, src);
  if (!sh->dev || (hd && hs)) {
    memmove(dst, src, n * sizeof(float));
    return ACC_OK;
  }
  char err[512];
  acc_result_t r =
      hd || hs ? acc_optim_cuda_copy_host_async(dst, src, n, hs, sh->acc->stream, err, sizeof err)
               : acc_optim_cuda_copy_async(dst, src, n, sh->acc->stream, err, sizeof err);
  return r == ACC_OK ? ACC_OK : dev_failed(sh, r, "copying a unit", err);
}

acc_result_t acc__shard_zero(acc_shard_t *sh, float *p, size_t n) {
  if (!n)
    return ACC_OK;
  if (!sh->dev || host_shard(sh, p)) {
    memset(p, 0, n * sizeof(float));
    return ACC_OK;
  }
  char err[512];
  acc_result_t r = acc_optim_cuda_zero(p, n, sh->acc->stream, err, sizeof err);
  return r == ACC_OK ? ACC_OK : dev_failed(sh, r, "zeroing a unit", err);
}

/* A device model's buffers are the model's allocation: there are no
 * pages to give back, the elements are zeroed (what a released host
 * page reads as). */
acc_result_t acc__shard_drop(acc_shard_t *sh, float *p, size_t n) {
  if (!sh->dev) {
    acc__shard_release(p, n);
    return ACC_OK;
  }
  return acc__shard_zero(sh, p, n);
}

float *acc__shard_alloc(acc_shard_t *sh, size_t n) {
  float *p = NULL;
  if (!n)
    return NULL;
  if (!sh->dev) {
    if (!(p = calloc(n, sizeof(float))))
      acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_new: no memory for the shards");
    return p;
  }
  char err[512];
  acc_result_t r = acc_optim_cuda_state(&p, n, err, sizeof err);
  if (r != ACC_OK) {
    dev_failed(sh, r, "allocating the shards", err);
    return NULL;
  }
  return p;
}

void acc__shard_free(acc_shard_t *sh, float **p) {
  if (!sh->dev) {
    free(*p);
    *p = NULL;
  } else {
    acc_optim_cuda_free(p);
  }
}

acc_result_t acc__shard_whole(acc_shard_t *sh, int what, int keep) {
  if (!sh->lean || (what == 0 && sh->stage < 3)) /* stage 2's parameters stay whole */
    return ACC_OK;
  acc_model_t *m = sh->model;
  if (!keep && !(what ? m->grads : m->params))
    return ACC_OK; /* freed already: no synchronization (stage 2 asks every step) */
  ACC_CHECK(acc__mlp_dev_buffer(m->mlp, what, keep)); /* its error is set */
  if (what)
    m->grads = acc_mlp_grads(m->mlp);
  else
    m->params = acc_mlp_params(m->mlp);
  return ACC_OK;
}

acc_result_t acc__shard_offload_copy(acc_shard_t *sh, float *dst, const float *src, size_t n,
                                     int to_device) {
  char err[512];
  acc_result_t r =
      acc_optim_cuda_copy_host_async(dst, src, n, to_device, sh->acc->stream, err, sizeof err);
  return r == ACC_OK ? ACC_OK : dev_failed(sh, r, "offload", err);
}

acc_result_t acc__shard_offload_wait(acc_shard_t *sh) {
  char err[512];
  acc_result_t r = acc_optim_cuda_sync(sh->acc->stream, err, sizeof err);
  return r == ACC_OK ? ACC_OK : dev_failed(sh, r, "offload", err);
}

acc_result_t acc__shard_host_copy(acc_shard_t *sh, float *host, float *buf, size_t n, int to_host) {
  if (!n)
    return ACC_OK;
  if (!sh->dev || host_shard(sh, buf)) {
    if (to_host)
      memcpy(host, buf, n * sizeof(float));
    else
      memcpy(buf, host, n * sizeof(float));
    return ACC_OK;
  }
  char err[512];
  acc_result_t r = acc_optim_cuda_copy(host, buf, n, !to_host, err, sizeof err);
  return r == ACC_OK ? ACC_OK
                     : dev_failed(sh, ACC_ERR_BACKEND,
                                  to_host ? "copying a checkpoint's state from the device"
                                          : "copying a checkpoint's state to the device",
                                  err);
}

/* A device model's owned gradients as ranges for one kernel: each
 * unit's owned block, or the one buffer G (stage 3's, a lean stage 2's:
 * its padding is zeros:
 * one range instead of one per unit). *k ranges into g, n (room for
 * nunits). */
static void owned_ranges(acc_shard_t *sh, float **g, size_t *n, int *k) {
  *k = 0;
  if (sh->G) {
    g[0] = sh->G, n[0] = sh->S, *k = 1;
    return;
  }
  for (int i = 0; i < sh->nunits; i++)
    if (sh->units[i].own)
      g[*k] = acc__shard_own_grads(sh, &sh->units[i]), n[(*k)++] = sh->units[i].own;
}

/* Device: one unscale over the whole gradient buffer (or over G):
 * below stage 3 the elements a rank does not own are zeros (stage 2) or
 * every rank's same values (stages 0, 1), so the inf/NaN decision and
 * the owned values are those of the owned elements', with one
 * synchronization instead of one per unit. */
int acc__shard_unscale(acc_shard_t *sh, float inv) {
  if (!sh->dev) {
    int bad = 0;
    for (int i = 0; i < sh->nunits; i++) {
      const acc__shard_unit_t *u = &sh->units[i];
      bad |= acc__unscale_host(acc__shard_own_grads(sh, u), u->own, inv);
    }
    return bad;
  }
  float *scratch = acc__device_scratch(sh->acc);
  if (!scratch)
    return -1;
  float *g = sh->G ? sh->G : sh->model->grads;
  size_t n = sh->G ? sh->S : sh->model->num_params;
  char err[512];
  int found = 0;
  acc_result_t r = acc_cuda_unscale(g, n, inv, &found, (int *)(void *)(scratch + 4),
                                    sh->acc->stream, err, sizeof err);
  if (r != ACC_OK) {
    dev_failed(sh, r, "unscaling the gradients", err);
    return -1;
  }
  return found != 0;
}

acc_result_t acc__shard_owned_sumsq(acc_shard_t *sh, double *ss) {
  if (!sh->dev) { /* per unit, in unit order: the order the CPU results are pinned to */
    *ss = 0.0;
    for (int i = 0; i < sh->nunits; i++)
      *ss += acc__sumsq(acc__shard_own_grads(sh, &sh->units[i]), sh->units[i].own);
    return ACC_OK;
  }
  float **g = malloc((size_t)(sh->nunits + 1) * sizeof *g);
  size_t *n = malloc((size_t)(sh->nunits + 1) * sizeof *n);
  int k = 0;
  acc_result_t r = ACC_OK;
  if (!g || !n) {
    r = acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_step: no memory");
  } else {
    owned_ranges(sh, g, n, &k);
    float *scratch = acc__device_scratch(sh->acc);
    char err[512];
    r = scratch ? acc_optim_cuda_sumsq(g, n, k, scratch, sh->acc->stream, ss, err, sizeof err)
                : ACC_ERR_BACKEND;
    if (scratch && r != ACC_OK)
      dev_failed(sh, r, "the gradients' norm", err);
  }
  free(g), free(n);
  return r;
}

acc_result_t acc__shard_owned_scale(acc_shard_t *sh, float coef) {
  for (int i = 0; i < sh->nunits; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    float *g = acc__shard_own_grads(sh, u);
    if (!sh->dev) {
      for (size_t j = 0; j < u->own; j++)
        g[j] *= coef;
      continue;
    }
    char err[512];
    acc_result_t r = acc_optim_cuda_scale(g, u->own, coef, sh->acc->stream, err, sizeof err);
    if (r != ACC_OK)
      return dev_failed(sh, r, "clipping the gradients", err);
  }
  return ACC_OK;
}
