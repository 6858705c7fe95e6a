#!/bin/bash
# nbfork builds the mpirun command from a hostfile, as `accelerate launch
# --mpirun_hostfile` does (Open MPI: --hostfile F --map-by ppr:N:node -np T).
#   examples/mpi/hostfile_launch.sh [HOSTFILE] [PROGRAM [ARGS...]]
set -euo pipefail
HOSTFILE=${1:-examples/mpi/hostfile}
shift || true
NBFORK=${NBFORK:-$(command -v nbfork || echo build/bin/nbfork)}
"$NBFORK" launch --mpirun_hostfile "$HOSTFILE" --num_processes "${NUM_PROCESSES:-2}" \
  --main_process_port "${MASTER_PORT:-29500}" "${@:-build/bin/nbfork-allreduce}"
