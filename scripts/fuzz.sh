#!/usr/bin/env bash
# Fuzz nbfork's decoders and loaders with libFuzzer (tests/fuzz): configure
# a clang tree with coverage, AddressSanitizer and UBSan in build-fuzz/ (or
# $FUZZ_BUILD_DIR; -DNBFORK_FUZZ=ON, CC=clang-16 CXX=clang++-16: Debian
# clang-16 and libfuzzer-16-dev, scripts/deps.sh installs them), build the
# harnesses and run each, one after the other, on its seed corpus
# (tests/fuzz/corpus/<harness>/, with tests/fuzz/<harness>.dict) for
# SECONDS each (default 60). FUZZ_RUNS=N stops each after N executions
# instead (the README's figures: FUZZ_RUNS=1000000). Inputs found
# interesting go to a scratch corpus, not the committed one.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]   (harnesses: wire split options
#                                             store idx checkpoint config
#                                             trainer_state; default all)
#
# Prints executions, seconds and executions per second per harness. Exits
# non-zero on any finding (a crash, a sanitizer report, a leak, an input
# running over 10 s, more than 2 GiB of memory); the input that caused it
# is kept in $FUZZ_BUILD_DIR/findings/<harness>/ and its report printed.
# Add it to the corpus (and a unit test) once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(wire split options store idx checkpoint config trainer_state)
dir=${FUZZ_BUILD_DIR:-build-fuzz}
cc=${FUZZ_CC:-clang-16}
cxx=${FUZZ_CXX:-clang++-16}
command -v "$cc" >/dev/null || {
  echo "fuzz.sh: $cc not found (Debian clang-16 and libfuzzer-16-dev: scripts/deps.sh)"
  exit 1
}

CC=$cc CXX=$cxx cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNBFORK_FUZZ=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" --target nbf_fuzzers

# Loaders read files: give them memory-backed scratch space when there is.
base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
scratch=$(mktemp -d "$base/nbfork-fuzz-XXXXXX")
trap 'rm -rf "$scratch"' EXIT

limit=(-max_total_time="$seconds")
[ -z "${FUZZ_RUNS:-}" ] || limit=(-runs="$FUZZ_RUNS")
status=0
printf '%-14s %12s %9s %9s  %s\n' harness executions seconds exec/s result
for h in "${harnesses[@]}"; do
  exe=$dir/bin/fuzz_$h
  [ -x "$exe" ] || { echo "fuzz.sh: no harness $h ($exe)"; exit 2; }
  work=$scratch/corpus-$h findings=$dir/findings/$h log=$scratch/$h.log
  mkdir -p "$work" "$findings"
  dict=()
  [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
  t0=$(date +%s.%N)
  rc=0
  TMPDIR=$scratch "$exe" "$work" "tests/fuzz/corpus/$h" "${dict[@]}" "${limit[@]}" \
    -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
    -artifact_prefix="$findings/" >"$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  rate=$(awk -v n="${execs:-0}" -v s="$secs" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FINDING (exit $rc): see below"
    status=1
  fi
  printf '%-14s %12s %9s %9s  %s\n' "$h" "${execs:-?}" "$secs" "$rate" "$result"
  if [ "$rc" -ne 0 ]; then
    echo "=== fuzz_$h log (input kept in $findings/)"
    tail -n 80 "$log"
  fi
done
[ "$status" -eq 0 ] || { echo "nbfork: fuzzing found a bug"; exit "$status"; }
echo "nbfork: fuzzing clean"
