/*
 * ln_config.c — Accelerate's config YAML through libyaml's document API.
 */
#define _GNU_SOURCE
#include "ln_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "nbf_util.h"

/* Keys of Accelerate features nbfork does not have: accepted while off. */
static const struct {
  const char *key, *feature;
} lacking[] = {
    {"megatron_lm_config", "Megatron-LM"},
    {"dynamo_config", "torch dynamo"},
    {"dynamo_backend", "torch dynamo"},
    {"ipex_config", "IPEX"},
    {"fp8_config", "FP8 training"},
    {"parallelism_config", "N-D parallelism"},
    {"downcast_bf16", "TPU bf16 downcasting"},
    {"tpu_env", "TPU"},
    {"tpu_name", "TPU"},
    {"tpu_zone", "TPU"},
    {"tpu_use_cluster", "TPU"},
    {"tpu_use_sudo", "TPU"},
    {"commands", "TPU pod commands"},
    {"command_file", "TPU pod commands"},
    {"enable_cpu_affinity", "CPU affinity"},
    {"use_mps_device", "Apple MPS"},
    {"num_cpu_threads_per_process", "num_cpu_threads_per_process (set OMP_NUM_THREADS)"},
};

/* "Off" as Accelerate writes it: null, empty, false/no/NO/0, {} or []. */
static int is_off(const yaml_node_t *n) {
  if (n->type == YAML_MAPPING_NODE)
    return n->data.mapping.pairs.top == n->data.mapping.pairs.start;
  if (n->type == YAML_SEQUENCE_NODE)
    return n->data.sequence.items.top == n->data.sequence.items.start;
  const char *v = (const char *)n->data.scalar.value;
  return !*v || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0") ||
         !strcmp(v, "null") || !strcmp(v, "~");
}

static int at(const char *path, const yaml_mark_t *m, char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "%s:%zu:%zu: %s", path, m->line + 1, m->column + 1, what);
  return -1;
}

/* mpirun_config: {mpirun_hostfile: F, mpirun_ccl: N} (Accelerate's MPI). */
static int mpirun_config(ln_cli_t *c, yaml_document_t *d, yaml_node_t *map, const char *path,
                         char *err, size_t errlen) {
  if (map->type != YAML_MAPPING_NODE)
    return is_off(map) ? 0
                       : at(path, &map->start_mark, err, errlen, "mpirun_config must be a mapping");
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(d, p->key), *v = yaml_document_get_node(d, p->value);
    const char *key = (const char *)k->data.scalar.value;
    if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
      return at(path, &k->start_mark, err, errlen, "mpirun_config holds key: value pairs");
    if (!strcmp(key, "mpirun_ccl"))
      continue; /* oneCCL workers per node: Intel's CCL, not used by nbfork */
    if (strcmp(key, "mpirun_hostfile"))
      return at(path, &k->start_mark, err, errlen,
                "unknown key in mpirun_config (known: mpirun_hostfile, mpirun_ccl)");
    char msg[512];
    if (*v->data.scalar.value &&
        ln_cli_set(c, "mpirun_hostfile", (const char *)v->data.scalar.value, msg, sizeof msg))
      return at(path, &v->start_mark, err, errlen, msg);
  }
  return 0;
}

/* fsdp_config / deepspeed_config keys: what nbfork does with each. A key
 * with a setting is passed to ln_cli_set under that name; "" = accepted
 * with no effect (wrapping and loading hints: nbfork's wrap units are
 * the layers); NULL = refused when on. */
