#!/usr/bin/python3
"""bench/launch_overhead: wall time of a launch of 2 CPU workers whose
function creates the process group and all-reduces one float, nbfork vs
PyTorch, side by side in one run.

- nbfork: a `%launch one() num_processes=2` cell through the real kernel,
  timed from execute_request to status idle. "new" = the call expression is
  new each time, so the thunk is compiled (the whole cell as a user first
  runs it); "re-run" = the same cell again (thunk cached).
- PyTorch (.venv, `scripts/deps.sh --bench`: PyPI, pinned): torch.distributed.launcher.api.
  elastic_launch with static rendezvous and start_method="fork" (what
  Accelerate's notebook_launcher uses), and torch.multiprocessing.
  start_processes(fork) + init_process_group("gloo"); each worker
  all-reduces one float.

Prints medians and p90 over N runs and the ratio to elastic_launch
(goal: nbfork at most one third of it).

Usage: bench/launch_overhead.py [--runs N]   (build first: scripts/build.sh)
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import nbf_venv  # noqa: E402  (.venv's Python: PyPI's jupyter_client, ipykernel, torch)
nbf_venv.ensure()

ONE = r"""
int one(void) {
    acc_t *acc = acc_new(NULL);
    if (!acc) return 1;
    float x = 1;
    int rc = acc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM) != ACC_OK || x != 2;
    acc_destroy(&acc);
    return rc;
}
"""


def q(ts):
    ts = sorted(ts)
    return statistics.median(ts) * 1e3, ts[int(0.9 * (len(ts) - 1))] * 1e3


def bench_nbfork(runs):
    import nbf_harness as h
    k = h.Kernel()
    try:
        reply, out = k.execute(ONE)
        assert reply["status"] == "ok", h.errors(out)
        port = h.free_port()
        new, rerun = [], []
        for i in range(runs):
            # a different call text each time: the thunk is compiled anew
            code = "%%launch one(%s) num_processes=2 use_port=%d" % ("/*%d*/" % i, port)
            t0 = time.time()
            reply, out = k.execute(code)
            new.append(time.time() - t0)
            assert reply["status"] == "ok", h.errors(out)
            t0 = time.time()
            reply, out = k.execute(code)
            rerun.append(time.time() - t0)
            assert reply["status"] == "ok", h.errors(out)
        return new, rerun
    finally:
        k.close()


def torch_worker():
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == 2
    dist.destroy_process_group()


def torch_worker_sp(rank, port):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == 2
    dist.destroy_process_group()


def bench_elastic(runs):
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    from nbf_harness import free_port
    ts = []
    for _ in range(runs):
        port = free_port()
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id="bench",
                           rdzv_backend="static", rdzv_endpoint="127.0.0.1:%d" % port,
                           rdzv_configs={"rank": 0}, max_restarts=0, monitor_interval=0.1,
                           start_method="fork")
        t0 = time.time()
        elastic_launch(cfg, torch_worker)()
        ts.append(time.time() - t0)
    return ts


def bench_start_processes(runs):
    import torch.multiprocessing as mp
    from nbf_harness import free_port
    ts = []
    for _ in range(runs):
        t0 = time.time()
        mp.start_processes(torch_worker_sp, args=(free_port(),), nprocs=2, start_method="fork")
        ts.append(time.time() - t0)
    return ts


def main():
    ap = argparse.ArgumentParser(description="launch overhead: nbfork vs PyTorch")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    import logging
    logging.disable(logging.WARNING)  # torch elastic logs every launch
    new, rerun = bench_nbfork(args.runs)
    elastic = bench_elastic(args.runs)
    sp = bench_start_processes(args.runs)
    rows = [("nbfork %launch (thunk compiled)", new), ("nbfork %launch (re-run)", rerun),
            ("torch elastic_launch (static, fork)", elastic),
            ("torch start_processes + init_process_group", sp)]
    ref = q(elastic)[0]
    print("%-45s %10s %10s %12s" % ("launch of 2 workers + 1 all-reduce", "median ms", "p90 ms",
                                     "/ elastic"))
    for name, ts in rows:
        med, p90 = q(ts)
        print("%-45s %10.1f %10.1f %11.2fx" % (name, med, p90, med / ref))
    print("goal: nbfork at most 1/3 of elastic_launch (0.33x)")


if __name__ == "__main__":
    main()
