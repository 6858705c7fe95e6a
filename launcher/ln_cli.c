/*
 * ln_cli.c — `nbfork launch` settings: Accelerate's names mapped onto the
 * %launch options (ln_options), config file first, command line over it.
 */
#define _GNU_SOURCE
#include "ln_cli.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbf_cluster.h"
#include "nbf_param.h"

void ln_cli_init(ln_cli_t *c) {
  memset(c, 0, sizeof *c);
  ln_options_init(&c->o);
  c->o.cli = 1;
  c->machine_rank = -1;
  c->same_network = 1;
}

/* Accelerate's str_to_bool, as the config file writes booleans. */
static int parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on", "y", NULL};
  static const char *const no[] = {"0", "false", "no", "off", "n", NULL};
  for (int i = 0; yes[i]; i++)
    if (!strcasecmp(v, yes[i]))
      return *out = 1, 0;
  for (int i = 0; no[i]; i++)
    if (!strcasecmp(v, no[i]))
      return *out = 0, 0;
  return -1;
}

/* The settings that are %launch options under another name (or the same). */
static const struct {
  const char *name, *launch_name;
} renamed[] = {
    {"main_process_ip", "master_addr"},
    {"mixed_precision", "mixed_precision"},
    {"max_restarts", "max_restarts"},
    {"monitor_interval", "monitor_interval"},
    {"rdzv_backend", "rdzv_backend"},
    {"rdzv_conf", "rdzv_conf"},
    {"log_line_prefix_template", "log_line_prefix_template"},
    /* sharding (the config file's fsdp_config / deepspeed_config set them) */
    {"sharding", "sharding"},
    {"fsdp_sharding_strategy", "sharding"},
    {"fsdp_offload_params", "offload"},
    {"offload_optimizer_device", "offload"},
    {"fsdp_state_dict_type", "state_dict_type"},
    {"fsdp_backward_prefetch", "backward_prefetch"},
    {"fsdp_backward_prefetch_policy", "backward_prefetch"},
    {"fsdp_forward_prefetch", "forward_prefetch"},
};

static const char *const names[] = {"config_file",
                                    "num_processes",
                                    "num_machines",
                                    "machine_rank",
                                    "main_process_ip",
                                    "main_process_port",
                                    "mixed_precision",
                                    "cpu",
                                    "use_cpu",
                                    "gpu_ids",
                                    "max_restarts",
                                    "monitor_interval",
                                    "rdzv_backend",
                                    "rdzv_conf",
                                    "same_network",
                                    "debug",
                                    "mpirun_hostfile",
                                    "quiet",
                                    "log_line_prefix_template",
                                    "sharding",
                                    "fsdp_sharding_strategy",
                                    "fsdp_offload_params",
                                    "offload_optimizer_device",
                                    "fsdp_state_dict_type",
                                    "fsdp_backward_prefetch",
                                    "fsdp_backward_prefetch_policy",
                                    "fsdp_forward_prefetch",
                                    "zero_stage",
                                    NULL};

void ln_cli_unknown_message(const char *lead, const char *name, char *err, size_t errlen) {
  size_t off = (size_t)snprintf(err, errlen, "%s '%s'; known:", lead, name);
  for (int i = 0; names[i] && off < errlen; i++)
    off += (size_t)snprintf(err + off, errlen - off, " %s", names[i]);
}

static int unknown(const char *name, char *err, size_t errlen) {
  ln_cli_unknown_message("unknown setting", name, err, errlen);
  return -1;
}