static const struct {
  const char *key, *setting, *why;
} section_keys[] = {
    {"fsdp_sharding_strategy", "fsdp_sharding_strategy", NULL},
    {"fsdp_offload_params", "fsdp_offload_params", NULL},
    {"fsdp_state_dict_type", "fsdp_state_dict_type", NULL},
    {"fsdp_auto_wrap_policy", "", NULL},
    {"fsdp_transformer_layer_cls_to_wrap", "", NULL},
    {"fsdp_min_num_params", "", NULL},
    {"fsdp_backward_prefetch", "fsdp_backward_prefetch", NULL},
    {"fsdp_backward_prefetch_policy", "fsdp_backward_prefetch_policy", NULL},
    {"fsdp_forward_prefetch", "fsdp_forward_prefetch", NULL},
    {"fsdp_use_orig_params", "", NULL},
    {"fsdp_sync_module_states", "", NULL},
    {"fsdp_cpu_ram_efficient_loading", "", NULL},
    {"fsdp_reshard_after_forward", "", NULL},
    {"fsdp_version", "", NULL},
    {"fsdp_activation_checkpointing", NULL, "activation checkpointing"},
    {"zero_stage", "zero_stage", NULL},
    {"offload_optimizer_device", "offload_optimizer_device", NULL},
    {"offload_param_device", "offload_optimizer_device", NULL},
    {"deepspeed_multinode_launcher", "", NULL},
    {"zero3_init_flag", "", NULL},
    {"zero3_save_16bit_model", "", NULL},
    {"gradient_accumulation_steps", NULL,
     "gradient accumulation from the DeepSpeed section (use acc_config_t or the Trainer's "
     "--gradient_accumulation_steps)"},
    {"gradient_clipping", NULL,
     "gradient clipping from the DeepSpeed section (use acc_shard_config_t.max_grad_norm or the "
     "Trainer's --max_grad_norm)"},
};

/* DeepSpeed's JSON: zero_optimization.stage and the offload devices. */
static int deepspeed_json(ln_cli_t *c, const char *file, char *msg, size_t n) {
  json_error_t je;
  json_t *root = json_load_file(file, 0, &je);
  if (!root)
    return snprintf(msg, n, "deepspeed_config_file %s: %s (line %d)", file, je.text, je.line), -1;
  json_t *z = json_object_get(root, "zero_optimization");
  json_t *stage = json_object_get(z, "stage");
  int rc = 0;
  char v[8];
  if (stage && json_is_integer(stage)) {
    snprintf(v, sizeof v, "%lld", (long long)json_integer_value(stage));
    rc = ln_cli_set(c, "zero_stage", v, msg, n);
  }
  const char *sub[] = {"offload_optimizer", "offload_param"};
  for (int i = 0; i < 2 && rc == 0; i++) {
    const char *dev = json_string_value(json_object_get(json_object_get(z, sub[i]), "device"));
    if (dev)
      rc = ln_cli_set(c, "offload_optimizer_device", dev, msg, n);
  }
  json_decref(root);
  return rc;
}

/* fsdp_config or deepspeed_config: read when distributed_type names it
 * (else ignored, as Accelerate ignores the section of another type). */
static int section(ln_cli_t *c, yaml_document_t *d, yaml_node_t *map, const char *name,
                   const char *path, char *err, size_t errlen) {
  int mine = !strcmp(name, "fsdp_config") ? !strcmp(c->distributed_type, "FSDP")
                                          : !strcmp(c->distributed_type, "DEEPSPEED");
  if (map->type != YAML_MAPPING_NODE || !mine)
    return map->type == YAML_MAPPING_NODE || is_off(map)
               ? 0
               : at(path, &map->start_mark, err, errlen, "expected a mapping");
  char msg[768];
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(d, p->key), *v = yaml_document_get_node(d, p->value);
    const char *key = (const char *)k->data.scalar.value;
    if (v->type != YAML_SCALAR_NODE)
      continue; /* lists (fsdp_transformer_layer_cls_to_wrap): hints */
    const char *val = (const char *)v->data.scalar.value;
    if (!strcmp(key, "deepspeed_config_file")) {
      if (*val && deepspeed_json(c, val, msg, sizeof msg))
        return at(path, &v->start_mark, err, errlen, msg);
      continue;
    }
    size_t i = 0, nk = sizeof section_keys / sizeof section_keys[0];
    while (i < nk && strcmp(key, section_keys[i].key))
      i++;
    if (i == nk) {
      snprintf(msg, sizeof msg, "unknown key '%s' in %s", key, name);
      return at(path, &k->start_mark, err, errlen, msg);
    }
    if (!section_keys[i].setting) {
      if (is_off(v) || (!strcmp(key, "gradient_accumulation_steps") && !strcmp(val, "1")))
        continue;
      snprintf(msg, sizeof msg, "%s: %s is not supported by nbfork; remove the key", key,
               section_keys[i].why);
      return at(path, &k->start_mark, err, errlen, msg);
    }
    if (*section_keys[i].setting && ln_cli_set(c, section_keys[i].setting, val, msg, sizeof msg))
      return at(path, &v->start_mark, err, errlen, msg);
  }
  return 0;
}

