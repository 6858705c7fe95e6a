/*
 * Command-line unit tests (launcher.cli.*): `nbfork launch` settings with
 * Accelerate's names (precedence config < command line, every rejection),
 * the config YAML through libyaml (Accelerate's own default_config.yaml,
 * features nbfork lacks, syntax errors with line and column), the config
 * writer (read back), the mpirun command, Slurm's hostlist and port, a
 * node's place from Slurm's environment, and the rewriting of a notebook's
 * %launch cells.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ln_cli.h"
#include "ln_cli_parse.h"
#include "ln_config.h"
#include "ln_display_view.h"
#include "ln_mpirun.h"
#include "ln_notebook.h"
#include "ln_slurm.h"
#include "nbf_cluster.h"
#include "nbf_param.h"
#include "nbf_util.h"
#include "nbf_test.h"

/* A private config path, so no ~/.cache config of the machine applies;
 * the directory goes when the case ends. */
static char g_dir[64];

static void remove_dir(void) {
  if (g_dir[0])
    nbf_rmtree(g_dir);
}

static void isolate(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/nbf-cli-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(g_dir));
  atexit(remove_dir);
  char p[128];
  snprintf(p, sizeof p, "%s/none.yaml", g_dir);
  nbf_param_set(NBF_P_NBFORK_CONFIG_FILE, p);
  nbf_param_unset(NBF_P_SLURM_STEP_ID);
}

static char *write_file(const char *name, const char *text) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", g_dir, name) < 0)
    return NULL;
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
  return p;
}

static int parse(ln_cli_t *c, char *err, size_t n, ...) {
  char *argv[32];
  int argc = 0;
  va_list ap;
  va_start(ap, n);
  for (char *a; (a = va_arg(ap, char *));)
    argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  ln_cli_init(c);
  err[0] = 0;
  return ln_cli_parse(c, argc, argv, err, n);
}

/* `--config_file NAME prog` with the file NAME holding `yaml` (removed
 * again): the parse must accept it (2: the command starts at prog) and,
 * unless `sharding` is NULL, choose that sharding. */
static void parse_config(ln_cli_t *c, const char *name, const char *yaml, const char *sharding) {
  char err[512], *path = write_file(name, yaml);
  ASSERT_NOT_NULL(path);
  int r = parse(c, err, sizeof err, "--config_file", path, "prog", NULL);
  unlink(path);
  free(path);
  if (r != 2)
    NBF_TEST_FAIL("%s: parse returned %d: %s", name, r, err);
  if (sharding)
    ASSERT_EQ_STR(c->o.sharding, sharding);
}

NBF_TEST(accelerate_option_names_map_to_the_launch) {
  isolate();
  ln_cli_t c;
  char err[1024];
  int prog =
      parse(&c, err, sizeof err, "--num_processes", "4", "--num_machines=2", "--machine_rank", "1",
            "--main_process_ip", "10.0.0.1", "--main_process_port", "29999", "--mixed_precision",
            "bf16", "--max_restarts", "3", "--monitor_interval", "0.5", "-q",
            "--log_line_prefix_template", "[{rank}] ", "train", "--lr", "0.1", NULL);
  ASSERT_EQ_STR(err, "");
  ASSERT_EQ(prog, 18); /* PROGRAM "train"; its own --lr is left alone */
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  ASSERT_EQ(c.o.num_processes, 2); /* 4 over 2 machines, as Accelerate */
  ASSERT_EQ(c.o.num_nodes, 2);
  ASSERT_EQ(c.o.node_rank, 1);
  ASSERT_EQ_STR(c.o.master_addr, "10.0.0.1");
  ASSERT_EQ(c.o.use_port, 29999);
  ASSERT_EQ_STR(c.o.mixed_precision, "bf16");
  ASSERT_EQ(c.o.max_restarts, 3);
  ASSERT_NEAR(c.o.monitor_interval_s, 0.5, 1e-12);
  ASSERT_EQ(c.o.quiet, 1);
  ASSERT_EQ_STR(c.o.log_line_prefix_template, "[{rank}] ");
}

