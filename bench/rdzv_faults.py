#!/usr/bin/python3
"""bench/rdzv_faults: time from a launch cell's start to its error, per
fault, over several trials, through real kernels on loopback (two kernels
are node 0 and node 1), and what each trial left behind (processes below
each kernel other than its executor). The figures of README's "Faults
survived" rows for the rendezvous and a rank leaving early.

Faults (rdzv_timeout=T, default 5 s):
  secret_node0_only   rdzv_conf=secret=alpha on node 0, none on node 1
  secret_node1_only   the reverse
  other_secrets       alpha on node 0, beta on node 1
  rdzv_id             rdzv_id=alpha / rdzv_id=beta
  num_processes       num_processes=2 / 1
  num_nodes           num_nodes=2 / 3
  rank_returns        one node, 2 ranks: rank 1 returns mid-collectives
  rank_exit0          the same with exit(0)

Usage: bench/rdzv_faults.py [--build DIR] [--trials N] [--rdzv-timeout T]
                            [--only NAME,...]
"""
import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

TWO_NODE = {
    "secret_node0_only": ("rdzv_conf=secret=alpha", ""),
    "secret_node1_only": ("", "rdzv_conf=secret=alpha"),
    "other_secrets": ("rdzv_conf=secret=alpha", "rdzv_conf=secret=beta"),
    "rdzv_id": ("rdzv_id=alpha", "rdzv_id=beta"),
    "num_processes": ("num_processes=2", ""),
    "num_nodes": ("", "num_nodes=3"),
}
ONE_NODE = {"rank_returns": 0, "rank_exit0": 1}


def two_node_trial(h, t, kernels, opts, timeout_s):
    port = h.free_port()
    res = [None, None]

    def run(i):
        t0 = time.monotonic()
        reply, out = kernels[i].execute(
            "%%launch reduce_ones() num_processes=1 num_nodes=2 node_rank=%d use_port=%d "
            "rdzv_timeout=%d %s" % (i, port, timeout_s, opts[i]), timeout=timeout_s + 300)
        errs = h.errors(out)
        res[i] = (time.monotonic() - t0, errs[0]["evalue"] if errs else "(no error)")

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    left = sum(len(t.descendants(t.kernel_pid(k))) - 1 for k in kernels)
    return res, left


def one_node_trial(h, t, k, how):
    port = h.free_port()
    t0 = time.monotonic()
    reply, out = k.execute("%%launch leave_early(%d) num_processes=2 use_port=%d" % (how, port))
    errs = h.errors(out)
    res = [(time.monotonic() - t0, errs[0]["evalue"] if errs else "(no error)")]
    return res, len(t.descendants(t.kernel_pid(k))) - 1


def summary(name, times, lefts, sample):
    per_node = list(zip(*times))
    cols = []
    for node, ts in enumerate(per_node):
        cols.append("node %d: median %.2f s, max %.2f s" % (node, statistics.median(ts), max(ts)))
    print("%-18s trials %d | %s | left behind: %d processes" %
          (name, len(times), " | ".join(cols), sum(lefts)))
    print("    %s" % sample[:220])
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--rdzv-timeout", type=int, default=5)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.environ["NBFORK_BUILD_DIR"] = os.path.abspath(a.build)
    import nbf_harness as h
    import test_rdzv_faults as t
    only = set(filter(None, a.only.split(",")))
    print("rdzv_timeout=%d s, %d trials per fault" % (a.rdzv_timeout, a.trials))
    kernels = [h.Kernel(), h.Kernel()]
    try:
        for k in kernels:
            reply, out = k.execute(t.DEFS)
            assert reply["status"] == "ok", h.errors(out)
        for name, opts in TWO_NODE.items():
            if only and name not in only:
                continue
            times, lefts, sample = [], [], ""
            for _ in range(a.trials):
                res, left = two_node_trial(h, t, kernels, opts, a.rdzv_timeout)
                times.append([r[0] for r in res])
                lefts.append(left)
                sample = res[1][1]
            summary(name, times, lefts, sample)
        for name, how in ONE_NODE.items():
            if only and name not in only:
                continue
            times, lefts, sample = [], [], ""
            for _ in range(a.trials):
                res, left = one_node_trial(h, t, kernels[0], how)
                times.append([r[0] for r in res])
                lefts.append(left)
                sample = res[0][1]
            summary(name, times, lefts, sample)
    finally:
        for k in kernels:
            k.close()


if __name__ == "__main__":
    main()
