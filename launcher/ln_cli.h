/*
 * ln_cli — the settings of `nbfork launch`, with the names and meanings
 * of `accelerate launch` (accelerate/commands/launch.py) and of its
 * config file (accelerate/commands/config/config_args.py).
 *
 * Precedence, as Accelerate: defaults < config file < command line.
 * The same setter serves both (ln_cli_set): a command-line option
 * `--num_processes 4` and a config key `num_processes: 4` are one thing.
 * A notebook's `%launch` line sits between the two (ln_notebook): the
 * command line > the cell's options > the config file > defaults, as
 * `accelerate launch` puts explicit arguments over the config file and a
 * notebook_launcher call's own arguments are what the notebook asked for.
 *
 * | name (option / key)      | default           | meaning                                |
 * |--------------------------|-------------------|----------------------------------------|
 * | num_processes            | GPUs, or 1        | workers over ALL machines (Accelerate) |
 * | num_machines             | 1                 | nodes                                  |
 * | machine_rank             | 0                 | this node, 0..num_machines-1           |
 * | main_process_ip          | 127.0.0.1         | node 0's address (store, MASTER_ADDR)  |
 * | main_process_port        | 29500             | node 0's port; 0 = a free port         |
 * | mixed_precision          | no                | no, fp16, bf16                         |
 * | cpu / use_cpu            | false             | workers see no GPU                     |
 * | gpu_ids                  | all               | CUDA_VISIBLE_DEVICES of the workers    |
 * | max_restarts             | 0                 | restarts of the group after a failure  |
 * | monitor_interval         | 0.1               | seconds between monitor ticks          |
 * | rdzv_backend             | static            | static only                            |
 * | rdzv_conf                | (none)            | secret=TEXT                            |
 * | same_network             | true              | accepted (nbfork needs no difference)  |
 * | debug                    | false             | ACCELERATE_DEBUG_MODE=true: test launch|
 * | mpirun_hostfile          | (none)            | start the ranks through mpirun         |
 * | log_line_prefix_template | (none)            | {rank}, {local_rank}, {node_rank}      |
 * | quiet (-q)               | false             | no banner, failure summary only        |
 * | distributed_type (key)   | -                 | NO, MULTI_CPU (= use_cpu), MULTI_GPU,  |
 * |                          |                   | FSDP (fsdp_config), DEEPSPEED          |
 * |                          |                   | (deepspeed_config): sharding below     |
 * | sharding                 | no                | %launch's sharding (ln_options.h)      |
 * | fsdp_sharding_strategy   | FULL_SHARD        | 1..5 or names: sharding                |
 * | zero_stage               | 2 (DEEPSPEED)     | 0..3: sharding=zeroN                   |
 * | fsdp_offload_params,     | false / none      | offload (a no-op on CPU runs)          |
 * | offload_optimizer_device |                   |                                        |
 * | fsdp_state_dict_type     | FULL_STATE_DICT   | state_dict_type                        |
 * | fsdp_backward_prefetch   | NO_PREFETCH       | backward_prefetch (also                |
 * |                          |                   | fsdp_backward_prefetch_policy)         |
 * | fsdp_forward_prefetch    | false             | forward_prefetch                       |
 */
#ifndef LN_CLI_H
#define LN_CLI_H

#include <limits.h>
#include <stddef.h>

#include "ln_options.h"

typedef struct {
  ln_options_t o;    /* per-node options once ln_cli_finish ran          */
  int num_processes; /* total over all machines; 0 = not given          */
  int num_machines;  /* 0 = not given                                    */
  int machine_rank;  /* -1 = not given                                   */
  int port_given;    /* main_process_port came from config or command   */
  int cpu, debug, quiet, same_network;
  char gpu_ids[256]; /* "" or "all" = every GPU                          */
  char mpirun_hostfile[PATH_MAX];
  char config_file[PATH_MAX];
  char main_training_function[128];
  char given[512];           /* " name name ": settings set by config or command line */
  char from_config[512];     /* " name ": given by the config file only (not by a flag or Slurm) */
  int loading_config;        /* 1 while the config file is applied (ln_cli_mark) */
  char distributed_type[16]; /* the config file's (FSDP / DEEPSPEED read their sections) */
} ln_cli_t;

/* Defaults (table above). */
void ln_cli_init(ln_cli_t *c);

/* Set one setting by its Accelerate name (option name without "--", or
 * config key) from text. Returns 0, or -1 with a one-line message in err
 * that names the setting, the value and what is accepted (unknown names
 * included). */
int ln_cli_set(ln_cli_t *c, const char *name, const char *value, char *err, size_t errlen);

/* 1 when setting `name` was given (config file, command line, Slurm). */
int ln_cli_given(const ln_cli_t *c, const char *name);
/* Record that setting `name` was given. */
void ln_cli_mark(ln_cli_t *c, const char *name);

/* Which settings ln_cli_launch_options writes. */
enum {
  LN_OPTS_GIVEN = 0,  /* given by the config file or the command line      */
  LN_OPTS_ALL = 1,    /* every launch option, given or not                 */
  LN_OPTS_FLAGS = 2,  /* given by the command line (or Slurm): over a cell */
  LN_OPTS_CONFIG = 3, /* given by the config file only: under a cell       */
};

/* The %launch options (text for ln_options_parse) that carry the
 * settings `which` selects (LN_OPTS_*) onto a notebook's %launch line:
 * per-node num_processes, num_nodes, node_rank, master_addr, use_port,
 * ... (LN_OPTS_ALL for a launch line nbfork writes itself).
 * Returns a malloc'd string (caller frees), NULL when out of memory. */
char *ln_cli_launch_options(const ln_cli_t *c, int which);

/* 1 when `name` is a setting ln_cli_set knows. */
int ln_cli_known(const char *name);

/* The message for a name that is no setting, into err[errlen]:
 * "LEAD 'NAME'; known: " and every setting's name. */
void ln_cli_unknown_message(const char *lead, const char *name, char *err, size_t errlen);


/* Turn the settings into per-node launch options: num_processes divided
 * by num_machines (an error when it does not divide), port 0 replaced by
 * a free port, node/rank checks. `gpus` is the visible GPU count (for the
 * num_processes default). Returns 0 or -1 with err. */
int ln_cli_finish(ln_cli_t *c, int gpus, char *err, size_t errlen);

/* Set this process's environment (inherited by the workers) for the
 * settings that are not %launch options: cpu (ACCELERATE_USE_CPU, no
 * visible GPU), gpu_ids (CUDA_VISIBLE_DEVICES), debug
 * (ACCELERATE_DEBUG_MODE=true); OMP_NUM_THREADS=1 unless set (torchrun). */
void ln_cli_export_env(const ln_cli_t *c);

/* Where `nbfork config` writes and `nbfork launch` reads by default:
 * $NBFORK_CONFIG_FILE, else $HOME/.cache/nbfork/default_config.yaml.
 * Returns 0, or -1 when neither is known. */
int ln_cli_default_config_path(char *out, size_t outlen);

#endif
