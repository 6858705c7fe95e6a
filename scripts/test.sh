#!/usr/bin/env bash
# Build nbfork and run every test (C unit tests, end-to-end tests through
# jupyter_client and nbclient, the notebooks, the browser tests of
# JupyterLab 4 and Notebook 7) with ctest. scripts/deps.sh first brings
# the Debian packages and the Python tools of .venv/ (PyPI, pinned) up to
# date; the end-to-end tests run .venv's Python. Exits non-zero on any
# failure.
#
# NBFORK_SANITIZE_TESTS=1 adds a second pass: a tree built with
# AddressSanitizer and UBSan (-DNBFORK_SANITIZE=ON, in build-asan/ or
# $SANITIZE_BUILD_DIR) runs the C unit tests (common, kernel, executor,
# launcher, runtime) and the kernel's protocol tests (the real
# nbfork-kernel fed bad input, with a fake executor). Any sanitizer
# report, from a test or from a process it started, fails the run.
#
# NBFORK_FUZZ_TESTS=1 adds, after it, 30 seconds of libFuzzer on each
# harness of tests/fuzz (scripts/fuzz.sh 30, in build-fuzz/ or
# $FUZZ_BUILD_DIR; clang-16): any finding fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 "$@")

if [ "${NBFORK_SANITIZE_TESTS:-0}" = 1 ]; then
  san_dir=${SANITIZE_BUILD_DIR:-build-asan}
  echo "nbfork: sanitizer pass (AddressSanitizer + UBSan) in $san_dir"
  cmake -S . -B "$san_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNBFORK_SANITIZE=ON >/dev/null
  cmake --build "$san_dir" -j"$(nproc)"
  reports=$(mktemp -d "${TMPDIR:-/tmp}/nbfork-sanitizer-XXXXXX")
  # Reports go to files, so those of forked ranks, kernels and executors
  # are caught too; UBSan stops at the first error; leaks are checked.
  export ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
  status=0
  (cd "$san_dir" && ctest --output-on-failure --timeout 900 -j"$(nproc)" \
    -R '^(common\.unit|kernel\.unit|kernel\.e2e|exec\.unit|launcher\.unit|launcher\.cli|runtime)\.') || status=$?
  if compgen -G "$reports/*" >/dev/null; then
    for f in "$reports"/*; do
      echo "=== sanitizer report $f"
      cat "$f"
    done
    status=1
  fi
  rm -rf "$reports"
  [ "$status" -eq 0 ] || { echo "nbfork: sanitizer pass failed"; exit "$status"; }
  echo "nbfork: sanitizer pass clean"
fi

if [ "${NBFORK_FUZZ_TESTS:-0}" = 1 ]; then
  echo "nbfork: fuzz pass (libFuzzer, 30 s per harness)"
  scripts/fuzz.sh 30
fi
