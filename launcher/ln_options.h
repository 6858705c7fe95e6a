/*
 * ln_options — the options of a launch cell, with the names and defaults
 * of Accelerate's `notebook_launcher` (accelerate/launchers.py):
 *
 *   %launch FUNC(ARGS...) num_processes=2 mixed_precision=fp16 ...
 *
 * | option                   | default             | accepted values          |
 * |--------------------------|---------------------|--------------------------|
 * | num_processes            | (required)          | integer >= 1             |
 * | mixed_precision          | no                  | no, fp16, bf16           |
 * | use_port                 | 29500               | 1..65535                 |
 * | master_addr              | 127.0.0.1           | host name or address     |
 * | node_rank                | 0                   | 0..num_nodes-1           |
 * | num_nodes                | 1                   | integer >= 1             |
 * | rdzv_backend             | static              | static                   |
 * | rdzv_endpoint            | master_addr:use_port| host:port                |
 * | rdzv_id                  | none                | text (separates runs)    |
 * | rdzv_timeout             | 300                 | seconds > 0              |
 * | rdzv_conf                | (none)              | secret=TEXT: the store   |
 * |                          |                     | admits only peers with   |
 * |                          |                     | it (default: env         |
 * |                          |                     | NBFORK_RDZV_SECRET)      |
 * | max_restarts             | 0                   | integer >= 0             |
 * | monitor_interval         | 0.1                 | seconds > 0              |
 * | log_line_prefix_template | (none)              | text with {rank},        |
 * |                          |                     | {local_rank}, {node_rank}|
 * | sharding                 | no                  | no; FSDP: FULL_SHARD,    |
 * |                          |                     | SHARD_GRAD_OP, NO_SHARD, |
 * |                          |                     | HYBRID_SHARD,            |
 * |                          |                     | _HYBRID_SHARD_ZERO2 or   |
 * |                          |                     | 1..5;                    |
 * |                          |                     | DeepSpeed: zero0..zero3  |
 * | offload                  | false               | true, false (a no-op on  |
 * |                          |                     | CPU runs; nbf_shard.h)   |
 * | state_dict_type          | FULL_STATE_DICT     | FULL_STATE_DICT,         |
 * |                          |                     | SHARDED_STATE_DICT       |
 * | backward_prefetch        | NO_PREFETCH         | BACKWARD_PRE,            |
 * |                          |                     | BACKWARD_POST,           |
 * |                          |                     | NO_PREFETCH (stage 3)    |
 * | forward_prefetch         | false               | true or false (stage 3)  |
 */
#ifndef LN_OPTIONS_H
#define LN_OPTIONS_H

#include <stddef.h>

typedef struct {
  int num_processes; /* 0 = not given (an error at validation) */
  char mixed_precision[8];
  int use_port;
  char master_addr[256];
  int node_rank;
  int num_nodes;
  char rdzv_backend[32];
  char rdzv_endpoint[300];
  char rdzv_id[128];
  int rdzv_timeout_s;
  char rdzv_secret[256]; /* "" = an open store */
  int max_restarts;
  double monitor_interval_s;
  char log_line_prefix_template[256];
  int quiet; /* no "Launching training on ..." line (`nbfork launch -q`) */
  int cli;   /* set by `nbfork launch`: messages name its flags, not %launch's options */
  /* sharded data parallel (nbf_shard.h): "no", an FSDP strategy name
   * (FULL_SHARD, ...) or "zero0".."zero3"; the workers get Accelerate's
   * environment for it (ln_options_sharding_env) */
  char sharding[24];
  int offload;
  char state_dict_type[24];
  char backward_prefetch[16]; /* FSDP's BackwardPrefetch name or NO_PREFETCH */
  int forward_prefetch;
} ln_options_t;

/* Defaults as in the table above. */
void ln_options_init(ln_options_t *o);

/* Parse `key=value` words (values may be quoted with '' or "") into `o`
 * and validate the result. Returns 0, or -1 with a message in err that
 * names the option, the bad value, the accepted values and what to do. */
int ln_options_parse(const char *text, ln_options_t *o, char *err, size_t errlen);

/* Set one option by its %launch name (the table above) from its text
 * value, without validating the whole (the command line sets options
 * one by one, then calls ln_options_validate). Returns 0, or -1 with a
 * message in err naming the option, the value and what is accepted. */
int ln_options_set(ln_options_t *o, const char *key, const char *value, char *err, size_t errlen);

/* Check the options together (num_processes given, node_rank below
 * num_nodes, rdzv_endpoint split into master_addr and use_port).
 * Returns 0, or -1 with a message in err. */
int ln_options_validate(ln_options_t *o, char *err, size_t errlen);

/* A whole decimal integer in [lo, hi] into *out: 0, or -1 (bad text,
 * out of range; *out untouched). Shared by every option parser. */
int ln_parse_int(const char *v, long lo, long hi, int *out);

/* Copy v into dst[cap] when it fits (with its NUL): 0, else -1. */
int ln_copy_text(char *dst, size_t cap, const char *v);

/* Export the sharding choice to this process's environment the way
 * `accelerate launch` does (ACCELERATE_USE_FSDP + FSDP_SHARDING_STRATEGY,
 * FSDP_OFFLOAD_PARAMS, FSDP_STATE_DICT_TYPE, or ACCELERATE_USE_DEEPSPEED +
 * ACCELERATE_DEEPSPEED_ZERO_STAGE, ..._OFFLOAD_OPTIMIZER_DEVICE); nothing
 * for "no". Called in a worker before it runs. */
void ln_options_sharding_env(const ln_options_t *o);

/* Expand log_line_prefix_template for one worker into out. */
void ln_options_prefix(const ln_options_t *o, int rank, int local_rank, char *out, size_t outlen);

#endif