/* One top-level key. */
static int apply_key(ln_cli_t *c, yaml_document_t *d, yaml_node_t *k, yaml_node_t *v,
                     const char *path, char *err, size_t errlen) {
  const char *key = (const char *)k->data.scalar.value;
  char msg[768];
  for (size_t i = 0; i < sizeof lacking / sizeof lacking[0]; i++)
    if (!strcmp(key, lacking[i].key)) {
      if (is_off(v) || (!strcmp(key, "dynamo_backend") && v->type == YAML_SCALAR_NODE &&
                        !strcmp((const char *)v->data.scalar.value, "NO")))
        return 0;
      snprintf(msg, sizeof msg,
               "%s: %s is not supported by nbfork; remove the key (or set it off) to launch "
               "without it",
               key, lacking[i].feature);
      return at(path, &k->start_mark, err, errlen, msg);
    }
  if (!strcmp(key, "mpirun_config"))
    return mpirun_config(c, d, v, path, err, errlen);
  if (!strcmp(key, "fsdp_config") || !strcmp(key, "deepspeed_config"))
    return section(c, d, v, key, path, err, errlen);
  if (v->type != YAML_SCALAR_NODE)
    return at(path, &v->start_mark, err, errlen, "expected a single value");
  const char *val = (const char *)v->data.scalar.value;
  if (!strcmp(key, "compute_environment")) {
    if (strcmp(val, "LOCAL_MACHINE"))
      return at(path, &v->start_mark, err, errlen,
                "compute_environment: only LOCAL_MACHINE is supported by nbfork (not SageMaker)");
    return 0;
  }
  if (!strcmp(key, "distributed_type")) {
    if (!strcmp(val, "MULTI_CPU"))
      c->cpu = 1;
    else if (strcmp(val, "NO") && strcmp(val, "MULTI_GPU") && strcmp(val, "FSDP") &&
             strcmp(val, "DEEPSPEED")) {
      snprintf(msg, sizeof msg,
               "distributed_type: %s is not supported by nbfork (accepted: NO, MULTI_CPU, "
               "MULTI_GPU, FSDP, DEEPSPEED)",
               val);
      return at(path, &v->start_mark, err, errlen, msg);
    }
    return 0; /* FSDP / DEEPSPEED: apply_document set the default sharding */
  }
  if (!ln_cli_known(key) || !strcmp(key, "config_file") || !strcmp(key, "cpu") ||
      !strcmp(key, "quiet")) {
    snprintf(msg, sizeof msg, "unknown config key '%s' (Accelerate's keys are accepted)", key);
    return at(path, &k->start_mark, err, errlen, msg);
  }
  if (!strcmp(key, "gpu_ids") && !*val)
    return 0;
  if (ln_cli_set(c, key, val, msg, sizeof msg))
    return at(path, &v->start_mark, err, errlen, msg);
  return 0;
}

