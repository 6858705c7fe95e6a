/*
 * acc_shard.c — sharded data parallel (nbf_shard.h): the stage from the
 * launcher's environment (Accelerate's FSDP and DeepSpeed names), the
 * wrap units and their padded shards, the optimizers over the owned
 * elements. The gathers, reductions and the step are acc_shard_run.c's;
 * the owned slices and the model-state memory acc_shard_mem.c's.
 */
#define _DEFAULT_SOURCE /* strcasecmp */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acc_nccl.h"
#include "acc_shard_internal.h"
#include "nbf_param.h"

/* FSDP_SHARDING_STRATEGY (a number as Accelerate's config writes it, or
 * the name) -> stage, + HYBRID for the hybrid ones; -1 when not
 * understood. */
enum { HYBRID = 16 };
static int fsdp_stage(const char *v) {
  static const struct {
    const char *num, *name;
    int stage;
  } t[] = {{"1", "FULL_SHARD", 3},
           {"2", "SHARD_GRAD_OP", 2},
           {"3", "NO_SHARD", 0},
           {"4", "HYBRID_SHARD", 3 + HYBRID},
           {"5", "_HYBRID_SHARD_ZERO2", 2 + HYBRID}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(v, t[i].num) || !strcasecmp(v, t[i].name))
      return t[i].stage;
  return -1;
}

/* FSDP's prefetch settings (Accelerate's FSDP_BACKWARD_PREFETCH,
 * FSDP_FORWARD_PREFETCH) are cfg.prefetch's bits; unset, they are
 * Accelerate's defaults (FullyShardedDataParallelPlugin: NO_PREFETCH,
 * forward_prefetch False): no prefetch. */
static acc_result_t prefetch_from_env(acc_t *acc, int *prefetch) {
  const char *b = nbf_param_FSDP_BACKWARD_PREFETCH();
  *prefetch = 0;
  if (!strcasecmp(b, "BACKWARD_PRE") || !strcasecmp(b, "BACKWARD_POST"))
    *prefetch |= ACC_SHARD_PREFETCH_BACKWARD;
  else if (strcasecmp(b, "NO_PREFETCH"))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "FSDP_BACKWARD_PREFETCH=%s: expected BACKWARD_PRE, BACKWARD_POST or "
                          "NO_PREFETCH",
                          b);
  int fwd = 0;
  if (nbf_param_bool_strict(NBF_P_FSDP_FORWARD_PREFETCH, &fwd) < 0)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "FSDP_FORWARD_PREFETCH=%s: expected %s",
                          nbf_param_raw(NBF_P_FSDP_FORWARD_PREFETCH), NBF_BOOL_WORDS);
  if (fwd)
    *prefetch |= ACC_SHARD_PREFETCH_FORWARD;
  return ACC_OK;
}

/* The stage, hybrid, offload and prefetch choices of the launcher's
 * environment; an error names the variable and its value. */
static acc_result_t stage_from_env(acc_t *acc, acc_shard_config_t *c) {
  c->stage = 0;
  if (nbf_param_ACCELERATE_USE_FSDP() == 1) {
    const char *v = nbf_param_str(NBF_P_FSDP_SHARDING_STRATEGY);
    int st = fsdp_stage(v);
    if (st < 0)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "FSDP_SHARDING_STRATEGY=%s: expected 1|FULL_SHARD, 2|SHARD_GRAD_OP, "
                            "3|NO_SHARD, 4|HYBRID_SHARD or 5|_HYBRID_SHARD_ZERO2",
                            v);
    c->stage = st % HYBRID;
    c->hybrid |= st >= HYBRID;
    c->offload |= (nbf_param_FSDP_OFFLOAD_PARAMS() == 1);
    ACC_CHECK(prefetch_from_env(acc, &c->prefetch));
  } else if (nbf_param_ACCELERATE_USE_DEEPSPEED() == 1) {
    long s = 0;
    if (nbf_param_ACCELERATE_DEEPSPEED_ZERO_STAGE(&s) != 0 || s < 0 || s > 3)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "ACCELERATE_DEEPSPEED_ZERO_STAGE=%s: expected 0, 1, 2 or 3",
                            nbf_param_raw(NBF_P_ACCELERATE_DEEPSPEED_ZERO_STAGE));
    c->stage = (int)s;
    const char *od = nbf_param_str(NBF_P_ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE);
    const char *pd = nbf_param_str(NBF_P_ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE);
    c->offload |= (od && !strcmp(od, "cpu")) || (pd && !strcmp(pd, "cpu"));
  }
  return ACC_OK;
}

