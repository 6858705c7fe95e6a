#!/usr/bin/python3
"""bench/allreduce: f32 all-reduce (SUM, in place) between 2 processes on
CPU, nbfork vs torch.distributed over Gloo, side by side in one run, with a
memcpy bandwidth reference.

- nbfork: bench/allreduce.c (compiled here against the build tree's
  nbfork_internal, the runtime's objects as a static library) forks the
  ranks and times acc_all_reduce, i.e. the algorithm the runtime picks for
  each size (with --algos all, every Gloo algorithm
  the runtime has, forced, to show why it picks what it picks).
- PyTorch (.venv, `scripts/deps.sh --bench`: PyPI, pinned): torch.multiprocessing.start_processes
  (fork) + init_process_group("gloo") + dist.all_reduce on a float32 tensor,
  i.e. gloo::allreduce with AllreduceOptions (ring), as ProcessGroupGloo
  runs it.
- memcpy: memcpy of a buffer of the same size (one core), in the C program.

Each call is timed on rank 0; the table shows the median over the
iterations (median again over --rounds alternating rounds), the algorithm
bandwidth algbw = bytes / time and the bus bandwidth
busbw = algbw * 2(n-1)/n (nccl-tests' definition: the traffic per link of
a ring; equal to algbw for n = 2).

Usage: bench/allreduce.py [--build DIR] [--rounds R] [--algos auto|all]
                          [--sizes 4K,1M,16M,64M]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import nbf_venv  # noqa: E402  (.venv's Python: PyPI's jupyter_client, ipykernel, torch)
nbf_venv.ensure()
from nbf_harness import free_port  # noqa: E402  (the one test harness)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("IB")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def human(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d %s" % (n // k, unit)
    return "%d B" % n


def iters_for(nbytes):  # same as allreduce.c
    if nbytes <= 64 * 1024:
        return 400
    if nbytes <= 2 * 1024 * 1024:
        return 100
    if nbytes <= 32 * 1024 * 1024:
        return 20
    return 10


# ---------------------------------------------------------------- nbfork

def build_c(build):
    lib = os.path.join(build, "lib")
    if not os.path.exists(os.path.join(lib, "libnbfork.so")):
        sys.exit("no %s/libnbfork.so: build first (cmake --build %s) or pass --build" %
                 (lib, build))
    exe = os.path.join(build, "bench_allreduce")
    src = os.path.join(HERE, "allreduce.c")
    # It forces Gloo algorithms through internal hooks (acc__set_allreduce_algo),
    # which libnbfork.so does not export: link the same objects as the static
    # nbfork_internal, with the libraries the .so's pkg-config file names.
    pc = subprocess.run(["pkg-config", "--static", "--libs", "nbfork-uninstalled"],
                        env=dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig")),
                        check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    libs = [w for w in pc if w != "-lnbfork"]
    runtime = os.path.join(ROOT, "runtime")
    subsystems = [os.path.join(runtime, d) for d in sorted(os.listdir(runtime))
                  if os.path.isdir(os.path.join(runtime, d))]
    cmd = (["cc", "-O2", "-Wall", "-Wextra", src, "-I", os.path.join(ROOT, "include"),
            "-I", os.path.join(ROOT, "common")] + [f for d in subsystems for f in ("-I", d)] +
           ["-L", lib, "-lnbfork_internal", "-lnbfork_store", "-lnbfork_common"] + libs + ["-o", exe])
    subprocess.run(cmd, check=True)
    return exe


def run_nbfork(exe, sizes, nproc, algos):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([exe, "--nproc", str(nproc), "--algos", algos] + [str(s) for s in sizes],
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


# ---------------------------------------------------------------- PyTorch

def torch_worker(rank, world, port, sizes, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for nbytes in sizes:
        t = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
        dist.all_reduce(t)
        assert t[0].item() == world * (world + 1) / 2
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        n = iters_for(nbytes)
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            ts.append(time.perf_counter() - t0)
        ts.sort()
        if rank == 0:
            q.put({"side": "pytorch", "algo": "ring (AllreduceOptions)", "bytes": nbytes,
                   "iters": n, "median_s": ts[n // 2], "min_s": ts[0]})
        dist.barrier()
    dist.destroy_process_group()


def run_torch(sizes, nproc):
    import torch.multiprocessing as mp
    q = mp.get_context("fork").SimpleQueue()
    mp.start_processes(torch_worker, args=(nproc, free_port(), sizes, q), nprocs=nproc,
                       start_method="fork")
    rows = []
    while not q.empty():
        rows.append(q.get())
    return rows


# ---------------------------------------------------------------- report

def main():
    ap = argparse.ArgumentParser(description="all-reduce: nbfork vs torch.distributed (Gloo)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--algos", default="auto", help="auto (what the runtime runs) or all")
    ap.add_argument("--sizes", default="4K,1M,16M,64M")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    exe = build_c(args.build)
    n = args.nproc
    runs = {}  # (side, algo, bytes) -> [median per round]
    for r in range(args.rounds):
        print("round %d/%d: nbfork..." % (r + 1, args.rounds), flush=True)
        rows = run_nbfork(exe, sizes, n, args.algos)
        print("round %d/%d: pytorch..." % (r + 1, args.rounds), flush=True)
        rows += run_torch(sizes, n)
        for row in rows:
            algo = row.get("algo", "memcpy")
            if row["side"] == "nbfork" and row.get("forced"):
                side = "gloo:" + algo
            else:
                side = row["side"]
            runs.setdefault((side, algo, row["bytes"]), []).append(row["median_s"])
    print()
    print("f32 all-reduce SUM, %d processes on CPU (loopback TCP), %d rounds; "
          "busbw = algbw * 2(n-1)/n" % (n, args.rounds))
    print("%-28s %-26s %8s %12s %11s %11s" % ("side", "algorithm", "size", "median",
                                            "algbw GB/s", "busbw GB/s"))
    factor = 2.0 * (n - 1) / n
    bw = {}
    order = ["nbfork", "pytorch", "memcpy"]
    keys = sorted(runs, key=lambda k: (k[2], order.index(k[0]) if k[0] in order else 1.5, k[0]))
    for side, algo, nbytes in keys:
        med = statistics.median(runs[(side, algo, nbytes)])
        algbw = nbytes / med / 1e9
        busbw = algbw if side == "memcpy" else algbw * factor
        bw[(side, nbytes)] = busbw
        t = "%.1f us" % (med * 1e6) if med < 1e-3 else "%.2f ms" % (med * 1e3)
        print("%-28s %-26s %8s %12s %11.3f %11s" % (side, algo if side != "memcpy" else "memcpy",
                                                   human(nbytes), t, algbw,
                                                   "%.3f" % busbw if side != "memcpy" else "-"))
    print()
    print("%8s %22s %22s" % ("size", "nbfork/pytorch busbw", "nbfork busbw/memcpy"))
    ok = True
    for nbytes in sizes:
        a, p, m = bw[("nbfork", nbytes)], bw[("pytorch", nbytes)], bw[("memcpy", nbytes)]
        ok = ok and a >= p
        print("%8s %21.2fx %21.3f" % (human(nbytes), a / p, a / m))
    print()
    print("goal (nbfork >= pytorch at every size): %s" % ("met" if ok else "NOT met"))


if __name__ == "__main__":
    main()