int ln_cli_set(ln_cli_t *c, const char *name, const char *v, char *err, size_t errlen) {
  for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
    if (!strcmp(name, renamed[i].name)) {
      if (ln_options_set(&c->o, renamed[i].launch_name, v, err, errlen) == 0) {
        ln_cli_mark(c, name);
        return 0;
      }
      /* the message names the %launch option: say it with this name */
      if (!strcmp(name, "main_process_ip"))
        snprintf(err, errlen, "bad value for %s: '%s' (accepted: a host name or IP address)", name,
                 v);
      return -1;
    }
  int bad = 0;
  const char *accepted = "";
  if (!strcmp(name, "num_processes")) {
    bad = ln_parse_int(v, 1, 1 << 20, &c->num_processes), accepted = "an integer >= 1";
  } else if (!strcmp(name, "num_machines")) {
    bad = ln_parse_int(v, 1, 1 << 16, &c->num_machines), accepted = "an integer >= 1";
  } else if (!strcmp(name, "machine_rank")) {
    bad = ln_parse_int(v, 0, 1 << 16, &c->machine_rank), accepted = "an integer >= 0";
  } else if (!strcmp(name, "main_process_port")) {
    bad = ln_parse_int(v, 0, 65535, &c->o.use_port), accepted = "a TCP port 1..65535, or 0 (free)";
    c->port_given = !bad;
  } else if (!strcmp(name, "cpu") || !strcmp(name, "use_cpu")) {
    bad = parse_bool(v, &c->cpu), accepted = "true or false";
  } else if (!strcmp(name, "debug")) {
    bad = parse_bool(v, &c->debug), accepted = "true or false";
  } else if (!strcmp(name, "quiet")) {
    bad = parse_bool(v, &c->quiet), accepted = "true or false";
    c->o.quiet = c->quiet;
  } else if (!strcmp(name, "same_network")) {
    bad = parse_bool(v, &c->same_network), accepted = "true or false";
  } else if (!strcmp(name, "gpu_ids")) {
    bad = ln_copy_text(c->gpu_ids, sizeof c->gpu_ids, v) || strspn(v, "0123456789,") != strlen(v);
    bad = bad && strcmp(v, "all") != 0;
    accepted = "all, or GPU indices separated by commas (0,1)";
  } else if (!strcmp(name, "mpirun_hostfile")) {
    bad = !*v || ln_copy_text(c->mpirun_hostfile, sizeof c->mpirun_hostfile, v);
    accepted = "the path of an mpirun hostfile";
  } else if (!strcmp(name, "config_file")) {
    bad = !*v || ln_copy_text(c->config_file, sizeof c->config_file, v), accepted = "a path";
  } else if (!strcmp(name, "zero_stage")) { /* DeepSpeed's ZeRO stage: sharding=zeroN */
    char z[8];
    bad = strlen(v) != 1 || v[0] < '0' || v[0] > '3', accepted = "0, 1, 2 or 3";
    snprintf(z, sizeof z, "zero%s", v);
    if (!bad && ln_options_set(&c->o, "sharding", z, err, errlen) == 0)
      ln_cli_mark(c, "sharding");
  } else if (!strcmp(name, "main_training_function")) {
    bad = ln_copy_text(c->main_training_function, sizeof c->main_training_function, v);
    accepted = "a function name";
  } else {
    return unknown(name, err, errlen);
  }
  if (bad)
    snprintf(err, errlen, "bad value for %s: '%s' (accepted: %s)", name, v, accepted);
  else
    ln_cli_mark(c, name);
  return bad ? -1 : 0;
}

int ln_cli_given(const ln_cli_t *c, const char *name) {
  char word[80];
  snprintf(word, sizeof word, " %s ", name);
  return strstr(c->given, word) != NULL;
}

/* Add ` name ` to the word list `set` (cap bytes) unless there. */
static void words_add(char *set, size_t cap, const char *name) {
  char word[80];
  snprintf(word, sizeof word, " %s ", name);
  size_t n = strlen(set);
  if (strstr(set, word) || n + strlen(name) + 3 > cap)
    return;
  snprintf(set + n, cap - n, "%s%s ", n ? "" : " ", name);
}

static void words_remove(char *set, const char *name) {
  char word[80];
  snprintf(word, sizeof word, " %s ", name);
  char *at = strstr(set, word);
  if (at)
    memmove(at, at + strlen(word) - 1, strlen(at + strlen(word) - 1) + 1);
}

void ln_cli_mark(ln_cli_t *c, const char *name) {
  words_add(c->given, sizeof c->given, name);
  /* a notebook's cell overrides what only the config file gave */
  if (c->loading_config)
    words_add(c->from_config, sizeof c->from_config, name);
  else
    words_remove(c->from_config, name);
}

static int from_config(const ln_cli_t *c, const char *name) {
  char word[80];
  snprintf(word, sizeof word, " %s ", name);
  return strstr(c->from_config, word) != NULL;
}

/* key=value, quoted when the value holds a space. */
static void put_option(FILE *f, const char *key, const char *v) {
  char q = strchr(v, '"') ? '\'' : '"';
  if (strpbrk(v, " \t'\""))
    fprintf(f, " %s=%c%s%c", key, q, v, q);
  else
    fprintf(f, " %s=%s", key, v);
}