/* Units: the MLP's layers; else named tensors grouped by the prefix up to
 * their last '.' while contiguous; else the whole buffer. */
static int count_units(const acc_model_t *m, size_t *off, size_t *len) {
  int k = 0;
  for (int i = 0; i < m->num_tensors; i++) {
    const acc_tensor_info_t *t = &m->tensors[i];
    size_t n = (size_t)t->rows * (size_t)t->cols;
    const char *dot = strrchr(t->name, '.');
    size_t plen = dot ? (size_t)(dot - t->name) : strlen(t->name);
    if (k > 0 && i > 0) {
      const acc_tensor_info_t *p = &m->tensors[i - 1];
      const char *pdot = strrchr(p->name, '.');
      size_t pplen = pdot ? (size_t)(pdot - p->name) : strlen(p->name);
      if (pplen == plen && !strncmp(p->name, t->name, plen) &&
          off[k - 1] + len[k - 1] == t->offset) {
        len[k - 1] += n;
        continue;
      }
    }
    off[k] = t->offset;
    len[k++] = n;
  }
  if (k == 0) {
    off[0] = 0;
    len[0] = m->num_params;
    k = 1;
  }
  return k;
}

/* Units, their shard sizes and owned elements, and P/G (stage 3). */
static acc_result_t layout(acc_shard_t *sh) {
  const acc_model_t *m = sh->model;
  size_t nt = (size_t)(m->num_tensors > 0 ? m->num_tensors : 1);
  size_t *off = calloc(nt, sizeof *off), *len = calloc(nt, sizeof *len);
  sh->units = calloc(nt, sizeof *sh->units);
  if (!off || !len || !sh->units) {
    free(off), free(len);
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_new: no memory");
  }
  sh->nunits = sh->stage == 0 ? 1 : count_units(m, off, len);
  if (sh->stage == 0)
    off[0] = 0, len[0] = m->num_params;
  size_t N = (size_t)sh->sworld, maxs = 0;
  for (int i = 0; i < sh->nunits; i++) {
    acc__shard_unit_t *u = &sh->units[i];
    u->off = off[i];
    u->n = len[i];
    u->s = sh->stage == 0 ? u->n : (u->n + N - 1) / N;
    size_t start = sh->stage == 0 ? 0 : (size_t)sh->srank * u->s;
    u->own = u->n > start ? (u->n - start < u->s ? u->n - start : u->s) : 0;
    u->soff = sh->S;
    sh->S += u->s;
    maxs = u->s > maxs ? u->s : maxs;
  }
  free(off), free(len);
  sh->buf_n = sh->stage == 0 ? 0 : N * maxs;
  /* host or device memory, as the model's (acc_shard_dev.c); a lean
   * device MLP stages through its unit buffer (unit_buffers) */
  if (sh->buf_n && !sh->lean && !(sh->buf = acc__shard_alloc(sh, sh->buf_n)))
    return ACC_ERR_NO_MEMORY; /* set by acc__shard_alloc */
  /* a lean device MLP's stage 2: the owned gradients apart (G) */
  if (sh->stage < 3)
    return sh->lean && !(sh->G = acc__shard_alloc(sh, sh->S)) ? ACC_ERR_NO_MEMORY : ACC_OK;
  /* offloaded (a device model's sh->hostP): the parameter shards in host memory */
  sh->P = sh->hostP ? calloc(sh->S, sizeof(float)) : acc__shard_alloc(sh, sh->S);
  if (!sh->P && sh->hostP)
    return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY,
                          "acc_shard_new: no host memory for the offloaded parameter shards");
  if (!sh->P || !(sh->G = acc__shard_alloc(sh, sh->S)))
    return ACC_ERR_NO_MEMORY; /* set by acc__shard_alloc */
  return ACC_OK;
}

/* Stages 2 and 3 with layer hooks: one unit buffer, two with stage 3's
 * prefetch (host: page aligned, so that releasing one gives all of its
 * pages back; untouched until the first use). A lean device MLP's
 * (stages 2 and 3): device memory, and its staging buffer too (sh->buf:
 * used only outside a layer's use, to gather the whole model, all-gather
 * stage 2's updated parameters or reduce an accumulated gradient). */
