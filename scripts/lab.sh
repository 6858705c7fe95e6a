#!/usr/bin/env bash
# JupyterLab with the nbfork kernel: on loopback, notebooks/ open, the URL
# with its token printed. What is missing first (the virtual environment,
# the build) is installed or built; the kernelspec goes into .venv/ so the
# venv's `jupyter kernelspec list` shows it.
# Usage: scripts/lab.sh [JUPYTER LAB OPTIONS...]   e.g. --port=8899
# From another machine: ssh -L 8888:127.0.0.1:8888 HOST, then open the URL.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=$root/.venv
kernel=$root/${BUILD_DIR:-build}/bin/nbfork-kernel

[ -x "$venv/bin/jupyter-lab" ] || scripts/deps.sh
[ -x "$kernel" ] || scripts/build.sh
"$kernel" install --prefix "$venv" >/dev/null ||
  { echo "lab.sh: could not install the nbfork kernelspec into $venv" >&2; exit 1; }

args=(--no-browser --ip=127.0.0.1)
# notebooks/ unless the caller names another folder (Jupyter takes one only)
case " $* " in
  *" --ServerApp.root_dir"* | *" --notebook-dir"*) ;;
  *) args+=(--ServerApp.root_dir="$root/notebooks") ;;
esac
# Jupyter refuses root unless told; root is the usual user of a fresh VM.
[ "$(id -u)" -ne 0 ] || args+=(--allow-root)
echo "lab.sh: JupyterLab on loopback; open the http://127.0.0.1:... URL it prints below"
echo "lab.sh: (with its token) and pick \"C (nbfork)\" in the Launcher. Ctrl+C stops it."
exec "$venv/bin/jupyter-lab" "${args[@]}" "$@"
