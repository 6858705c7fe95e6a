/*
 * ln_options.c — parse and validate launch options. Every rejection says
 * which option, what was given, what is accepted.
 */
#define _GNU_SOURCE
#include "ln_options.h"
#include "nbf_param.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void ln_options_init(ln_options_t *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->mixed_precision, sizeof o->mixed_precision, "no");
  o->use_port = 29500;
  snprintf(o->master_addr, sizeof o->master_addr, "127.0.0.1");
  o->num_nodes = 1;
  snprintf(o->rdzv_backend, sizeof o->rdzv_backend, "static");
  o->rdzv_timeout_s = 300;
  o->monitor_interval_s = 0.1;
  snprintf(o->sharding, sizeof o->sharding, "no");
  snprintf(o->state_dict_type, sizeof o->state_dict_type, "FULL_STATE_DICT");
  snprintf(o->backward_prefetch, sizeof o->backward_prefetch, "NO_PREFETCH"); /* Accelerate's defaults */
  o->forward_prefetch = 0;
  const char *secret = nbf_param_raw(NBF_P_NBFORK_RDZV_SECRET);
  if (secret && strlen(secret) < sizeof o->rdzv_secret)
    memcpy(o->rdzv_secret, secret, strlen(secret) + 1);
}

static const char *const known[] = {"num_processes",    "mixed_precision",
                                    "use_port",         "master_addr",
                                    "node_rank",        "num_nodes",
                                    "rdzv_backend",     "rdzv_endpoint",
                                    "rdzv_id",          "rdzv_timeout",
                                    "rdzv_conf",        "max_restarts",
                                    "monitor_interval", "log_line_prefix_template",
                                    "sharding",         "offload",
                                    "state_dict_type",  "backward_prefetch",
                                    "forward_prefetch", NULL};

/* FSDP's strategies by number (Accelerate's config writes 1..5) and name. */
static const char *const fsdp_names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                         "_HYBRID_SHARD_ZERO2"};

/* The sharding options; -2 when `key` is not one of them, else 0/-1 with
 * *accepted set (the caller words the error). */
static int sharding_set(ln_options_t *o, const char *key, const char *v, const char **accepted) {
  if (!strcmp(key, "sharding")) {
    *accepted = "no, FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2 (or "
                "FSDP's numbers 1..5), "
                "zero0, zero1, zero2, zero3";
    int ok = !strcmp(v, "no") || (!strncmp(v, "zero", 4) && v[4] >= '0' && v[4] <= '3' && !v[5]);
    for (int i = 0; i < 5 && !ok; i++)
      if (!strcasecmp(v, fsdp_names[i]) || (v[0] == '1' + i && !v[1])) {
        v = fsdp_names[i];
        ok = 1;
      }
    return ok ? ln_copy_text(o->sharding, sizeof o->sharding, v) : -1;
  }
  if (!strcmp(key, "offload")) {
    *accepted = "true or false";
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "cpu"))
      return o->offload = 1, 0;
    if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "none"))
      return o->offload = 0, 0;
    return -1;
  }
  if (!strcmp(key, "backward_prefetch")) {
    *accepted = "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH";
    if (strcmp(v, "BACKWARD_PRE") && strcmp(v, "BACKWARD_POST") && strcmp(v, "NO_PREFETCH"))
      return -1;
    return ln_copy_text(o->backward_prefetch, sizeof o->backward_prefetch, v);
  }
  if (!strcmp(key, "forward_prefetch")) {
    *accepted = "true or false";
    if (!strcasecmp(v, "true") || !strcmp(v, "1"))
      return o->forward_prefetch = 1, 0;
    if (!strcasecmp(v, "false") || !strcmp(v, "0"))
      return o->forward_prefetch = 0, 0;
    return -1;
  }
  if (!strcmp(key, "state_dict_type")) {
    *accepted = "FULL_STATE_DICT or SHARDED_STATE_DICT";
    if (strcmp(v, "FULL_STATE_DICT") && strcmp(v, "SHARDED_STATE_DICT"))
      return -1;
    return ln_copy_text(o->state_dict_type, sizeof o->state_dict_type, v);
  }
  return -2;
}

void ln_options_sharding_env(const ln_options_t *o) {
  if (!strcmp(o->sharding, "no"))
    return;
  if (!strncmp(o->sharding, "zero", 4)) {
    nbf_param_set(NBF_P_ACCELERATE_USE_DEEPSPEED, "true");
    nbf_param_set(NBF_P_ACCELERATE_DEEPSPEED_ZERO_STAGE, o->sharding + 4);
    nbf_param_set(NBF_P_ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE, o->offload ? "cpu" : "none");
    return;
  }
  nbf_param_set(NBF_P_ACCELERATE_USE_FSDP, "true");
  nbf_param_set(NBF_P_FSDP_SHARDING_STRATEGY, o->sharding);
  nbf_param_set(NBF_P_FSDP_OFFLOAD_PARAMS, o->offload ? "true" : "false");
  nbf_param_set(NBF_P_FSDP_STATE_DICT_TYPE, o->state_dict_type);
  nbf_param_set(NBF_P_FSDP_BACKWARD_PREFETCH, o->backward_prefetch);
  nbf_param_set(NBF_P_FSDP_FORWARD_PREFETCH, o->forward_prefetch ? "true" : "false");
}