static acc_result_t unit_buffers(acc_shard_t *sh) {
  if (sh->stage < 2 || !sh->model->mlp)
    return ACC_OK;
  if (sh->stage == 2 && sh->sworld == 1) /* every gradient element is owned: no churn */
    return ACC_OK;
  if (sh->dev) {
    if (!(sh->ubuf[0] = acc__shard_alloc(sh, sh->buf_n)))
      return ACC_ERR_NO_MEMORY; /* set by acc__shard_alloc */
    sh->buf = sh->ubuf[0];
    return ACC_OK;
  }
  const size_t pg = 4096, bytes = (sh->buf_n * sizeof(float) + pg - 1) / pg * pg;
  for (int i = 0; i < (sh->pf ? 2 : 1); i++)
    if (!(sh->ubuf[i] = aligned_alloc(pg, bytes)))
      return acc__set_error(sh->acc, ACC_ERR_NO_MEMORY,
                            "acc_shard_new: no memory for the unit buffers");
  return ACC_OK;
}

/* One optimizer per unit over its owned elements (torch's param groups
 * with the same hyper-parameters: the update is elementwise, so it equals
 * one optimizer over the whole buffer). */
static acc_result_t make_optimizers(acc_shard_t *sh) {
  const acc_shard_config_t *c = &sh->cfg;
  for (int i = 0; i < sh->nunits; i++) {
    acc__shard_unit_t *u = &sh->units[i];
    if (!u->own)
      continue;
    /* offloaded: the host master and gradient copies (acc_shard_offload.c) */
    float *p = acc__shard_opt_params(sh, u), *g = acc__shard_opt_grads(sh, u);
    u->opt = c->adamw
                 ? acc_adamw_new(p, g, u->own, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay)
                 : acc_sgd_new(p, g, u->own, c->lr, c->momentum, c->weight_decay);
    if (!u->opt)
      return acc__set_error(sh->acc, ACC_ERR_INVALID_ARGUMENT,
                            "acc_shard_new: bad optimizer settings (lr %g, betas %g %g, eps %g, "
                            "weight_decay %g, momentum %g) or no memory",
                            (double)c->lr, (double)c->beta1, (double)c->beta2, (double)c->eps,
                            (double)c->weight_decay, (double)c->momentum);
  }
  return ACC_OK;
}

/* Transparent huge pages for a buffer whose pages are released and
 * faulted in again every step (stage 3's parameters and gradients, stage
 * 2's gradients): one fault per 2 MiB instead of per 4 KiB (the 4 KiB
 * faults took about a third of a stage-3 step's time: bench/sharding.py
 * under perf). Advice only: ignored where THP is off. */
