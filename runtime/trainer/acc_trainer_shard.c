/*
 * acc_trainer_shard.c — the Trainer's sharding settings from
 * Transformers' --fsdp, --fsdp_config and --deepspeed (nbf_trainer.h
 * says which keys are honoured), or from the launcher's environment
 * (Accelerate's FSDP / DeepSpeed names, read by acc_shard_new), into an
 * acc_shard_config_t. JSON through jansson.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "acc_trainer_internal.h"
#include "nbf_param.h"

static acc_result_t bad(acc_t *acc, const char *msg, const char *what) {
  return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, msg, what);
}

/* --fsdp's words -> stage, offload. */
static acc_result_t fsdp_words(acc_t *acc, const char *s, acc_shard_config_t *c) {
  static const struct {
    const char *word;
    int stage; /* -1: no stage change */
    int offload, hybrid;
  } W[] = {{"full_shard", 3, 0, 0},   {"shard_grad_op", 2, 0, 0},      {"no_shard", 0, 0, 0},
           {"hybrid_shard", 3, 0, 1}, {"hybrid_shard_zero2", 2, 0, 1}, {"offload", -1, 1, 0},
           {"auto_wrap", -1, 0, 0}};
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  c->stage = 3; /* Accelerate's default strategy: FULL_SHARD */
  for (char *save = NULL, *w = strtok_r(buf, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
    size_t i = 0;
    while (i < sizeof W / sizeof W[0] && strcasecmp(w, W[i].word))
      i++;
    if (i == sizeof W / sizeof W[0])
      return bad(acc,
                 "--fsdp: unknown option '%s' (expected full_shard, shard_grad_op, no_shard, "
                 "hybrid_shard, hybrid_shard_zero2, offload, auto_wrap)",
                 w);
    if (W[i].stage >= 0)
      c->stage = W[i].stage;
    c->offload |= W[i].offload;
    c->hybrid |= W[i].hybrid;
  }
  return ACC_OK;
}

/* A JSON object from inline text ('{' first) or a file. */
static json_t *load_json(acc_t *acc, const char *flag, const char *v) {
  json_error_t e;
  json_t *o = v[0] == '{' ? json_loads(v, 0, &e) : json_load_file(v, 0, &e);
  if (!o || !json_is_object(o)) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "--%s %s: %s (line %d)", flag, v,
                   o ? "not a JSON object" : e.text, e.line);
    json_decref(o);
    return NULL;
  }
  return o;
}

static int truthy(const json_t *v) {
  return json_is_true(v) || (json_is_string(v) && !strcasecmp(json_string_value(v), "true"));
}

/* fsdp_config's backward_prefetch (k; "backward_pre", "backward_post" or
 * "no_prefetch", Transformers' default) and forward_prefetch (a boolean,
 * default false) set or clear their bit of *prefetch; another value is
 * refused, naming `key` as written. */
static acc_result_t prefetch_option(acc_t *acc, const char *k, const char *key, const json_t *val,
                                    int *prefetch) {
  const char *s = json_is_string(val) ? json_string_value(val) : "";
  int bit = ACC_SHARD_PREFETCH_FORWARD, on;
  if (!strcmp(k, "backward_prefetch")) {
    bit = ACC_SHARD_PREFETCH_BACKWARD;
    on = !strcasecmp(s, "backward_pre") || !strcasecmp(s, "backward_post");
    if (!on && strcasecmp(s, "no_prefetch"))
      return bad(acc,
                 "--fsdp_config: %s: expected \"backward_pre\", \"backward_post\" or "
                 "\"no_prefetch\"",
                 key);
  } else if (json_is_boolean(val) || json_is_string(val)) {
    on = truthy(val);
  } else {
    return bad(acc, "--fsdp_config: %s: expected true or false", key);
  }
  *prefetch = on ? *prefetch | bit : *prefetch & ~bit;
  return ACC_OK;
}

/* --fsdp_config's keys. */
static acc_result_t fsdp_config(acc_t *acc, const char *v, acc_shard_config_t *c, int *sdt) {
  static const char *const hints[] = {"min_num_params",     "transformer_layer_cls_to_wrap",
                                      "limit_all_gathers",  "use_orig_params",
                                      "sync_module_states", "cpu_ram_efficient_loading",
                                      "auto_wrap_policy",   "version"};
  json_t *o = load_json(acc, "fsdp_config", v), *val;
  const char *key;
  if (!o)
    return ACC_ERR_INVALID_ARGUMENT;
  acc_result_t r = ACC_OK;
  json_object_foreach(o, key, val) {
    const char *k = strncmp(key, "fsdp_", 5) ? key : key + 5;
    size_t h = 0;
    while (h < sizeof hints / sizeof hints[0] && strcmp(k, hints[h]))
      h++;
    if (!strcmp(k, "offload_params")) {
      c->offload |= truthy(val);
    } else if (!strcmp(k, "backward_prefetch") || !strcmp(k, "forward_prefetch")) {
      r = prefetch_option(acc, k, key, val, &c->prefetch);
    } else if (!strcmp(k, "state_dict_type") && json_is_string(val) &&
               (!strcmp(json_string_value(val), "FULL_STATE_DICT") ||
                !strcmp(json_string_value(val), "SHARDED_STATE_DICT"))) {
      *sdt = strcmp(json_string_value(val), "FULL_STATE_DICT") ? ACC_SHARDED_STATE_DICT
                                                               : ACC_FULL_STATE_DICT;
    } else if ((!strcmp(k, "activation_checkpointing") || !strcmp(k, "xla")) && truthy(val)) {
      r = acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                         "--fsdp_config: %s is not implemented in nbfork (set it false)", key);
    } else if (h == sizeof hints / sizeof hints[0] && strcmp(k, "activation_checkpointing") &&
               strcmp(k, "xla")) {
      r = bad(acc, "--fsdp_config: unknown or unsupported key '%s'", key);
    }
    if (r != ACC_OK)
      break;
  }
  json_decref(o);
  return r;
}

