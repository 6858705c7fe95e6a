#!/usr/bin/env bash
# The main job: install what is needed, build, install the kernelspec and
# run notebooks/fashion_mnist.ipynb headless, printing each cell's output
# as it comes. The executed notebook is saved under build/.
# Uses the GPUs when present, CPU processes otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
# .venv's nbclient and jupyter_client (scripts/deps.sh made it), as the tests
exec .venv/bin/python scripts/run_notebook.py notebooks/fashion_mnist.ipynb \
  build/fashion_mnist.executed.ipynb "$@"