static void huge_pages(float *p, size_t n) {
#ifdef MADV_HUGEPAGE
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = (uintptr_t)(p + n) & ~(pg - 1);
  if (p && e > a)
    (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
  (void)p, (void)n;
#endif
}

/* Stage 3 keeps the owned elements only: copy them out of the model's
 * (equal on every rank) buffer, then release it. Stage 2 releases the
 * gradient pages it does not own. (A device model: the same copies on
 * the device; released = zeroed, acc_shard_dev.c; a lean device MLP's
 * full buffers freed, at stage 2 its gradients' only.) */
static acc_result_t take_shards(acc_shard_t *sh) {
  acc_model_t *m = sh->model;
  if (sh->stage == 3 && !sh->dev)
    huge_pages(m->params, m->num_params);
  if (sh->stage >= 2 && !sh->dev)
    huge_pages(m->grads, m->num_params);
  for (int i = 0; i < sh->nunits && sh->stage == 3; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    ACC_CHECK(acc__shard_copy(sh, sh->P + u->soff, m->params + u->off + (size_t)sh->srank * u->s,
                              u->own));
  }
  if (sh->lean) { /* stage 2 keeps its parameters whole (acc__shard_whole) */
    ACC_CHECK(acc__shard_whole(sh, 0, 0));
    return acc__shard_whole(sh, 1, 0);
  }
  if (sh->stage == 3) {
    ACC_CHECK(acc__shard_drop(sh, m->params, m->num_params));
    return acc__shard_drop(sh, m->grads, m->num_params);
  }
  for (int i = 0; i < sh->nunits && sh->stage == 2; i++) {
    const acc__shard_unit_t *u = &sh->units[i];
    size_t start = (size_t)sh->srank * u->s;
    start = start < u->n ? start : u->n;
    ACC_CHECK(acc__shard_drop(sh, m->grads + u->off, start));
    ACC_CHECK(acc__shard_drop(sh, m->grads + u->off + start + u->own, u->n - start - u->own));
  }
  return ACC_OK;
}

/* What is offloaded to host memory, in words. */
static const char *offload_words(const acc_shard_t *sh) {
  if (!sh->cfg.offload)
    return "off";
  if (!sh->dev)
    return "no-op on CPU (the state is in host memory)";
  return sh->hostP ? "optimizer state, f32 master and parameter shards in host memory (the "
                     "optimizer steps on the CPU)"
                   : "optimizer state and f32 master shard in host memory (the optimizer steps "
                     "on the CPU)";
}

/* How a device model runs, in words ("" on the host). */
static const char *device_words(const acc_shard_t *sh) {
  if (!sh->dev)
    return "";
  if (sh->lean && sh->stage == 3)
    return "; on the device (NCCL), each layer gathered before its use";
  if (sh->lean)
    return "; on the device (NCCL), each layer's gradient reduce-scattered from one unit buffer "
           "into the owned shard";
  return sh->stage == 3 ? "; on the device (NCCL), every unit gathered before the forward"
                        : "; on the device (NCCL)";
}

static void describe(acc_shard_t *sh) {
  static const char *const names[] = {"NO_SHARD", "stage 1", "SHARD_GRAD_OP", "FULL_SHARD"};
  size_t own = 0;
  for (int i = 0; i < sh->nunits; i++)
    own += sh->units[i].own;
  char hybrid[96] = "";
  if (sh->cfg.hybrid && sh->stage > 0)
    snprintf(hybrid, sizeof hybrid, ", HYBRID_SHARD: within each of %d node%s of %d rank%s",
             sh->ngroups, sh->ngroups == 1 ? "" : "s", sh->sworld, sh->sworld == 1 ? "" : "s");
  snprintf(sh->desc, sizeof sh->desc,
           "ZeRO stage %d (%s) on %d rank%s%s, %d unit%s, %zu of %zu parameters owned; "
           "prefetch: %s; offload: %s%s",
           sh->stage, names[sh->stage], sh->world, sh->world == 1 ? "" : "s", hybrid, sh->nunits,
           sh->nunits == 1 ? "" : "s", own, sh->model->num_params, sh->pf ? "next unit" : "off",
           offload_words(sh), device_words(sh));
}

/* The shard group: the world, or with HYBRID_SHARD this rank's node. */
static acc_result_t shard_group(acc_shard_t *sh) {
  sh->srank = sh->rank, sh->sworld = sh->world, sh->ngroups = 1;
  if (!sh->cfg.hybrid || sh->stage == 0 || sh->world == 1)
    return ACC_OK;
  int members, me, nnodes, rc = acc__node_shape(sh->acc, &members, &me, &nnodes);
  if (rc < 0)
    return acc__set_error(sh->acc, ACC_ERR_UNSUPPORTED,
                          "acc_shard_new: HYBRID_SHARD shards within each node through the node "
                          "groups of the shared-memory collectives, which this process group "
                          "does not have (NBFORK_SHM_COLLECTIVES=0, or a rank could not map "
                          "shared memory): use FULL_SHARD, or turn shared memory on");
  if (rc > 0)
    return acc__set_error(sh->acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_shard_new: HYBRID_SHARD needs nodes of equal sizes (this rank's "
                          "node has %d of %d ranks on %d nodes): use FULL_SHARD",
                          members, sh->world, nnodes);
  sh->srank = me, sh->sworld = members, sh->ngroups = nnodes;
  /* on the host, the replica group's Gloo mesh now (a device model's
   * NCCL groups are split at the first collective) */
  return sh->dev ? ACC_OK : acc__node_replica_connect(sh->acc);
}

/* Whether p is device memory of this rank's accelerator. */
static int on_device(const acc_t *acc, const void *p) {
  return acc->device >= 0 && acc_nccl_is_device_ptr(p);
}

/* A device model (its parameters in device memory, NCCL's collectives):
 * the gradients there too. */
static acc_result_t check_device(acc_t *acc, const acc_model_t *model) {
  const int dp = on_device(acc, model->params), dg = on_device(acc, model->grads);
  if (dp != dg)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_shard_new: the parameters are %s memory but the gradients %s "
                          "memory: both on device %d or both on the host",
                          dp ? "device" : "host", dg ? "device" : "host", acc->device);
  return ACC_OK;
}

static acc_result_t check_new(acc_t *acc, acc_model_t *model, acc_shard_config_t *c) {
  if (!acc || !model || !model->params || !model->grads || !model->num_params)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_shard_new: NULL accelerator/model");
  if (c->stage == ACC_SHARD_FROM_ENV)
    ACC_CHECK(stage_from_env(acc, c));
  if (c->stage < 0 || c->stage > 3)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_shard_new: stage %d not in 0..3",
                          c->stage);
  ACC_CHECK(check_device(acc, model));
  if (!(c->max_grad_norm >= 0))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_shard_new: max_grad_norm %g < 0",
                          c->max_grad_norm);
  return ACC_OK;
}

