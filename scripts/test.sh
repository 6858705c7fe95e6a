#!/usr/bin/env bash
# Build nbfork and run every test (C unit tests, end-to-end tests through
# jupyter_client and nbclient, the notebooks, the browser test) with ctest.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 "$@"