NBF_TEST(flags_dashes_and_defaults) {
  isolate();
  ln_cli_t c;
  char err[1024];
  ASSERT_EQ(parse(&c, err, sizeof err, "--cpu", "--debug", "--num-processes", "3", "--gpu_ids",
                  "0,1", "--", "prog", NULL),
            7);
  ASSERT_EQ(c.cpu, 1);
  ASSERT_EQ(c.debug, 1);
  ASSERT_EQ_STR(c.gpu_ids, "0,1");
  ASSERT_EQ(ln_cli_finish(&c, 8, err, sizeof err), 0);
  ASSERT_EQ(c.o.num_processes, 3);
  ASSERT_EQ(parse(&c, err, sizeof err, "prog", NULL), 0);
  ASSERT_EQ(ln_cli_finish(&c, 4, err, sizeof err), 0);
  ASSERT_EQ(c.o.num_processes, 4); /* every GPU, as Accelerate's default */
  ASSERT_EQ(c.o.use_port, 29500);
  ASSERT_EQ(parse(&c, err, sizeof err, "--main_process_port", "0", "prog", NULL), 2);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  ASSERT_EQ(c.o.num_processes, 1);
  ASSERT_GT(c.o.use_port, 0); /* 0 became a free port */
}

NBF_TEST(bad_command_lines_are_refused_with_the_reason) {
  isolate();
  ln_cli_t c;
  char err[1024];
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_procs", "2", "prog", NULL), -1);
  ASSERT_CONTAINS(err, "unknown option '--num_procs'");
  ASSERT_CONTAINS(err, "num_processes");
  ASSERT_EQ(parse(&c, err, sizeof err, "-x", "prog", NULL), -1);
  ASSERT_CONTAINS(err, "unknown option '-x'");
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_processes", "2", NULL), -1);
  ASSERT_CONTAINS(err, "no PROGRAM");
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_processes", NULL), -1);
  ASSERT_CONTAINS(err, "needs a value");
  ASSERT_EQ(parse(&c, err, sizeof err, "--mixed_precision", "fp8", "prog", NULL), -1);
  ASSERT_CONTAINS(err, "no, fp16 or bf16");
  ASSERT_EQ(parse(&c, err, sizeof err, "--main_process_port", "70000", "prog", NULL), -1);
  ASSERT_CONTAINS(err, "main_process_port");
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_processes", "3", "--num_machines", "2", "p", NULL),
            4);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "not divisible by num_machines=2");
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_machines", "2", "--machine_rank", "2", "p", NULL), 4);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "node_rank=2 is not below num_nodes=2");
  ASSERT_EQ(
      parse(&c, err, sizeof err, "--num_machines", "2", "--main_process_port", "0", "p", NULL), 4);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "one machine only");
}

/* What `accelerate config` writes for one machine with two GPUs
 * (Accelerate 1.x), as it is. */
static const char ACCELERATE_YAML[] = "compute_environment: LOCAL_MACHINE\n"
                                      "debug: false\n"
                                      "distributed_type: MULTI_GPU\n"
                                      "downcast_bf16: 'no'\n"
                                      "enable_cpu_affinity: false\n"
                                      "gpu_ids: all\n"
                                      "machine_rank: 0\n"
                                      "main_training_function: main\n"
                                      "mixed_precision: fp16\n"
                                      "num_machines: 1\n"
                                      "num_processes: 2\n"
                                      "rdzv_backend: static\n"
                                      "same_network: true\n"
                                      "tpu_env: []\n"
                                      "tpu_use_cluster: false\n"
                                      "tpu_use_sudo: false\n"
                                      "use_cpu: false\n"
                                      "fsdp_config: {}\n"
                                      "dynamo_config: {}\n";

NBF_TEST(accelerate_config_file_works_as_it_is_and_the_command_line_wins) {
  isolate();
  char *path = write_file("acc.yaml", ACCELERATE_YAML);
  ln_cli_t c;
  char err[1024];
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", path, "prog", NULL), 2);
  ASSERT_EQ_STR(err, "");
  ASSERT_EQ(c.num_processes, 2);
  ASSERT_EQ_STR(c.o.mixed_precision, "fp16");
  ASSERT_EQ_STR(c.main_training_function, "main");
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", path, "--mixed_precision", "no",
                  "--num_processes", "1", "prog", NULL),
            6);
  ASSERT_EQ_STR(c.o.mixed_precision, "no");
  ASSERT_EQ(c.num_processes, 1);
  /* the default path is read when no --config_file is given */
  nbf_param_set(NBF_P_NBFORK_CONFIG_FILE, path);
  ASSERT_EQ(parse(&c, err, sizeof err, "prog", NULL), 0);
  ASSERT_EQ(c.num_processes, 2);
  unlink(path);
  free(path);
}

