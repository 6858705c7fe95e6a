/*
 * nbfork_main.c — the `nbfork` command line: launch, config, env, test,
 * merge-weights, estimate-memory (Accelerate's `accelerate
 * launch|config|env|test|merge-weights|estimate-memory`, with its names).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ln_cmd.h"
#include "nbf_param.h"
#include "nbf_util.h"

static const char USAGE[] =
    "usage: nbfork {launch,config,env,test,merge-weights,estimate-memory} [options]\n"
    "\n"
    "  launch [options] PROGRAM [ARGS...]     run PROGRAM as training workers\n"
    "  launch [options] NOTEBOOK.ipynb [CALL] run a notebook's cells headless\n"
    "  config [--config_file F]               answer questions, write the config\n"
    "  config default [--mixed_precision M]   write the config for this machine\n"
    "  env                                    print versions and hardware for a bug report\n"
    "  test [launch options]                  check rendezvous and collectives\n"
    "  merge-weights CKPT OUT                 a SHARDED_STATE_DICT checkpoint into a full one\n"
    "  estimate-memory MODEL|--layers N,...   memory per dtype and ZeRO stage\n"
    "\n"
    "`nbfork COMMAND --help` explains a command. Exit codes: 0 success, 1 the run failed,\n"
    "2 bad input (nothing started), 130 interrupted.\n";

static const char MERGE_HELP[] =
    "usage: nbfork merge-weights CKPT OUT\n"
    "\n"
    "Consolidate the SHARDED_STATE_DICT checkpoint in directory CKPT (nbfork_shard<R>.bin of\n"
    "every rank, written by acc_shard_save_state) into directory OUT: the FULL_STATE_DICT\n"
    "checkpoint of one rank (nbfork_state.bin: parameters, optimizer state, loss scaler,\n"
    "registered objects; nbfork_rank0.bin), loadable by acc_load_state or by\n"
    "acc_shard_load_state at any world size. Accelerate's `accelerate merge-weights`.\n";

static const char ESTIMATE_HELP[] =
    "usage: nbfork estimate-memory (MODEL | --layers N0,N1,...,Nk) [--dtypes D ...]\n"
    "                              [--num_processes N] [--optimizer adamw|sgd]\n"
    "\n"
    "Print Accelerate's `estimate-memory` table (dtype, largest layer, total size, training\n"
    "using Adam) for an MLP of the given layer sizes, plus the model-state bytes per rank of\n"
    "ZeRO stages 0-3 on N processes (default 2) as nbfork keeps them (acc_shard_estimate_bytes;\n"
    "with float16/bfloat16 the ZeRO paper's figure in brackets: acc_shard_paper_bytes).\n"
    "MODEL: fashion_mnist (784,256,10), mnist_mlp (784,512,512,10), mlp_50m\n"
    "(4096,4096,4096,4096,1000). --dtypes: float32 float16 bfloat16 int8 int4 (default all).\n";

static const char LAUNCH_HELP[] =
    "usage: nbfork launch [options] PROGRAM [ARGS...]\n"
    "       nbfork launch [options] NOTEBOOK.ipynb [CALL]\n"
    "\n"
    "Runs PROGRAM (or the notebook's code cells in an executor) as workers with RANK,\n"
    "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT set,\n"
    "as `accelerate launch`. Settings: defaults < config file < these options.\n"
    "\n"
    "  --config_file F            Accelerate-style YAML (default: $NBFORK_CONFIG_FILE or\n"
    "                             ~/.cache/nbfork/default_config.yaml when it exists)\n"
    "  --num_processes N          workers over all machines (default: GPUs, or 1)\n"
    "  --num_machines N           machines (default 1; under srun: SLURM_NNODES)\n"
    "  --machine_rank R           this machine, 0..N-1 (under srun: SLURM_NODEID)\n"
    "  --main_process_ip A        machine 0's address (default 127.0.0.1; under srun: the\n"
    "                             first node)\n"
    "  --main_process_port P      machine 0's port (default 29500; 0 = a free port)\n"
    "  --mixed_precision M        no, fp16, bf16\n"
    "  --cpu                      workers use no GPU\n"
    "  --gpu_ids L                GPUs of this machine, e.g. 0,1 (default all)\n"
    "  --max_restarts N           restart the group after a failure N times (default 0)\n"
    "  --monitor_interval S       seconds between checks of the workers (default 0.1)\n"
    "  --rdzv_backend static      the rendezvous (static: machine 0 hosts the store)\n"
    "  --rdzv_conf secret=TEXT    the store admits only peers with the secret\n"
    "  --same_network             accepted (Accelerate's name)\n"
    "  --debug                    ACCELERATE_DEBUG_MODE=true: a test launch first\n"
    "  --mpirun_hostfile F        start the ranks with mpirun on the hosts of F\n"
    "  -q, --quiet                no banner; failures without the stderr tails\n"
    "  --log_line_prefix_template T  prefix of output lines: {rank} {local_rank} {node_rank}\n"
    "\n"
    "CALL (notebooks): skip the notebook's %launch cells and run `%launch CALL` after the\n"
    "last cell, e.g. 'training_loop(\"no\", 42, 64)'.\n";

static const char CONFIG_HELP[] =
    "usage: nbfork config [--config_file F]\n"
    "       nbfork config default [--mixed_precision no|fp16|bf16] [--config_file F]\n"
    "\n"
    "Writes Accelerate's config keys as YAML to F, else $NBFORK_CONFIG_FILE, else\n"
    "~/.cache/nbfork/default_config.yaml. `config` asks Accelerate's questions on stdin (an\n"
    "empty answer takes the default in brackets); `config default` writes the defaults for\n"
    "this machine (every GPU, or one CPU process) and never overwrites a file.\n";

static const char ENV_HELP[] =
    "usage: nbfork env\n\nPrints versions (nbfork, compilers, Gloo, NCCL, CUDA driver and "
    "runtime, OpenBLAS),\nCPUs, GPUs (NVML; CUDA is not initialized) and the config in effect.\n";

static const char TEST_HELP[] =
    "usage: nbfork test [launch options]\n\nLaunches workers (2 unless --num_processes or the "
    "config says) that check the\nrendezvous, barrier and every collective for every dtype, "
    "and ends with\n\"Test is a success!\" (exit 0) or the failure (exit 1).\n";

/* OpenBLAS starts its thread pool when libnbfork loads it, unless
 * OPENBLAS_NUM_THREADS is set; the launcher forks only from a
 * single-threaded process (ln_launch's fork guard). So when it is unset,
 * set it to 1 and start again (the workers inherit it, as torchrun gives
 * them OMP_NUM_THREADS=1). */
