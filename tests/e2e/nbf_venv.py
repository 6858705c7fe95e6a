"""nbf_venv: run this script with the project's virtual environment.

Tests and benchmarks use the Python tools of .venv/ (scripts/deps.sh:
jupyter_client 8, nbclient, and with --bench ipykernel 7 and PyTorch, all
pinned from PyPI). A script started with another Python calls ensure()
before importing any of them and is re-executed there with the same
arguments; where .venv/ does not exist it goes on as it is (Debian's
packages: jupyter_client 7, nbclient), so it still runs before deps.sh.
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
VENV = os.path.join(REPO, ".venv")
PYTHON = os.path.join(VENV, "bin", "python")


def ensure():
    """Re-execute the running script with .venv's Python unless it is
    already running there (or .venv/ is absent). Returns only then."""
    if os.path.exists(PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        os.execv(PYTHON, [PYTHON] + sys.argv)


def torch_available():
    """Whether .venv has PyTorch (the benchmarks' reference side); says so
    on stdout when it has not."""
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        print("torch is not in .venv: PyTorch's side is left out (scripts/deps.sh --bench "
              "installs it)", flush=True)
        return False