acc_shard_t *acc_shard_new(acc_t *acc, acc_model_t *model, const acc_shard_config_t *cfg) {
  acc_shard_config_t c = cfg ? *cfg : (acc_shard_config_t)ACC_SHARD_CONFIG_INIT;
  if (check_new(acc, model, &c) != ACC_OK)
    return NULL;
  acc_shard_t *sh = calloc(1, sizeof *sh);
  if (!sh) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_shard_new: no memory");
    return NULL;
  }
  *sh = (acc_shard_t){.acc = acc,
                      .model = model,
                      .cfg = c,
                      .stage = c.stage,
                      .rank = acc_rank(acc),
                      .world = acc_world_size(acc),
                      .grad_norm = NAN,
                      .gathered = 1,
                      .dev = on_device(acc, model->params)};
  /* the toolkit MLP, on the host or a device, runs its layers under the
   * unit hooks; a device one without prefetch (its gathers are NCCL's on
   * the accelerator's stream, not a helper thread's) and lean: its full
   * device gradient buffer (stage 3: and parameter buffer) freed while
   * sharded (stage 2 on one rank owns every element: nothing to free) */
  const int hooks = model->mlp != NULL;
  sh->offload = sh->dev && c.offload;
  sh->hostP = sh->offload && sh->stage == 3;
  acc_result_t r = shard_group(sh);
  sh->lean = sh->dev && hooks && (sh->stage == 3 || (sh->stage == 2 && sh->sworld > 1));
  if (r != ACC_OK || layout(sh) != ACC_OK || acc__shard_offload_new(sh) != ACC_OK ||
      make_optimizers(sh) != ACC_OK ||
      (sh->stage == 3 && hooks && !sh->dev && c.prefetch && sh->sworld > 1 &&
       !(sh->pf = acc__shard_pf_new(sh))) ||
      take_shards(sh) != ACC_OK || unit_buffers(sh) != ACC_OK) {
    acc_shard_destroy(&sh);
    return NULL;
  }
  sh->gathered = sh->stage < 3;
  sh->uheld = sh->ugrad = -1;
  if (hooks && sh->stage >= 2) {
    acc__mlp_set_unit_hook(model->mlp, acc__shard_mlp_hook, sh);
    sh->hooked = 1;
  }
  describe(sh);
  acc__shard_sample(sh);
  return sh;
}

void acc_shard_destroy(acc_shard_t **sh_p) {
  if (!sh_p || !*sh_p)
    return;
  acc_shard_t *sh = *sh_p;
  *sh_p = NULL;
  if (sh->hooked)
    acc__mlp_set_unit_hook(sh->model->mlp, NULL, NULL);
  if (sh->stage == 3 && sh->P) /* leave the model whole */
    (void)acc_shard_gather_params(sh);
  (void)acc__shard_whole(sh, 1, 1); /* a lean one's gradients back, zeros */
  acc__shard_pf_destroy(&sh->pf);
  for (int i = 0; sh->units && i < sh->nunits; i++)
    acc_optim_destroy(&sh->units[i].opt);
  free(sh->units);
  acc__shard_offload_free(sh);
  if (sh->hostP) /* offloaded: host memory */
    free(sh->P), sh->P = NULL;
  acc__shard_free(sh, &sh->P);
  acc__shard_free(sh, &sh->G);
  if (sh->buf == sh->ubuf[0])
    sh->buf = NULL; /* a lean device MLP's staging is its unit buffer */
  acc__shard_free(sh, &sh->buf);
  for (int i = 0; i < 2; i++)
    if (sh->dev)
      acc__shard_free(sh, &sh->ubuf[i]);
    else
      free(sh->ubuf[i]);
  free(sh);
}

int acc_shard_stage(const acc_shard_t *sh) {
  return sh ? sh->stage : -1;
}

const char *acc_shard_describe(const acc_shard_t *sh) {
  return sh ? sh->desc : "";
}

double acc_shard_grad_norm(const acc_shard_t *sh) {
  return sh ? sh->grad_norm : NAN;
}

void acc_shard_set_lr(acc_shard_t *sh, float lr) {
  for (int i = 0; sh && i < sh->nunits; i++)
    acc_optim_set_lr(sh->units[i].opt, lr);
}
