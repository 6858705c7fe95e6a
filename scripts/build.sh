#!/usr/bin/env bash
# Configure and build nbfork into build/, and install the kernelspec for
# this user (pointing at build/bin/nbfork-kernel).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
"$BUILD_DIR/bin/nbfork-kernel" install --user >/dev/null