static void assert_config_error(const char *text, const char *want) {
  char *path = write_file("bad.yaml", text);
  ln_cli_t c;
  char err[1024];
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", path, "prog", NULL), -1);
  ASSERT_CONTAINS(err, want);
  ASSERT_CONTAINS(err, path);
  unlink(path);
  free(path);
}

NBF_TEST(config_errors_name_the_key_line_and_column) {
  isolate();
  assert_config_error("num_processes: 2\nnum_procs: 3\n",
                      "bad.yaml:2:1: unknown config key 'num_procs'");
  assert_config_error("num_processes: [2\nfoo: 1\n", "bad.yaml:2:4: not valid YAML");
  assert_config_error("a: b: c\n", "bad.yaml:1:5: not valid YAML");
  assert_config_error("distributed_type: XLA\n", "1:19: distributed_type: XLA");
  assert_config_error(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: true\n",
      "fsdp_activation_checkpointing: activation checkpointing is not supported");
  assert_config_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 5\n",
                      "bad value for zero_stage: '5'");
  assert_config_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 7\n",
                      "bad value for sharding: '7'");
  assert_config_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_bogus: 1\n",
                      "unknown key 'fsdp_bogus' in fsdp_config");
  assert_config_error("tpu_use_cluster: true\n", "TPU is not supported");
  assert_config_error("dynamo_backend: INDUCTOR\n", "torch dynamo is not supported");
  assert_config_error("compute_environment: AMAZON_SAGEMAKER\n", "only LOCAL_MACHINE");
  assert_config_error("num_processes: many\n", "1:16: bad value for num_processes: 'many'");
  assert_config_error("- 1\n- 2\n", "expected a mapping");
  char err[256];
  ln_cli_t c;
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", "/nonexistent/x.yaml", "p", NULL), -1);
  ASSERT_CONTAINS(err, "cannot read config file /nonexistent/x.yaml");
}

NBF_TEST(config_writer_output_reads_back) {
  isolate();
  char path[160];
  snprintf(path, sizeof path, "%s/sub/dir/default_config.yaml", g_dir);
  const ln_config_item_t items[] = {{"compute_environment", "LOCAL_MACHINE", 0},
                                    {"distributed_type", "MULTI_CPU", 0},
                                    {"mixed_precision", "no", 1},
                                    {"num_processes", "3", 0},
                                    {"mpirun_config", "", 0}};
  char err[512];
  ASSERT_EQ(ln_config_write(path, items, 4, err, sizeof err), 0);
  FILE *f = fopen(path, "r");
  char text[512] = "";
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  ASSERT_CONTAINS(text, "mixed_precision: 'no'\n"); /* not a YAML boolean */
  ln_cli_t c;
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", path, "p", NULL), 2);
  ASSERT_EQ(c.num_processes, 3);
  ASSERT_EQ(c.cpu, 1); /* MULTI_CPU */
  ASSERT_EQ_STR(c.o.mixed_precision, "no");
}

/* The Transformers guide's FSDP and DeepSpeed configs (issue 23): the
 * sharding choice reaches the workers' environment under Accelerate's
 * names. */
