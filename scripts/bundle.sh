#!/usr/bin/env bash
# Download every Debian package nbfork's build and tests need (C libraries
# with their headers, TinyCC, pkg-config, the Fashion-MNIST dataset) into
# DIR, for machines without network: `scripts/deps.sh --offline DIR` installs
# from it there (into a prefix, also as a non-root user).
#
# Usage: scripts/bundle.sh [--no-dataset] DIR
#
# Runs where apt can reach a Debian mirror (not necessarily as root). The
# dependency closure is apt's (apt-cache depends, first alternative, the
# candidate versions); nothing is pinned here. What is left out on purpose:
#   - the browser, Jupyter's Python packages, PyTorch (they travel as wheels
#     or are not needed to build and test the C code);
#   - clang-16 and libfuzzer-16-dev (scripts/fuzz.sh only: CI's fuzz pass);
#   - ASSUMED: what every glibc distribution with a C compiler already has
#     (libc, libgcc, libstdc++, zlib runtime, dpkg's own tools);
#   - STATIC_ONLY: -dev packages that libzmq3-dev and libgloo-dev depend on
#     only for static linking (their pkg-config Requires.private); nbfork
#     links shared libraries, and deps.sh drops those Requires.private entries.
# Neither group's own dependencies are followed. DIR gets the .deb files and
# MANIFEST (origin, architecture, and per package: name, version,
# architecture, sha256, file).
set -euo pipefail

usage() { echo "usage: scripts/bundle.sh [--no-dataset] DIR" >&2; exit 2; }
dataset=1
[ "${1:-}" = "--no-dataset" ] && { dataset=0; shift; }
[ $# -eq 1 ] || usage
DIR=$1

# What the build and the tests use directly. One OpenBLAS variant (pthread,
# Debian's default) instead of libopenblas-dev, which pulls all of them.
ROOTS=(
  libzmq3-dev libjansson-dev libssl-dev zlib1g-dev
  libgloo-dev libyaml-dev
  libopenblas-pthread-dev libopenblas0-pthread
  libtcc-dev tcc
  pkgconf
)
[ $dataset -eq 1 ] && ROOTS+=(dataset-fashion-mnist)

ASSUMED=(
  libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1 libcrypt-dev
  libnsl2 libnsl-dev libtirpc3 libtirpc-dev libtirpc-common rpcsvc-proto
  libgcc-s1 libstdc++6 gcc-12-base zlib1g
  dpkg tar debconf adduser passwd install-info
)
STATIC_ONLY=(
  libkrb5-dev libsodium-dev libpgm-dev libnorm-dev libbsd-dev
  libhiredis-dev libibverbs-dev
)

for tool in apt-cache apt-get dpkg-deb sha256sum; do
  command -v $tool >/dev/null || { echo "bundle.sh: $tool not found (needs a Debian system with apt)" >&2; exit 1; }
done

declare -A skip seen
for p in "${ASSUMED[@]}" "${STATIC_ONLY[@]}"; do skip[$p]=1; done

# The hard dependencies (Depends, Pre-Depends) of the packages given, one a
# line: the first alternative of an "a | b" group, the first provider of a
# virtual package, as apt would pick.
direct_deps() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$@" | awk '
    /^[^ ]/ { prevalt = 0; wantprov = 0; next }
    /^ [ |](Pre)?Depends: / {
      first = !prevalt; prevalt = (substr($0, 2, 1) == "|"); wantprov = 0
      if (first) { if ($2 ~ /^</) wantprov = 1; else print $2 }
      next
    }
    /^    / { if (wantprov) { print $1; wantprov = 0 } }'
}

# Breadth-first closure, not following ASSUMED and STATIC_ONLY packages.
pkgs=()
frontier=()
for p in "${ROOTS[@]}"; do seen[$p]=1; pkgs+=("$p"); frontier+=("$p"); done
while [ ${#frontier[@]} -gt 0 ]; do
  next=()
  while read -r d; do
    d=${d%%:*}   # python3:any -> python3
    [ -n "${seen[$d]:-}" ] || [ -n "${skip[$d]:-}" ] && continue
    seen[$d]=1; pkgs+=("$d"); next+=("$d")
  done < <(direct_deps "${frontier[@]}")
  frontier=("${next[@]}")
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort)

# Download into a fresh folder beside the old bundle, then replace it, so
# an interrupted run never leaves a half-updated bundle behind.
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
tmp=$(mktemp -d "$DIR/.download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "bundle.sh: downloading ${#pkgs[@]} packages: ${pkgs[*]}"
# -o APT::Sandbox::User=root: as root, apt would otherwise try to download as
# _apt, which cannot write into a folder of the user's.
(cd "$tmp" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "${pkgs[@]}" >/dev/null)

. /etc/os-release
{
  echo "# nbfork offline bundle (scripts/bundle.sh); install: scripts/deps.sh --offline DIR"
  echo "# origin: ${ID:-unknown} ${VERSION_ID:-unknown} ${VERSION_CODENAME:-}"
  echo "# architecture: $(dpkg --print-architecture)"
  echo "# created: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# roots: ${ROOTS[*]}"
  echo "# assumed on the target (not bundled): ${ASSUMED[*]}"
  echo "# left out (static linking only): ${STATIC_ONLY[*]}"
  echo "# package	version	architecture	sha256	file"
  for f in "$tmp"/*.deb; do
    printf '%s\t%s\t%s\t%s\t%s\n' \
      "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(dpkg-deb -f "$f" Architecture)" "$(sha256sum <"$f" | cut -d' ' -f1)" "${f##*/}"
  done
} >"$tmp/MANIFEST"

n=$(grep -vc '^#' "$tmp/MANIFEST")
[ "$n" -eq ${#pkgs[@]} ] || { echo "bundle.sh: got $n of ${#pkgs[@]} packages" >&2; exit 1; }
rm -f "$DIR"/*.deb "$DIR/MANIFEST"
mv "$tmp"/*.deb "$tmp/MANIFEST" "$DIR/"

total=$(du -cb "$DIR"/*.deb | tail -1 | cut -f1)
echo "bundle.sh: $n packages, $((total / 1048576)) MiB ($total bytes) in $DIR"
if [ $dataset -eq 1 ]; then
  ds=$(du -b "$DIR"/dataset-fashion-mnist_*.deb | cut -f1)
  echo "bundle.sh: of which dataset-fashion-mnist $((ds / 1048576)) MiB (leave it out with --no-dataset)"
fi
