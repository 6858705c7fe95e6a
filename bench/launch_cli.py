#!/usr/bin/python3
"""bench/launch_cli: the wall time of a whole command-line launch of 2
workers that meet (rendezvous), run one all-reduce and exit, side by side
in one run:

- nbfork:     `nbfork launch --num_processes 2 --main_process_port 0
               build/bin/nbfork-allreduce` (examples/cli/allreduce.c)
- torchrun:   `torchrun --nproc-per-node 2 --master-port P script.py`,
               script = init_process_group("gloo") + one all_reduce of one
               float + destroy_process_group (the same work in PyTorch)
- accelerate: `accelerate launch --num_processes 2 --multi_gpu --main_process_port P
               script.py`, same script (Accelerate starts several processes
               only through its multi-GPU launcher, torchrun, which runs
               Gloo on CPU too; with --cpu it starts one process)

The PyTorch columns need torch (and accelerate) in the project's virtual
environment (.venv, `scripts/deps.sh --bench`) or on PATH; where they are
absent the bench says so and reports nbfork's own figures. Each command
runs --runs times, alternating tools; the table shows the median and the
ratio to torchrun's median (goal of issue 11: nbfork <= 0.2x torchrun).

Usage: bench/launch_cli.py [--build DIR] [--runs N]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

SCRIPT = """import torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
assert x.item() == dist.get_world_size() * (dist.get_world_size() + 1) / 2
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find(tool):
    venv = os.path.join(REPO, ".venv", "bin", tool)
    return venv if os.access(venv, os.X_OK) else shutil.which(tool)


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{argv[0]} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    nbfork = os.path.join(args.build, "bin", "nbfork")
    prog = os.path.join(args.build, "bin", "nbfork-allreduce")
    env = dict(os.environ, NBFORK_CONFIG_FILE="/nonexistent/nbfork-bench.yaml",
               OMP_NUM_THREADS="1")
    tmp = tempfile.mkdtemp(prefix="nbf-bench-launch-")
    script = os.path.join(tmp, "allreduce.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    cmds = {"nbfork launch": lambda: [nbfork, "launch", "-q", "--num_processes", "2",
                                      "--main_process_port", "0", prog]}
    torchrun, accelerate = find("torchrun"), find("accelerate")
    if torchrun:
        cmds["torchrun"] = lambda: [torchrun, "--nproc-per-node", "2", "--master-port",
                                    str(free_port()), script]
    else:
        print("torchrun: not found (install PyTorch in .venv: scripts/deps.sh --bench); "
              "column skipped")
    if accelerate:
        cmds["accelerate launch"] = lambda: [accelerate, "launch", "--num_processes", "2",
                                             "--multi_gpu", "--num_machines", "1",
                                             "--mixed_precision", "no", "--dynamo_backend", "no",
                                             "--main_process_port", str(free_port()), script]
    else:
        print("accelerate: not found (install Accelerate in .venv: scripts/deps.sh --bench); "
              "column skipped")
    times = {k: [] for k in cmds}
    for k, make in cmds.items():  # warm-up: page cache, Python bytecode
        timed(make(), env)
    for _ in range(args.runs):
        for k, make in cmds.items():
            times[k].append(timed(make(), env))
    shutil.rmtree(tmp)
    base = statistics.median(times["torchrun"]) if "torchrun" in times else None
    print(f"\n2 workers: rendezvous + one all-reduce + exit, median of {args.runs} runs "
          f"({os.cpu_count()} CPUs)")
    print(f"{'launcher':<20}{'median ms':>12}{'min ms':>10}{'max ms':>10}{'vs torchrun':>14}")
    for k, ts in times.items():
        med = statistics.median(ts)
        ratio = f"{med / base:.3f}x" if base else "n/a"
        print(f"{k:<20}{med * 1e3:>12.1f}{min(ts) * 1e3:>10.1f}{max(ts) * 1e3:>10.1f}"
              f"{ratio:>14}")
    if base:
        goal = statistics.median(times["nbfork launch"]) / base
        print(f"goal nbfork <= 0.2x torchrun: {'met' if goal <= 0.2 else 'NOT met'} "
              f"({goal:.3f}x)")


if __name__ == "__main__":
    main()