NBF_TEST(fsdp_and_deepspeed_configs_set_the_sharding) {
  isolate();
  ln_cli_t c;
  char err[512];
  parse_config(&c, "fsdp.yaml",
               "compute_environment: LOCAL_MACHINE\n"
               "distributed_type: FSDP\n"
               "fsdp_config:\n"
               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
               "  fsdp_backward_prefetch_policy: BACKWARD_PRE\n"
               "  fsdp_forward_prefetch: true\n"
               "  fsdp_offload_params: true\n"
               "  fsdp_sharding_strategy: 2\n"
               "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
               "  fsdp_sync_module_states: true\n"
               "  fsdp_transformer_layer_cls_to_wrap: BertLayer\n"
               "  fsdp_use_orig_params: true\n"
               "num_processes: 2\n",
               "SHARD_GRAD_OP");
  ASSERT_EQ(c.o.offload, 1);
  ASSERT_EQ_STR(c.o.state_dict_type, "SHARDED_STATE_DICT");
  ln_options_sharding_env(&c.o);
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_ACCELERATE_USE_FSDP), "true");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_SHARDING_STRATEGY), "SHARD_GRAD_OP");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_OFFLOAD_PARAMS), "true");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_BACKWARD_PREFETCH), "BACKWARD_PRE");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_FORWARD_PREFETCH), "true");
  char *opts = ln_cli_launch_options(&c, LN_OPTS_GIVEN);
  ASSERT_CONTAINS(opts, "sharding=SHARD_GRAD_OP");
  free(opts);
  /* the hybrid strategies by number (FSDP's 4 and 5) reach the workers by name */
  parse_config(
      &c, "hyb.yaml",
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 5\nnum_processes: 4\n",
      "_HYBRID_SHARD_ZERO2");
  ln_options_sharding_env(&c.o);
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_SHARDING_STRATEGY), "_HYBRID_SHARD_ZERO2");
  /* prefetch off from the config reaches the workers */
  parse_config(&c, "nopf.yaml",
               "distributed_type: FSDP\nfsdp_config:\n"
               "  fsdp_backward_prefetch: NO_PREFETCH\n"
               "  fsdp_forward_prefetch: false\nnum_processes: 2\n",
               NULL);
  ln_options_sharding_env(&c.o);
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_BACKWARD_PREFETCH), "NO_PREFETCH");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_FSDP_FORWARD_PREFETCH), "false");
  opts = ln_cli_launch_options(&c, LN_OPTS_GIVEN);
  ASSERT_CONTAINS(opts, "backward_prefetch=NO_PREFETCH");
  ASSERT_CONTAINS(opts, "forward_prefetch=false");
  free(opts);
  /* FSDP without a strategy: FULL_SHARD, as Accelerate */
  parse_config(&c, "fsdp1.yaml", "distributed_type: FSDP\nnum_processes: 2\n", "FULL_SHARD");
  /* DeepSpeed: zero_stage and the offload device; the JSON file's
   * zero_optimization section */
  char *json = write_file("ds.json", "{\"zero_optimization\": {\"stage\": 3, "
                                     "\"offload_optimizer\": {\"device\": \"cpu\"}}}");
  char yaml[600];
  snprintf(yaml, sizeof yaml,
           "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: %s\n"
           "  zero3_init_flag: true\nnum_processes: 2\n",
           json);
  parse_config(&c, "ds.yaml", yaml, "zero3");
  ASSERT_EQ(c.o.offload, 1);
  parse_config(&c, "ds1.yaml",
               "distributed_type: DEEPSPEED\ndeepspeed_config:\n"
               "  zero_stage: 1\n  offload_optimizer_device: none\n",
               "zero1");
  ln_options_sharding_env(&c.o);
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_ACCELERATE_USE_DEEPSPEED), "true");
  ASSERT_EQ_STR(nbf_param_raw(NBF_P_ACCELERATE_DEEPSPEED_ZERO_STAGE), "1");
  /* a section of another distributed_type is ignored, as Accelerate does */
  parse_config(&c, "o.yaml",
               "distributed_type: MULTI_GPU\nfsdp_config:\n"
               "  fsdp_sharding_strategy: 1\n",
               "no");
  /* %launch's option */
  ln_options_t o;
  ln_options_init(&o);
  ASSERT_EQ(ln_options_parse("num_processes=2 sharding=1 offload=true", &o, err, sizeof err), 0);
  ASSERT_EQ_STR(o.sharding, "FULL_SHARD");
  /* Accelerate's FSDP plugin's defaults: no prefetch either way */
  ASSERT_EQ_STR(o.backward_prefetch, "NO_PREFETCH");
  ASSERT_EQ(o.forward_prefetch, 0);
  ASSERT_EQ(ln_options_parse("num_processes=2 backward_prefetch=BACKWARD_PRE forward_prefetch=true",
                             &o, err, sizeof err),
            0);
  ASSERT_EQ_STR(o.backward_prefetch, "BACKWARD_PRE");
  ASSERT_EQ(o.forward_prefetch, 1);
  ASSERT_EQ(ln_options_parse("num_processes=4 sharding=HYBRID_SHARD", &o, err, sizeof err), 0);
  ASSERT_EQ_STR(o.sharding, "HYBRID_SHARD");
  ASSERT_EQ(ln_options_parse("num_processes=2 backward_prefetch=NO_PREFETCH forward_prefetch=false",
                             &o, err, sizeof err),
            0);
  ASSERT_EQ_STR(o.backward_prefetch, "NO_PREFETCH");
  ASSERT_EQ(o.forward_prefetch, 0);
  ASSERT_EQ(ln_options_parse("num_processes=2 backward_prefetch=SOMETIMES", &o, err, sizeof err),
            -1);
  ASSERT_EQ(ln_options_parse("num_processes=2 sharding=zero9", &o, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "sharding");
  unlink(json);
  free(json);
}