char *ln_cli_launch_options(const ln_cli_t *c, int which) {
  int all = which == LN_OPTS_ALL;
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  const ln_options_t *o = &c->o;
  char num[32];
#define GIVEN(name)                                                                                \
  (all || (ln_cli_given(c, name) &&                                                                \
           (which == LN_OPTS_GIVEN || (which == LN_OPTS_CONFIG) == from_config(c, name))))
#define PUT_INT(name, key, value)                                                                  \
  if (GIVEN(name))                                                                                 \
  snprintf(num, sizeof num, "%d", value), put_option(f, key, num)
  PUT_INT("num_processes", "num_processes", o->num_processes);
  PUT_INT("num_machines", "num_nodes", o->num_nodes);
  PUT_INT("machine_rank", "node_rank", o->node_rank);
  PUT_INT("main_process_port", "use_port", o->use_port);
  PUT_INT("max_restarts", "max_restarts", o->max_restarts);
  if (GIVEN("main_process_ip"))
    put_option(f, "master_addr", o->master_addr);
  if (GIVEN("mixed_precision"))
    put_option(f, "mixed_precision", o->mixed_precision);
  if (GIVEN("monitor_interval"))
    fprintf(f, " monitor_interval=%g", o->monitor_interval_s);
  if (GIVEN("rdzv_conf") && o->rdzv_secret[0])
    fprintf(f, " rdzv_conf=\"secret=%s\"", o->rdzv_secret);
  if (GIVEN("rdzv_conf"))
    fprintf(f, " rdzv_timeout=%d", o->rdzv_timeout_s);
  if (GIVEN("sharding") || GIVEN("fsdp_sharding_strategy"))
    put_option(f, "sharding", o->sharding);
  if (GIVEN("fsdp_offload_params") || GIVEN("offload_optimizer_device"))
    put_option(f, "offload", o->offload ? "true" : "false");
  if (GIVEN("fsdp_state_dict_type"))
    put_option(f, "state_dict_type", o->state_dict_type);
  if (GIVEN("fsdp_backward_prefetch") || GIVEN("fsdp_backward_prefetch_policy"))
    put_option(f, "backward_prefetch", o->backward_prefetch);
  if (GIVEN("fsdp_forward_prefetch"))
    put_option(f, "forward_prefetch", o->forward_prefetch ? "true" : "false");
  if (GIVEN("log_line_prefix_template") && o->log_line_prefix_template[0])
    put_option(f, "log_line_prefix_template", o->log_line_prefix_template);
#undef PUT_INT
#undef GIVEN
  fclose(f);
  return text;
}

int ln_cli_known(const char *name) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(name, names[i]))
      return 1;
  return !strcmp(name, "main_training_function");
}

int ln_cli_default_config_path(char *out, size_t outlen) {
  const char *env = nbf_param_raw(NBF_P_NBFORK_CONFIG_FILE);
  if (env && *env)
    return snprintf(out, outlen, "%s", env) < (int)outlen ? 0 : -1;
  const char *home = nbf_param_raw(NBF_P_HOME);
  if (!home || !*home)
    return -1;
  return snprintf(out, outlen, "%s/.cache/nbfork/default_config.yaml", home) < (int)outlen ? 0 : -1;
}

/* A free TCP port on this machine: bind port 0 and ask which it got. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

int ln_cli_finish(ln_cli_t *c, int gpus, char *err, size_t errlen) {
  int machines = c->num_machines ? c->num_machines : 1;
  int rank = c->machine_rank >= 0 ? c->machine_rank : 0;
  int total = c->num_processes ? c->num_processes : (gpus > 0 && !c->cpu ? gpus : 1) * machines;
  if (total % machines) {
    snprintf(err, errlen,
             "num_processes=%d is not divisible by num_machines=%d: num_processes counts the "
             "workers of all machines (as in Accelerate); give a multiple of %d",
             total, machines, machines);
    return -1;
  }
  c->o.num_processes = total / machines;
  c->o.num_nodes = machines;
  c->o.node_rank = rank;
  if (c->o.use_port == 0) {
    if (machines > 1) {
      snprintf(err, errlen,
               "main_process_port=0 (a free port) works on one machine only: the other machines "
               "must know node 0's port; give a port, e.g. --main_process_port 29500");
      return -1;
    }
    c->o.use_port = free_port();
    if (c->o.use_port <= 0) {
      snprintf(err, errlen, "no free TCP port found for main_process_port=0");
      return -1;
    }
  }
  /* a name that does not resolve would only show as a store that never
   * answers (or a port that "cannot be bound") minutes later */
  int gai = nbf_resolve(c->o.master_addr);
  if (gai) {
    snprintf(err, errlen,
             "--main_process_ip %s does not resolve: %s; give machine 0's IP address or a "
             "name this machine resolves",
             c->o.master_addr, gai_strerror(gai));
    return -1;
  }
  return ln_options_validate(&c->o, err, errlen);
}

/* The workers' environment from the settings that are not %launch
 * options: --cpu, --gpu_ids, --debug; OMP_NUM_THREADS=1 unless set (as
 * torchrun, for more than one worker on a node). */
void ln_cli_export_env(const ln_cli_t *c) {
  if (c->cpu) {
    nbf_param_set(NBF_P_ACCELERATE_USE_CPU, "true");
    nbf_param_set(NBF_P_CUDA_VISIBLE_DEVICES, "");
  } else if (c->gpu_ids[0] && strcmp(c->gpu_ids, "all")) {
    nbf_param_set(NBF_P_CUDA_VISIBLE_DEVICES, c->gpu_ids);
  }
  if (c->debug)
    nbf_param_set(NBF_P_ACCELERATE_DEBUG_MODE, "true");
  if (!nbf_param_raw(NBF_P_OMP_NUM_THREADS))
    nbf_param_set(NBF_P_OMP_NUM_THREADS, "1");
}
