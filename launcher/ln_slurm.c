/*
 * ln_slurm.c — a node's place in a Slurm job, for `srun nbfork launch`.
 */
#define _GNU_SOURCE
#include "ln_slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_cluster.h"
#include "nbf_param.h"

int ln_slurm_apply(ln_cli_t *c, char *err, size_t errlen) {
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
      nbf_slurm_first_node(list, first, sizeof first) == 0) {
    if (nbf_slurm_node_addr(first, addr, sizeof addr) != 0) {
      /* 127.0.0.1 would send every machine to its own loopback */
      snprintf(err, errlen,
               "Slurm's first node %s does not resolve here and `scontrol show node %s` gave no "
               "NodeAddr: give --main_process_ip (machine 0's address)",
               first, first);
      return -1;
    }
    snprintf(c->o.master_addr, sizeof c->o.master_addr, "%s", addr);
    ln_cli_mark(c, "main_process_ip");
  }
  return 1;
}