static void single_threaded_blas(char **argv) {
  if (nbf_param_raw(NBF_P_OPENBLAS_NUM_THREADS))
    return;
  char self[PATH_MAX];
  if (nbf_param_set(NBF_P_OPENBLAS_NUM_THREADS, "1") != 0 || nbf_self_exe(self, sizeof self))
    return;
  execv(self, argv);
}

static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--"))
      return 0;
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
      return 1;
    if (argv[i][0] != '-')
      return 0; /* PROGRAM's own --help is PROGRAM's */
  }
  return 0;
}

int main(int argc, char **argv) {
  single_threaded_blas(argv);
  static const struct {
    const char *name, *help;
    int (*fn)(int, char **);
  } cmds[] = {{"launch", LAUNCH_HELP, ln_cmd_launch},
              {"config", CONFIG_HELP, ln_cmd_config},
              {"env", ENV_HELP, ln_cmd_env},
              {"test", TEST_HELP, ln_cmd_test},
              {"merge-weights", MERGE_HELP, ln_cmd_merge_weights},
              {"estimate-memory", ESTIMATE_HELP, ln_cmd_estimate_memory}};
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? LN_EXIT_USAGE : 0;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(argv[1], cmds[i].name)) {
      if (wants_help(argc - 1, argv + 1)) {
        fputs(cmds[i].help, stdout);
        return 0;
      }
      return cmds[i].fn(argc - 1, argv + 1);
    }
  fprintf(stderr,
          "nbfork: error: unknown command '%s' (known: launch, config, env, test, merge-weights, "
          "estimate-memory; "
          "nbfork --help)\n",
          argv[1]);
  return LN_EXIT_USAGE;
}
