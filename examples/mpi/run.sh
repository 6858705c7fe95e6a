#!/bin/bash
# Open MPI (or MPICH) starts the ranks; each takes its place from
# OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (MPICH: PMI_RANK,
# PMI_SIZE, MPI_LOCALRANKID) and meets the others at MASTER_ADDR:MASTER_PORT,
# where rank 0 hosts the store.
#   examples/mpi/run.sh [NP] [PROGRAM [ARGS...]]
set -euo pipefail
NP=${1:-2}
shift || true
PROGRAM=("${@:-build/bin/nbfork-allreduce}")
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
mpirun "${ROOT[@]}" --oversubscribe -np "$NP" -x MASTER_ADDR -x MASTER_PORT "${PROGRAM[@]}"