int ln_parse_int(const char *v, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return -1;
  *out = (int)x;
  return 0;
}

int ln_copy_text(char *dst, size_t cap, const char *v) {
  if (strlen(v) >= cap)
    return -1;
  memcpy(dst, v, strlen(v) + 1);
  return 0;
}

/* torch's rdzv_conf syntax, key=value[,key=value]: nbfork knows "secret"
 * and torch's "join_timeout" (the command line has no rdzv_timeout). */
static int parse_rdzv_conf(ln_options_t *o, const char *v) {
  char copy[512], *save = NULL;
  if (ln_copy_text(copy, sizeof copy, v) || !*v)
    return -1;
  for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    if (!strncmp(kv, "secret=", 7) && kv[7]) {
      if (ln_copy_text(o->rdzv_secret, sizeof o->rdzv_secret, kv + 7))
        return -1;
    } else if (!strncmp(kv, "join_timeout=", 13)) {
      if (ln_parse_int(kv + 13, 1, 86400, &o->rdzv_timeout_s))
        return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

int ln_options_set(ln_options_t *o, const char *key, const char *v, char *err, size_t errlen) {
  int bad = 0;
  const char *accepted = "";
  int sh = sharding_set(o, key, v, &accepted);
  if (sh != -2) {
    bad = sh;
  } else if (!strcmp(key, "num_processes")) {
    bad = ln_parse_int(v, 1, 4096, &o->num_processes);
    accepted = "an integer >= 1";
  } else if (!strcmp(key, "mixed_precision")) {
    bad = strcmp(v, "no") && strcmp(v, "fp16") && strcmp(v, "bf16");
    if (!bad)
      ln_copy_text(o->mixed_precision, sizeof o->mixed_precision, v);
    accepted = "no, fp16 or bf16";
  } else if (!strcmp(key, "use_port")) {
    bad = ln_parse_int(v, 1, 65535, &o->use_port);
    accepted = "a TCP port 1..65535";
  } else if (!strcmp(key, "master_addr")) {
    bad = !*v || ln_copy_text(o->master_addr, sizeof o->master_addr, v);
    accepted = "a host name or IP address";
  } else if (!strcmp(key, "node_rank")) {
    bad = ln_parse_int(v, 0, 1 << 20, &o->node_rank);
    accepted = "an integer >= 0";
  } else if (!strcmp(key, "num_nodes")) {
    bad = ln_parse_int(v, 1, 1 << 20, &o->num_nodes);
    accepted = "an integer >= 1";
  } else if (!strcmp(key, "rdzv_backend")) {
    bad = strcmp(v, "static") != 0;
    accepted = "static (the launcher of node_rank 0 hosts the store)";
  } else if (!strcmp(key, "rdzv_endpoint")) {
    bad = ln_copy_text(o->rdzv_endpoint, sizeof o->rdzv_endpoint, v) || !strchr(v, ':');
    accepted = "host:port";
  } else if (!strcmp(key, "rdzv_id")) {
    bad = ln_copy_text(o->rdzv_id, sizeof o->rdzv_id, v);
    for (const char *p = v; !bad && *p; p++)
      bad = !(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.');
    accepted = "letters, digits, '-', '_' or '.' (at most 127)";
  } else if (!strcmp(key, "rdzv_timeout")) {
    bad = ln_parse_int(v, 1, 86400, &o->rdzv_timeout_s);
    accepted = "seconds, an integer >= 1";
  } else if (!strcmp(key, "rdzv_conf")) {
    accepted = "secret=TEXT (the job's shared secret, at most 255 characters, no comma) and/or "
               "join_timeout=SECONDS (as rdzv_timeout), separated by a comma";
    bad = parse_rdzv_conf(o, v);
  } else if (!strcmp(key, "max_restarts")) {
    bad = ln_parse_int(v, 0, 1000, &o->max_restarts);
    accepted = "an integer >= 0";
  } else if (!strcmp(key, "monitor_interval")) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    bad = errno || end == v || *end || !(x > 0 && x <= 60);
    if (!bad)
      o->monitor_interval_s = x;
    accepted = "seconds, a number > 0 and <= 60";
  } else if (!strcmp(key, "log_line_prefix_template")) {
    bad = ln_copy_text(o->log_line_prefix_template, sizeof o->log_line_prefix_template, v);
    accepted = "text (at most 255 characters) with {rank}, {local_rank}, {node_rank}";
  } else {
    size_t off = (size_t)snprintf(err, errlen, "unknown option '%s'. Options of %%launch:", key);
    for (int i = 0; known[i] && off < errlen; i++)
      off += (size_t)snprintf(err + off, errlen - off, " %s", known[i]);
    return -1;
  }
  if (bad) {
    snprintf(err, errlen, "bad value for %s: '%s' (accepted: %s)", key, v, accepted);
    return -1;
  }
  return 0;
}

int ln_options_validate(ln_options_t *o, char *err, size_t errlen) {
  if (o->num_processes < 1) {
    snprintf(err, errlen,
             "num_processes is missing: say how many workers to start on this node, e.g. "
             "%%launch training_loop() num_processes=2");
    return -1;
  }
  if (o->node_rank >= o->num_nodes) {
    snprintf(err, errlen,
             "node_rank=%d is not below num_nodes=%d: node ranks run from 0 to num_nodes-1",
             o->node_rank, o->num_nodes);
    return -1;
  }
  if (o->rdzv_endpoint[0]) {
    /* rdzv_endpoint overrides master_addr:use_port, as in torchrun */
    char *colon = strrchr(o->rdzv_endpoint, ':');
    int port;
    if (!colon || ln_parse_int(colon + 1, 1, 65535, &port) || colon == o->rdzv_endpoint ||
        (size_t)(colon - o->rdzv_endpoint) >= sizeof o->master_addr) {
      snprintf(err, errlen, "bad value for rdzv_endpoint: '%s' (accepted: host:port)",
               o->rdzv_endpoint);
      return -1;
    }
    memcpy(o->master_addr, o->rdzv_endpoint, (size_t)(colon - o->rdzv_endpoint));
    o->master_addr[colon - o->rdzv_endpoint] = 0;
    o->use_port = port;
  }
  return 0;
}

/* Index of key in known[], or -1. */
static int known_index(const char *key) {
  for (int i = 0; known[i]; i++)
    if (!strcmp(known[i], key))
      return i;
  return -1;
}

int ln_options_parse(const char *text, ln_options_t *o, char *err, size_t errlen) {
  const char *p = text;
  char key[64], val[512];
  unsigned seen = 0; /* known[] options given so far: a repeat is refused, not overridden */
  for (;;) {
    while (isspace((unsigned char)*p))
      p++;
    if (!*p)
      break;
    size_t k = 0;
    while (*p && *p != '=' && !isspace((unsigned char)*p)) {
      if (k + 1 < sizeof key)
        key[k++] = *p;
      p++;
    }
    key[k] = 0;
    if (*p != '=') {
      snprintf(err, errlen, "expected key=value after the call, got '%s' (e.g. num_processes=2)",
               key);
      return -1;
    }
    p++;
    size_t v = 0;
    char quote = (*p == '"' || *p == '\'') ? *p++ : 0;
    while (*p && (quote ? *p != quote : !isspace((unsigned char)*p))) {
      if (v + 1 < sizeof val)
        val[v++] = *p;
      p++;
    }
    if (quote) {
      if (*p != quote) {
        snprintf(err, errlen, "option %s: the quoted value is not closed", key);
        return -1;
      }
      p++;
    }
    val[v] = 0;
    int ki = known_index(key);
    if (ki >= 0 && (seen & (1u << ki))) {
      snprintf(err, errlen, "option %s is given twice (the second time as %s=%s): give it once",
               key, key, val);
      return -1;
    }
    if (ki >= 0)
      seen |= 1u << ki;
    if (ln_options_set(o, key, val, err, errlen))
      return -1;
  }
  return ln_options_validate(o, err, errlen);
}

void ln_options_prefix(const ln_options_t *o, int rank, int local_rank, char *out, size_t outlen) {
  size_t n = 0;
  const char *t = o->log_line_prefix_template;
  if (!outlen)
    return;
  while (*t && n + 1 < outlen) {
    int val = -1;
    size_t skip = 0;
    if (!strncmp(t, "{rank}", 6))
      val = rank, skip = 6;
    else if (!strncmp(t, "{local_rank}", 12))
      val = local_rank, skip = 12;
    else if (!strncmp(t, "{node_rank}", 11))
      val = o->node_rank, skip = 11;
    if (skip) {
      int w = snprintf(out + n, outlen - n, "%d", val);
      n += w > 0 ? (size_t)w : 0;
      if (n >= outlen)
        n = outlen - 1;
      t += skip;
    } else {
      out[n++] = *t++;
    }
  }
  out[n] = 0;
}
