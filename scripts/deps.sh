#!/usr/bin/env bash
# Install the Debian packages nbfork needs to build, run and be tested.
# Usage: scripts/deps.sh [--bench]   (--bench adds PyTorch for bench/)
set -euo pipefail
pkgs=(
  build-essential cmake pkg-config
  libzmq3-dev libjansson-dev libssl-dev zlib1g-dev
  libgloo-dev libopenblas-dev libopenblas0
  tcc libtcc-dev
  dataset-fashion-mnist
  python3 python3-jupyter-client python3-nbclient python3-nbformat python3-ipykernel
  jupyter-notebook jupyter-console
  python3-selenium chromium chromium-driver
)
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(python3-torch)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "nbfork: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
