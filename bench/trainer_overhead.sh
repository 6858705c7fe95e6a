#!/bin/sh
# bench/trainer_overhead.sh — build bench/trainer_overhead.c against the
# build tree and run it (Trainer vs the notebook's hand-written loop).
# Usage: bench/trainer_overhead.sh [--build DIR] [--repeat R] [--limit N] [-- TRAINER FLAGS]
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
if [ "$1" = "--build" ]; then BUILD=$2; shift 2; fi
[ -f "$BUILD/lib/libnbfork.so" ] || { echo "no $BUILD/lib/libnbfork.so: build first (scripts/build.sh)" >&2; exit 1; }
EXE=$BUILD/bench_trainer_overhead
cc -O2 -Wall -Wextra "$ROOT/bench/trainer_overhead.c" -I "$ROOT/include" -L "$BUILD/lib" -lnbfork \
  -lm -Wl,-rpath,"$BUILD/lib" -o "$EXE"
OPENBLAS_NUM_THREADS=1 exec "$EXE" "$@"