/* A DeepSpeed value that must be "auto" or equal the arguments'. */
static acc_result_t ds_match(acc_t *acc, const json_t *o, const char *key, double want) {
  const json_t *v = json_object_get(o, key);
  if (!v || (json_is_string(v) && !strcmp(json_string_value(v), "auto")))
    return ACC_OK;
  if (json_is_number(v) && fabs(json_number_value(v) - want) <= 1e-12 * fabs(want))
    return ACC_OK;
  return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                        "--deepspeed: %s is %g there but %g in the arguments (set it to \"auto\")",
                        key, json_is_number(v) ? json_number_value(v) : NAN, want);
}

static acc_result_t ds_offload(acc_t *acc, const json_t *z, const char *key, int *offload) {
  const char *d = json_string_value(json_object_get(json_object_get(z, key), "device"));
  if (!d || !strcmp(d, "none"))
    return ACC_OK;
  if (strcmp(d, "cpu"))
    return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                          "--deepspeed: zero_optimization.%s.device %s: only cpu or none", key, d);
  *offload = 1;
  return ACC_OK;
}

static acc_result_t deepspeed(acc_t *acc, const acc_training_args_t *a, acc_shard_config_t *c) {
  json_t *o = load_json(acc, "deepspeed", a->deepspeed);
  if (!o)
    return ACC_ERR_INVALID_ARGUMENT;
  const json_t *z = json_object_get(o, "zero_optimization"), *st = json_object_get(z, "stage");
  acc_result_t r = ACC_OK;
  c->stage = 0; /* DeepSpeed's default */
  if (st && (!json_is_integer(st) || json_integer_value(st) < 0 || json_integer_value(st) > 3))
    r = bad(acc, "--deepspeed: zero_optimization.stage must be 0, 1, 2 or 3 (%s)", a->deepspeed);
  else if (st)
    c->stage = (int)json_integer_value(st);
  if (r == ACC_OK)
    r = ds_offload(acc, z, "offload_optimizer", &c->offload);
  if (r == ACC_OK)
    r = ds_offload(acc, z, "offload_param", &c->offload);
  if (r == ACC_OK)
    r = ds_match(acc, o, "gradient_accumulation_steps", a->gradient_accumulation_steps);
  if (r == ACC_OK)
    r = ds_match(acc, o, "train_micro_batch_size_per_gpu", a->per_device_train_batch_size);
  if (r == ACC_OK)
    r = ds_match(acc, o, "gradient_clipping", a->max_grad_norm);
  json_decref(o);
  return r;
}

int tr_shard_wanted(acc_t *acc, const acc_training_args_t *a) {
  (void)acc;
  return a->fsdp[0] || a->deepspeed[0] || nbf_param_ACCELERATE_USE_FSDP() == 1 ||
         nbf_param_ACCELERATE_USE_DEEPSPEED() == 1;
}

acc_result_t tr_shard_config(acc_t *acc, const acc_training_args_t *a, acc_shard_config_t *c,
                             int *sdt) {
  *c = (acc_shard_config_t)ACC_SHARD_CONFIG_INIT; /* the stage from the environment */
  *sdt = ACC_STATE_DICT_FROM_ENV;
  if (a->fsdp[0] && a->deepspeed[0])
    return bad(acc, "--fsdp and --deepspeed cannot both be given (%s)", "choose one");
  if (a->fsdp_config[0] && !a->fsdp[0])
    return bad(acc, "--fsdp_config %s needs --fsdp (e.g. \"full_shard auto_wrap\")",
               a->fsdp_config);
  if (a->fsdp[0])
    ACC_CHECK(fsdp_words(acc, a->fsdp, c));
  if (a->fsdp_config[0])
    ACC_CHECK(fsdp_config(acc, a->fsdp_config, c, sdt));
  if (a->deepspeed[0])
    ACC_CHECK(deepspeed(acc, a, c));
  if (strcmp(a->optim, "sgd") && strcmp(a->optim, "adamw"))
    return bad(acc,
               "--optim %s: sharded training (--fsdp, --deepspeed or the launcher's FSDP/"
               "DeepSpeed) runs sgd or adamw only",
               a->optim);
  c->adamw = !strcmp(a->optim, "adamw");
  c->lr = (float)a->learning_rate;
  c->beta1 = (float)a->adam_beta1;
  c->beta2 = (float)a->adam_beta2;
  c->eps = (float)a->adam_epsilon;
  c->weight_decay = (float)a->weight_decay;
  double momentum = tr_kwarg(a->optim_args, "momentum");
  c->momentum = isnan(momentum) ? 0.0f : (float)momentum;
  c->max_grad_norm = a->max_grad_norm;
  return ACC_OK;
}
