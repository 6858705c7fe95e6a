/*
 * ln_mpirun — `nbfork launch --mpirun_hostfile F PROGRAM`: the mpirun
 * command line Accelerate builds (accelerate/utils/launch.py,
 * prepare_multi_cpu... / _get_mpirun_args): Open MPI takes --hostfile,
 * --map-by ppr:N:node and -np; MPICH and Intel MPI take -f, -ppn and -n.
 * The ranks then take their place from the MPI environment (acc_core.c).
 */
#ifndef LN_MPIRUN_H
#define LN_MPIRUN_H

#include "ln_cli.h"

/* The argv (NULL-terminated; caller frees the array and its strings
 * with ln_mpirun_free) that runs prog_argv under mpirun for settings c
 * (per-node o.num_processes, num_machines, main_process_ip/port,
 * mixed_precision). `open_mpi` picks the flavour (see above); as_root
 * adds Open MPI's --allow-run-as-root. NULL when out of memory. */
char **ln_mpirun_argv(const ln_cli_t *c, char *const *prog_argv, int open_mpi, int as_root);

void ln_mpirun_free(char **argv);

/* 1 when `mpirun --version` says Open MPI, 0 otherwise, -1 when mpirun
 * cannot be run. */
int ln_mpirun_is_open_mpi(void);

#endif