NBF_TEST(mpirun_config_and_command_as_accelerate_builds_it) {
  isolate();
  unsetenv("OMP_NUM_THREADS"); /* one thread per rank: passed on by mpirun, as the others set it */
  char *path = write_file("mpi.yaml", "distributed_type: MULTI_CPU\nnum_processes: 4\n"
                                      "num_machines: 2\nmpirun_config:\n"
                                      "  mpirun_ccl: '1'\n  mpirun_hostfile: /etc/hosts.mpi\n");
  ln_cli_t c;
  char err[512];
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", path, "train", "--x", NULL), 2);
  ASSERT_EQ_STR(c.mpirun_hostfile, "/etc/hosts.mpi");
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  char *prog[] = {"train", "--x", NULL};
  char **a = ln_mpirun_argv(&c, prog, 1, 1);
  char line[1024] = "";
  for (int i = 0; a[i]; i++)
    strcat(strcat(line, a[i]), " ");
  ASSERT_EQ_STR(line, "mpirun --allow-run-as-root --hostfile /etc/hosts.mpi --map-by ppr:2:node "
                      "-np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 -x "
                      "ACCELERATE_MIXED_PRECISION=no -x OMP_NUM_THREADS=1 train --x ");
  ln_mpirun_free(a);
  a = ln_mpirun_argv(&c, prog, 0, 0);
  line[0] = 0;
  for (int i = 0; a[i]; i++)
    strcat(strcat(line, a[i]), " ");
  ASSERT_EQ_STR(line,
                "mpirun -f /etc/hosts.mpi -ppn 2 -n 4 -genv MASTER_ADDR 127.0.0.1 -genv "
                "MASTER_PORT 29500 -genv ACCELERATE_MIXED_PRECISION no -genv OMP_NUM_THREADS 1 "
                "train --x ");
  ln_mpirun_free(a);
  free(path);
}

NBF_TEST(slurm_hostlist_first_node_and_port) {
  char n[64];
  ASSERT_EQ(nbf_slurm_first_node("node[03-05,9],gpu1", n, sizeof n), 0);
  ASSERT_EQ_STR(n, "node03");
  ASSERT_EQ(nbf_slurm_first_node("a,b", n, sizeof n), 0);
  ASSERT_EQ_STR(n, "a");
  ASSERT_EQ(nbf_slurm_first_node("rack[2-3]-n[1-4]", n, sizeof n), 0);
  ASSERT_EQ_STR(n, "rack2-n1");
  ASSERT_EQ(nbf_slurm_first_node("solo", n, sizeof n), 0);
  ASSERT_EQ_STR(n, "solo");
  ASSERT_EQ(nbf_slurm_first_node("", n, sizeof n), -1);
  ASSERT_EQ(nbf_slurm_first_node("averyveryverylongname", n, 8), -1);
  ASSERT_EQ(nbf_slurm_port("1234567"), 15000 + 4567); /* Lightning's rule */
  ASSERT_EQ(nbf_slurm_port("42"), 15042);
  ASSERT_EQ(nbf_slurm_port("x1"), -1);
}

/* The store binds loopback only for the loopback names (launcher and
 * runtime alike); any other master address is reached from other nodes. */
NBF_TEST(loopback_master_names) {
  ASSERT_TRUE(nbf_loopback_name("127.0.0.1"));
  ASSERT_TRUE(nbf_loopback_name("localhost"));
  ASSERT_TRUE(!nbf_loopback_name("10.0.0.1"));
  ASSERT_TRUE(!nbf_loopback_name("127.0.0.10"));
  ASSERT_TRUE(!nbf_loopback_name(""));
  ASSERT_TRUE(!nbf_loopback_name(NULL));
}

