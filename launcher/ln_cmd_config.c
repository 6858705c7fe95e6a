/*
 * ln_cmd_config.c — `nbfork config` (Accelerate's questions, answered on
 * stdin) and `nbfork config default [--mixed_precision M]` (Accelerate's
 * write_basic_config): a config YAML with Accelerate's keys.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ln_cmd.h"
#include "ln_config.h"
#include "ln_cuda.h"

/* Ask on stdout, read a line on stdin; empty (or EOF) = the default. */
static void ask(const char *question, const char *dflt, char *out, size_t outlen) {
  printf("%s [%s]: ", question, dflt);
  fflush(stdout);
  char line[512];
  if (!fgets(line, sizeof line, stdin))
    line[0] = 0;
  line[strcspn(line, "\r\n")] = 0;
  snprintf(out, outlen, "%s", line[0] ? line : dflt);
}

/* Check an answer the way the launcher will read it. */
static int check(ln_cli_t *c, const char *key, const char *value) {
  char err[1024];
  if (ln_cli_set(c, key, value, err, sizeof err) == 0)
    return 0;
  fprintf(stderr, "nbfork config: error: %s\n", err);
  return -1;
}

static int write_items(const char *path, const ln_config_item_t *items, int n) {
  char err[1024];
  if (ln_config_write(path, items, n, err, sizeof err)) {
    fprintf(stderr, "nbfork config: error: %s\n", err);
    return LN_EXIT_FAILED;
  }
  printf("nbfork configuration saved at %s\n", path);
  return 0;
}

/* write_basic_config: every GPU of this machine, or one CPU process. */
static int config_default(int argc, char **argv, const char *path) {
  const char *mp = "no";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mixed_precision") && i + 1 < argc)
      mp = argv[++i];
    else if (!strncmp(argv[i], "--mixed_precision=", 18))
      mp = argv[i] + 18;
    else if (!strncmp(argv[i], "--config_file", 13))
      path = argv[i][13] == '=' ? argv[i] + 14 : i + 1 < argc ? argv[++i] : path;
    else {
      fprintf(stderr,
              "nbfork config default: error: unknown option '%s' (known: "
              "--mixed_precision no|fp16|bf16, --config_file PATH)\n",
              argv[i]);
      return LN_EXIT_USAGE;
    }
  }
  ln_cli_t c;
  ln_cli_init(&c);
  if (check(&c, "mixed_precision", mp))
    return LN_EXIT_USAGE;
  if (access(path, F_OK) == 0) {
    printf("Configuration already exists at %s, will not override. Run `nbfork config` "
           "manually or remove it.\n",
           path);
    return 0;
  }
  int gpus = ln_cuda_visible_gpus();
  char n[16];
  snprintf(n, sizeof n, "%d", gpus > 0 ? gpus : 1);
  const ln_config_item_t items[] = {
      {"compute_environment", "LOCAL_MACHINE", 0},
      {"debug", "false", 0},
      {"distributed_type", gpus > 1 ? "MULTI_GPU" : "NO", 0},
      {"downcast_bf16", "no", 1},
      {"machine_rank", "0", 0},
      {"main_training_function", "main", 0},
      {"mixed_precision", mp, 1},
      {"num_machines", "1", 0},
      {"num_processes", n, 0},
      {"rdzv_backend", "static", 0},
      {"same_network", "true", 0},
      {"use_cpu", gpus > 0 ? "false" : "true", 0},
  };
  return write_items(path, items, (int)(sizeof items / sizeof items[0]));
}

