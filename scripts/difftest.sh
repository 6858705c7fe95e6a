#!/bin/sh
# Differential test of the cell engine (tests/exec/difftest.py): N random
# cells (default 10000) from seed S (default: the time), each run through
# the executor with TinyCC, with NBFORK_JIT=0 and by GCC as one program.
# Usage: scripts/difftest.sh [N] [SEED]    (build first: scripts/build.sh)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-10000}
seed=${2:-$(date +%s)}
echo "difftest: $n cells, seed $seed"
exec python3 "$here/tests/exec/difftest.py" --seed "$seed" --cells "$n" --jobs "${JOBS:-0}"
