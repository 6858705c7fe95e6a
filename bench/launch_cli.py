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
runs --runs times, alternating tools (interleaved, so that a slow stretch
of a shared machine hits every tool alike); the table shows the median and
the ratio to torchrun's median (goal of issue 11: nbfork <= 0.2x torchrun),
and the load average before and after.

Every run is checked to have really run two workers: each worker prints
"rank R of 2 ...: sum 3 ok" (nbfork's example and the PyTorch script
alike), and the bench requires the lines of both ranks 0 and 1, each with
the sum only two contributing ranks give; a launcher that started one
worker, or two that did not meet, fails the bench instead of timing it.

Usage: bench/launch_cli.py [--build DIR] [--runs N]
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

SCRIPT = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
w = dist.get_world_size()
# one write(2) per line: the two workers share the launcher's stdout
os.write(1, (f"rank {dist.get_rank()} of {w} (pid {os.getpid()}): sum {x.item():g} "
             f"{'ok' if x.item() == w * (w + 1) / 2 else 'WRONG'}\\n").encode())
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find(tool):
    venv = os.path.join(REPO, ".venv", "bin", tool)
    return venv if os.access(venv, os.X_OK) else shutil.which(tool)


WORKER_LINE = re.compile(r"^(?:\[\d+\]:?\s*)?rank (\d+) of (\d+) \(.*\): sum (\S+) ok$", re.M)


def two_workers_ran(out):
    """The ranks whose worker printed its line with the sum of two ranks
    (1 + 2 = 3): {0, 1} when both workers ran and met."""
    return {int(r) for r, w, s in WORKER_LINE.findall(out) if w == "2" and float(s) == 3}


def timed(name, argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{argv[0]} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    ranks = two_workers_ran(r.stdout + r.stderr)
    if ranks != {0, 1}:
        sys.exit(f"{name}: expected workers of ranks 0 and 1 to print 'sum 3 ok', got ranks "
                 f"{sorted(ranks)}:\n{r.stdout}{r.stderr}")
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
    try:  # the script folder goes on every exit (a failed check raises)
        times = {k: [] for k in cmds}
        load = [os.getloadavg()[0]]
        for k, make in cmds.items():  # warm-up: page cache, Python bytecode
            timed(k, make(), env)
        for _ in range(args.runs):
            for k, make in cmds.items():
                times[k].append(timed(k, make(), env))
        load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(tmp)
    base = statistics.median(times["torchrun"]) if "torchrun" in times else None
    print(f"\n2 workers: rendezvous + one all-reduce + exit, median of {args.runs} interleaved "
          f"runs, each checked to have run ranks 0 and 1; load average (1 min) "
          f"{' -> '.join('%.1f' % x for x in load)} on {os.cpu_count()} CPUs")
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
