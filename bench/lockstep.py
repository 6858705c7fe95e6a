#!/usr/bin/python3
"""bench/lockstep: why two data-parallel ranks on two CPUs, one of them
busy elsewhere, train no faster than one rank (issue 24, item 2).

One rank of bench/lockstep.c is the training step of
notebooks/fashion_mnist.ipynb (MLP 784-256-10, batch 64 per rank, SGD with
momentum, one BLAS thread: OpenBLAS through libnbfork), on fixed synthetic
data. A process spinning on one CPU (another user's job) runs throughout
(--quiet: none). Interleaved, --repeat times each:

- "1 rank": one process, no collective: the anchor (1x);
- "2 ranks": data parallel through shared memory, the gradient (813 KB)
  all-reduced every step, as `%launch ... num_processes=2` trains;
- "2 ranks on 1 CPU": the same, both ranks pinned to CPU 0 (taskset), the
  spinner free: time-sharing one CPU, the cost of the all-reduce alone;
- "2 ranks, no sync": the same processes without the all-reduce, training
  apart: what the scheduler gives two independent processes;
- "2 ranks, Gloo": the all-reduce through Gloo (NBFORK_SHM_COLLECTIVES=0).

Reading the table: if "2 ranks" equals "2 ranks on 1 CPU", the scheduler
keeps the two ranks on one CPU and the spinner alone on the other. Ranks
that wait for each other every step sleep part of the time, so the pair
never looks busier than the spinner to the load balancer, which moves
tasks only from the busier CPU; two independent processes ("no sync") are
both always runnable and get rotated, up to 4/3 of a CPU between them.
Each row is checked to have run every step with a finite loss and the
expected world size, and gives images/s (all ranks), CPU per image and
the ratio to "1 rank". The load average is printed per round.

Usage: bench/lockstep.py [--steps N] [--repeat R] [--quiet]   (build first: scripts/build.sh)
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

import nbf_cbench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


SIDES = [  # name, ranks, command prefix, extra args, environment
    ("1 rank", 1, [], [], {}),
    ("2 ranks", 2, [], [], {}),
    ("2 ranks on 1 CPU", 2, ["taskset", "-c", "0"], [], {}),
    ("2 ranks, no sync", 2, [], ["--no-sync"], {}),
    ("2 ranks, Gloo", 2, [], [], {"NBFORK_SHM_COLLECTIVES": "0"}),
]


def run(nbfork, exe, ranks, prefix, extra, env, steps):
    """One launch: (images/s of all ranks, CPU seconds per image)."""
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", **env)
    out = subprocess.run(prefix + [nbfork, "launch", "-q", "--num_processes", str(ranks), exe,
                                   str(steps)] + extra,
                         env=e, stdout=subprocess.PIPE, text=True, check=True).stdout
    rows = re.findall(r"rank (\d+)/(\d+) steps (\d+) images/s (\d+) cpu_s ([\d.]+) loss (\S+)", out)
    if len(rows) != ranks or any(int(w) != ranks or int(s) != steps or
                                 not math.isfinite(float(l)) for _, w, s, _, _, l in rows):
        sys.exit("a run did not do the work: %r" % out)
    ips = sum(float(r[3]) for r in rows)
    cpu = sum(float(r[4]) for r in rows)
    return ips, cpu / (steps * 64 * ranks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="steps of the 1-rank run (2 ranks: half)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quiet", action="store_true", help="no spinning process")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    exe = nbf_cbench.build(args.build, "lockstep")
    nbfork = os.path.join(args.build, "bin", "nbfork")
    hog = None if args.quiet else subprocess.Popen(["sh", "-c", "while :; do :; done"])
    res = {s[0]: [] for s in SIDES}
    loads = []
    try:
        time.sleep(0.2)
        for r in range(args.repeat):
            loads.append(os.getloadavg()[0])
            for name, ranks, prefix, extra, env in SIDES:
                res[name].append(run(nbfork, exe, ranks, prefix, extra, env,
                                     args.steps // ranks))
    finally:
        if hog:
            hog.kill()
            hog.wait()
    report(res, loads, args, nbf_cbench.blas_of_libnbfork(args.build))


def report(res, loads, args, blas):
    print("%s; %d interleaved rounds of %d images each; BLAS: %s (1 thread); load average "
          "(1 min) at each round: %s on %d CPUs" %
          ("quiet machine" if args.quiet else "one CPU kept busy by a spinning process",
           args.repeat, args.steps * 64, blas, " ".join("%.1f" % x for x in loads),
           os.cpu_count()))
    base = statistics.median(x[0] for x in res["1 rank"])
    base_cpu = statistics.median(x[1] for x in res["1 rank"])
    print("%-20s %12s %18s %10s %12s" % ("side", "images/s", "(min-max)", "vs 1 rank",
                                         "CPU/image"))
    for name, runs in res.items():
        ips = [x[0] for x in runs]
        cpi = statistics.median(x[1] for x in runs)
        print("%-20s %12.0f %8.0f-%-9.0f %9.2fx %8.1f us (%.2fx)" %
              (name, statistics.median(ips), min(ips), max(ips), statistics.median(ips) / base,
               cpi * 1e6, cpi / base_cpu))


if __name__ == "__main__":
    main()