/* The questions of `accelerate config` for a local machine. */
static int config_ask(const char *path) {
  ln_cli_t c;
  ln_cli_init(&c);
  char type[32], machines[16], rank[16] = "0", ip[256] = "127.0.0.1", port[16] = "29500";
  char procs[16], gpu_ids[256] = "all", mp[16], same[8] = "true", debug[8];
  int gpus = ln_cuda_visible_gpus();
  ask("Which type of machine are you using? (no, multi-CPU, multi-GPU)",
      gpus > 1 ? "multi-GPU" : "multi-CPU", type, sizeof type);
  const char *dt = !strcasecmp(type, "multi-GPU")   ? "MULTI_GPU"
                   : !strcasecmp(type, "multi-CPU") ? "MULTI_CPU"
                   : !strcasecmp(type, "no")        ? "NO"
                                                    : NULL;
  if (!dt) {
    fprintf(stderr,
            "nbfork config: error: machine type '%s' (accepted: no, multi-CPU, "
            "multi-GPU)\n",
            type);
    return LN_EXIT_USAGE;
  }
  ask("How many different machines will you use (use more than 1 for multi-node training)?", "1",
      machines, sizeof machines);
  if (check(&c, "num_machines", machines))
    return LN_EXIT_USAGE;
  if (c.num_machines > 1) {
    ask("What is the rank of this machine?", "0", rank, sizeof rank);
    ask("What is the IP address of the machine that will host the main process?", "127.0.0.1", ip,
        sizeof ip);
    ask("What is the port you will use to communicate with the main process?", "29500", port,
        sizeof port);
    ask("Are all the machines on the same local network? (true/false)", "true", same, sizeof same);
    if (check(&c, "machine_rank", rank) || check(&c, "main_process_ip", ip) ||
        check(&c, "main_process_port", port) || check(&c, "same_network", same))
      return LN_EXIT_USAGE;
  }
  char dflt[16];
  snprintf(dflt, sizeof dflt, "%d",
           (gpus > 0 && strcmp(dt, "MULTI_CPU") ? gpus : 2) * c.num_machines);
  ask("How many processes in total will you use (all machines)?", strcmp(dt, "NO") ? dflt : "1",
      procs, sizeof procs);
  if (!strcmp(dt, "MULTI_GPU"))
    ask("What GPU(s) (by id) should be used for training on this machine, as a comma-separated "
        "list?",
        "all", gpu_ids, sizeof gpu_ids);
  ask("Should distributed operations be checked while running for errors (debug)? (true/false)",
      "false", debug, sizeof debug);
  ask("Do you wish to use mixed precision? (no, fp16, bf16)", "no", mp, sizeof mp);
  if (check(&c, "num_processes", procs) || check(&c, "gpu_ids", gpu_ids) ||
      check(&c, "debug", debug) || check(&c, "mixed_precision", mp))
    return LN_EXIT_USAGE;
  if (c.num_processes % c.num_machines) {
    fprintf(stderr, "nbfork config: error: %d processes are not divisible by %d machines\n",
            c.num_processes, c.num_machines);
    return LN_EXIT_USAGE;
  }
  const ln_config_item_t items[] = {
      {"compute_environment", "LOCAL_MACHINE", 0},
      {"debug", c.debug ? "true" : "false", 0},
      {"distributed_type", dt, 0},
      {"gpu_ids", gpu_ids, 0},
      {"machine_rank", rank, 0},
      {"main_process_ip", ip, 0},
      {"main_process_port", port, 0},
      {"main_training_function", "main", 0},
      {"mixed_precision", mp, 1},
      {"num_machines", machines, 0},
      {"num_processes", procs, 0},
      {"rdzv_backend", "static", 0},
      {"same_network", c.same_network ? "true" : "false", 0},
      {"use_cpu", strcmp(dt, "MULTI_CPU") ? "false" : "true", 0},
  };
  return write_items(path, items, (int)(sizeof items / sizeof items[0]));
}

int ln_cmd_config(int argc, char **argv) {
  char path[PATH_MAX];
  if (ln_cli_default_config_path(path, sizeof path) != 0) {
    fprintf(stderr, "nbfork config: error: neither NBFORK_CONFIG_FILE nor HOME is set: say where "
                    "the config goes with NBFORK_CONFIG_FILE=PATH\n");
    return LN_EXIT_USAGE;
  }
  if (argc > 1 && !strcmp(argv[1], "default"))
    return config_default(argc - 1, argv + 1, path);
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--config_file", 13) && (argv[i][13] == '=' || i + 1 < argc)) {
      snprintf(path, sizeof path, "%s", argv[i][13] == '=' ? argv[i] + 14 : argv[++i]);
      continue;
    }
    fprintf(stderr,
            "nbfork config: error: unknown argument '%s' (nbfork config [--config_file "
            "PATH] | nbfork config default [--mixed_precision M])\n",
            argv[i]);
    return LN_EXIT_USAGE;
  }
  return config_ask(path);
}