NBF_TEST(srun_nbfork_launch_takes_the_node_from_slurm) {
  isolate();
  nbf_param_set(NBF_P_SLURM_STEP_ID, "0");
  nbf_param_set(NBF_P_SLURM_NNODES, "2");
  nbf_param_set(NBF_P_SLURM_NODEID, "1");
  nbf_param_set(NBF_P_SLURM_STEP_NODELIST, "localhost,other");
  ln_cli_t c;
  char err[512];
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_processes", "4", "p", NULL), 2);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  ASSERT_EQ(c.o.num_nodes, 2);
  ASSERT_EQ(c.o.node_rank, 1);
  ASSERT_EQ(c.o.num_processes, 2);
  ASSERT_EQ_STR(c.o.master_addr, "localhost"); /* resolves: kept as named */
  /* what the user gives wins over Slurm */
  ASSERT_EQ(
      parse(&c, err, sizeof err, "--machine_rank", "0", "--main_process_ip", "10.1.1.1", "p", NULL),
      4);
  ASSERT_EQ(c.machine_rank, 0);
  ASSERT_EQ_STR(c.o.master_addr, "10.1.1.1");
  nbf_param_unset(NBF_P_SLURM_STEP_ID);
  ASSERT_EQ(parse(&c, err, sizeof err, "p", NULL), 0);
  ASSERT_EQ(c.num_machines, 0); /* outside a step: nothing from Slurm */
}

/* ln_notebook_cell with the command line's options only */
#define CELL(src, opts, call) ln_notebook_cell(src, opts, NULL, call, NULL)

NBF_TEST(notebook_launch_cells_take_the_command_line_options) {
  isolate();
  ln_cli_t c;
  char err[512];
  ASSERT_EQ(parse(&c, err, sizeof err, "--num_processes", "3", "--mixed_precision", "bf16",
                  "nb.ipynb", NULL),
            4);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  char *given = ln_cli_launch_options(&c, 0);
  ASSERT_EQ_STR(given, " num_processes=3 mixed_precision=bf16");
  char *cell = CELL("%launch f(1) num_processes=2\n", given, NULL);
  ASSERT_EQ_STR(cell, "%launch f(1) num_processes=3 mixed_precision=bf16");
  free(cell);
  /* the cell's own options the command line does not give stay; a
   * quoted value with spaces is one option */
  cell = CELL("%launch f(\") x\", 2) num_processes=2 log_line_prefix_template='[r "
              "{rank}] ' use_port=29600\n",
              given, NULL);
  ASSERT_EQ_STR(cell, "%launch f(\") x\", 2) log_line_prefix_template='[r {rank}] ' use_port=29600 "
                      "num_processes=3 mixed_precision=bf16");
  free(cell);
  ASSERT_NULL(CELL("  %launch f(1) num_processes=2", given, "g()"));
  /* a %launch line after comments and code (the executor accepts it
   * there): the same, the code above kept */
  cell = CELL("// go\nint n = 2;\n%launch f(n) num_processes=2\n", given, NULL);
  ASSERT_EQ_STR(cell, "// go\nint n = 2;\n%launch f(n) num_processes=3 mixed_precision=bf16");
  free(cell);
  cell = CELL("// go\nint n = 2;\n%launch f(n) num_processes=2\n", given, "g()");
  ASSERT_EQ_STR(cell, "// go\nint n = 2;\n\n");
  free(cell);
  cell = CELL("int x = 1;\n", given, "g()");
  ASSERT_EQ_STR(cell, "int x = 1;\n");
  free(cell);
  char *all = ln_cli_launch_options(&c, 1);
  ASSERT_CONTAINS(all, " num_processes=3 num_nodes=1 node_rank=0 use_port=29500");
  ln_options_t o;
  ln_options_init(&o);
  ASSERT_EQ(ln_options_parse(all, &o, err, sizeof err), 0); /* %launch reads it */
  ASSERT_EQ(o.num_processes, 3);
  free(all);
  free(given);
}

/* Issue 27: after `nbfork config default` (num_processes: 1), a notebook's
 * `%launch ... num_processes=2` ran 1 process. The command line beats the
 * cell, the cell beats the config file, and each is said. */