static int apply_document(ln_cli_t *c, yaml_document_t *d, const char *path, char *err,
                          size_t errlen) {
  yaml_node_t *root = yaml_document_get_root_node(d);
  if (!root)
    return 0; /* an empty file: no settings */
  if (root->type != YAML_MAPPING_NODE)
    return at(path, &root->start_mark, err, errlen, "expected a mapping of key: value");
  /* distributed_type first: it decides whether fsdp_config or
   * deepspeed_config is read, wherever the key sits */
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = yaml_document_get_node(d, p->key), *v = yaml_document_get_node(d, p->value);
    if (k->type == YAML_SCALAR_NODE && v->type == YAML_SCALAR_NODE &&
        !strcmp((const char *)k->data.scalar.value, "distributed_type"))
      snprintf(c->distributed_type, sizeof c->distributed_type, "%s",
               (const char *)v->data.scalar.value);
  }
  char msg[256];
  /* Accelerate's defaults: FSDP shards fully, DeepSpeed at ZeRO stage 2 */
  if (!strcmp(c->distributed_type, "FSDP") &&
      ln_cli_set(c, "sharding", "FULL_SHARD", msg, sizeof msg))
    return at(path, &root->start_mark, err, errlen, msg);
  if (!strcmp(c->distributed_type, "DEEPSPEED") &&
      ln_cli_set(c, "sharding", "zero2", msg, sizeof msg))
    return at(path, &root->start_mark, err, errlen, msg);
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = yaml_document_get_node(d, p->key), *v = yaml_document_get_node(d, p->value);
    if (k->type != YAML_SCALAR_NODE)
      return at(path, &k->start_mark, err, errlen, "keys must be plain names");
    if (apply_key(c, d, k, v, path, err, errlen))
      return -1;
  }
  return 0;
}

int ln_config_load(ln_cli_t *c, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read config file %s: %s", path, NBF_STRERROR(errno));
    return -1;
  }
  yaml_parser_t parser;
  yaml_document_t doc;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_file(&parser, f);
  int rc;
  if (!yaml_parser_load(&parser, &doc)) {
    char msg[256];
    snprintf(msg, sizeof msg, "not valid YAML: %s%s%s", parser.problem ? parser.problem : "error",
             parser.context ? " " : "", parser.context ? parser.context : "");
    rc = at(path, &parser.problem_mark, err, errlen, msg);
  } else {
    rc = apply_document(c, &doc, path, err, errlen);
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&parser);
  fclose(f);
  return rc;
}

/* mkdir -p of path's parent directory. */
static int make_parents(const char *path) {
  char dir[4096];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
    return errno = ENAMETOOLONG, -1;
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return 0;
}

static int emit_scalar(yaml_emitter_t *e, const char *v, yaml_scalar_style_t style) {
  yaml_event_t ev;
  yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), 1, 1, style);
  return yaml_emitter_emit(e, &ev);
}

static int emit_items(yaml_emitter_t *e, const ln_config_item_t *items, int n) {
  yaml_event_t ev;
  int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(e, &ev);
  ok = ok && yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
       yaml_emitter_emit(e, &ev);
  ok = ok && yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) &&
       yaml_emitter_emit(e, &ev);
  for (int i = 0; ok && i < n; i++)
    ok = emit_scalar(e, items[i].key, YAML_PLAIN_SCALAR_STYLE) &&
         emit_scalar(e, items[i].value,
                     items[i].quoted ? YAML_SINGLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE);
  ok = ok && yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
  ok = ok && yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(e, &ev);
  ok = ok && yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(e, &ev);
  return ok ? 0 : -1;
}

int ln_config_write(const char *path, const ln_config_item_t *items, int n, char *err,
                    size_t errlen) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = make_parents(path) == 0 ? fopen(tmp, "wb") : NULL;
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", path, NBF_STRERROR(errno));
    return -1;
  }
  yaml_emitter_t e;
  yaml_emitter_initialize(&e);
  yaml_emitter_set_output_file(&e, f);
  int rc = emit_items(&e, items, n);
  if (rc)
    snprintf(err, errlen, "cannot write %s: %s", path,
             e.problem ? e.problem : "YAML emitter error");
  yaml_emitter_delete(&e);
  if (fclose(f) != 0 && rc == 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, NBF_STRERROR(errno));
    rc = -1;
  }
  if (rc == 0 && rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", path, NBF_STRERROR(errno));
    rc = -1;
  }
  if (rc)
    unlink(tmp);
  return rc;
}
