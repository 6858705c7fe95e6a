/*
 * ln_slurm.c — a node's place in a Slurm job, for `srun nbfork launch`.
 */
#define _GNU_SOURCE
#include "ln_slurm.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "nbf_cluster.h"
#include "nbf_param.h"

static int resolves(const char *name) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int ok = getaddrinfo(name, NULL, &hints, &res) == 0;
  if (res)
    freeaddrinfo(res);
  return ok;
}

/* NodeAddr=... from scontrol's one-line answer. Names come from Slurm's
 * own environment, and are checked to hold no shell characters. */
static int scontrol_addr(const char *name, char *out, size_t outlen) {
  if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
      strlen(name))
    return -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "scontrol -o show node %s 2>/dev/null", name);
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char line[8192];
  int rc = -1;
  if (fgets(line, sizeof line, p)) {
    char *a = strstr(line, "NodeAddr=");
    if (a) {
      a += 9;
      size_t n = strcspn(a, " \n");
      if (n > 0 && n < outlen) {
        memcpy(out, a, n);
        out[n] = 0;
        rc = 0;
      }
    }
  }
  pclose(p);
  return rc;
}

int ln_slurm_node_addr(const char *name, char *out, size_t outlen) {
  if (resolves(name))
    return snprintf(out, outlen, "%s", name) < (int)outlen ? 0 : -1;
  return scontrol_addr(name, out, outlen);
}

int ln_slurm_apply(ln_cli_t *c) {
  long nnodes, nodeid;
  if (!nbf_param_raw(NBF_P_SLURM_STEP_ID) || nbf_param_SLURM_NNODES(&nnodes) ||
      nbf_param_SLURM_NODEID(&nodeid) || nnodes < 1 || nodeid < 0 ||
      nodeid >= nnodes)
    return 0;
  if (!c->num_machines)
    c->num_machines = (int)nnodes, ln_cli_mark(c, "num_machines");
  if (c->machine_rank < 0)
    c->machine_rank = (int)nodeid, ln_cli_mark(c, "machine_rank");
  const char *list = nbf_param_raw(NBF_P_SLURM_STEP_NODELIST);
  if (!list)
    list = nbf_param_raw(NBF_P_SLURM_JOB_NODELIST);
  char first[256], addr[256];
  if (c->num_machines > 1 && !strcmp(c->o.master_addr, "127.0.0.1") &&
      nbf_slurm_first_node(list, first, sizeof first) == 0 &&
      ln_slurm_node_addr(first, addr, sizeof addr) == 0) {
    snprintf(c->o.master_addr, sizeof c->o.master_addr, "%s", addr);
    ln_cli_mark(c, "main_process_ip");
  }
  return 1;
}
