#!/usr/bin/env bash
# Configure and build nbfork into build/, and install the kernelspec for
# this user (pointing at build/bin/nbfork-kernel).
#
# With a prefix from an offline bundle (scripts/deps.sh --offline DIR
# [--prefix PREFIX]): NBFORK_DEPS_PREFIX=PREFIX, or .deps/ when it exists,
# the libraries and headers are taken from there first, and the binaries get
# an rpath to it. Use a fresh BUILD_DIR when switching to or from a prefix
# (CMake caches where it found each library).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

deps_args=()
DEPS=${NBFORK_DEPS_PREFIX:-}
[ -z "$DEPS" ] && [ -e .deps/.nbfork-deps ] && DEPS=$PWD/.deps
if [ -n "$DEPS" ]; then
  [ -s "$DEPS/.nbfork-deps" ] || { echo "build.sh: $DEPS is not a complete prefix of scripts/deps.sh --offline" >&2; exit 1; }
  DEPS=$(cd "$DEPS" && pwd)
  ma=$(gcc -print-multiarch 2>/dev/null || true)
  ma=${ma:-$(uname -m)-linux-gnu}
  # pkg-config (libzmq, jansson, and hints for OpenSSL) looks in the prefix
  # first; CMAKE_PREFIX_PATH does the same for find_path/find_library (Gloo,
  # cblas.h, libtcc, zlib), which add lib/<multiarch> and include/<multiarch>.
  export PKG_CONFIG_PATH="$DEPS/usr/lib/$ma/pkgconfig:$DEPS/usr/lib/pkgconfig:$DEPS/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  deps_args+=(-DCMAKE_PREFIX_PATH="$DEPS/usr")
  # Arch-specific headers (openssl/configuration.h) live in include/<multiarch>,
  # which the compiler searches by itself only under /usr: add the prefix's,
  # ahead of any other copy there.
  deps_args+=(-DCMAKE_C_STANDARD_INCLUDE_DIRECTORIES="$DEPS/usr/include/$ma"
    -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$DEPS/usr/include/$ma")
  # The system's pkg-config, else the bundle's through its wrapper (CMake
  # would otherwise pick $DEPS/usr/bin/pkg-config, which cannot find its own
  # library there).
  pc=$(command -v pkg-config || echo "$DEPS/bin/pkg-config")
  deps_args+=(-DPKG_CONFIG_EXECUTABLE="$pc")
  # Binaries find the prefix's libraries through an rpath. DT_RPATH, not
  # DT_RUNPATH (--disable-new-dtags): only DT_RPATH also serves the libraries'
  # own dependencies (libzmq -> libsodium), which carry no rpath themselves.
  rpath=$(paste -sd';' "$DEPS/libdirs")
  deps_args+=(-DCMAKE_BUILD_RPATH="$rpath" -DCMAKE_INSTALL_RPATH="$rpath"
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags)
  echo "build.sh: dependencies from $DEPS"
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} "${deps_args[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
"$BUILD_DIR/bin/nbfork-kernel" install --user >/dev/null