NBF_TEST(notebook_precedence_command_line_cell_config) {
  isolate();
  char *cfg =
      write_file("c.yaml", "num_processes: 1\nmixed_precision: bf16\nmain_process_port: 29700\n");
  ln_cli_t c;
  char err[512];
  ASSERT_EQ(parse(&c, err, sizeof err, "--config_file", cfg, "--main_process_port", "29800",
                  "nb.ipynb", NULL),
            4);
  ASSERT_EQ(ln_cli_finish(&c, 0, err, sizeof err), 0);
  char *flags = ln_cli_launch_options(&c, LN_OPTS_FLAGS);
  char *config = ln_cli_launch_options(&c, LN_OPTS_CONFIG);
  ASSERT_EQ_STR(flags, " use_port=29800");
  ASSERT_EQ_STR(config, " num_processes=1 mixed_precision=bf16");
  nbf_buf_t notes = {0};
  char *cell = ln_notebook_cell("%launch f(1) num_processes=2 use_port=29500\n", flags, config,
                                NULL, &notes);
  /* the cell's 2 processes; the flag's port; the config's precision */
  ASSERT_EQ_STR(cell, "%launch f(1) num_processes=2 use_port=29800 mixed_precision=bf16");
  ASSERT_CONTAINS(notes.data, "use_port=29800 from the command line replaces the cell's "
                              "use_port=29500");
  ASSERT_CONTAINS(notes.data, "the cell's num_processes=2 is used, not num_processes=1 from the "
                              "config file");
  free(cell);
  nbf_buf_free(&notes);
  /* the same value from the config file: nothing to say */
  cell = ln_notebook_cell("%launch f(1) num_processes=1\n", flags, config, NULL, &notes);
  ASSERT_EQ(notes.len, 0);
  free(cell);
  free(flags);
  free(config);
  free(cfg);
}

/* One display event as the executor sends it (common/nbf_wire.h). */
static void view_event(ln_display_view_t *v, const char *msg, const char *text, int64_t ms) {
  json_t *e = json_pack("{s:s,s:{s:s},s:{},s:{s:s}}", "msg", msg, "data", "text/plain", text,
                        "metadata", "transient", "display_id", "nbf-1-1");
  ASSERT_EQ(ln_display_view_event(v, e, ms), 1);
  json_decref(e);
}

/* Issue 27: `nbfork launch NOTEBOOK` left every bar at 0/375. In a log:
 * a line per 2 s, the complete state at once, the last state at the end
 * of the cell; on a terminal: each update redrawn over the bar's line. */
NBF_TEST(display_view_progress_in_a_log_and_on_a_terminal) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ln_display_view_t *v = ln_display_view_new(f, 0, 2000);
  view_event(v, "display_data", "e |  | 0/10", 0);
  view_event(v, "update_display_data", "e |  | 1/10", 100);   /* throttled */
  view_event(v, "update_display_data", "e |  | 5/10", 2100);  /* 2 s on */
  view_event(v, "update_display_data", "e |  | 6/10", 2200);  /* throttled */
  view_event(v, "update_display_data", "e |  | 10/10", 2300); /* complete */
  view_event(v, "update_display_data", "e |  | 10/10", 2400); /* the same */
  view_event(v, "display_data", "f |  | 0/100", 2500);
  view_event(v, "update_display_data", "f |  | 30/100", 2600); /* stopped early */
  ln_display_view_end_cell(v);
  fflush(f);
  ASSERT_EQ_STR(text, "e |  | 0/10\ne |  | 5/10\ne |  | 10/10\nf |  | 0/100\nf |  | 30/100\n");
  ln_display_view_destroy(&v);
  fclose(f);
  free(text);
  f = open_memstream(&text, &len);
  v = ln_display_view_new(f, 1, 2000);
  view_event(v, "display_data", "a 0/2", 0);
  view_event(v, "update_display_data", "a 1/2", 1);
  view_event(v, "update_display_data", "a 2/2", 2);
  ln_display_view_end_cell(v);
  fflush(f);
  ASSERT_EQ_STR(text, "a 0/2\n\x1b[A\r\x1b[Ka 1/2\n\x1b[A\r\x1b[Ka 2/2\n");
  ln_display_view_destroy(&v);
  fclose(f);
  free(text);
}

NBF_TEST_MAIN()
