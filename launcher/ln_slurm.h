/*
 * ln_slurm — `srun nbfork launch ...` (one task per node): the launcher
 * of each node takes num_machines, machine_rank and main_process_ip from
 * Slurm (SLURM_NNODES, SLURM_NODEID, the first node of the step's
 * hostlist), as `srun accelerate launch` users otherwise pass by hand.
 */
#ifndef LN_SLURM_H
#define LN_SLURM_H

#include <stddef.h>

#include "ln_cli.h"

/* Inside a Slurm step (SLURM_STEP_ID, SLURM_NNODES, SLURM_NODEID set),
 * fill the settings the user did not give: num_machines, machine_rank,
 * and main_process_ip when it is still the default 127.0.0.1 and the job
 * spans several nodes (the first node's address: nbf_slurm_node_addr).
 * Returns 1 when Slurm supplied something, else 0; -1 with err filled
 * when the first node's address cannot be found (no --main_process_ip). */
int ln_slurm_apply(ln_cli_t *c, char *err, size_t errlen);

#endif
