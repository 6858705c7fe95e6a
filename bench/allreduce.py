#!/usr/bin/python3
"""bench/allreduce: f32 all-reduce (SUM, in place) between 2 processes on
CPU: nbfork through shared memory, nbfork through Gloo and torch.distributed
over Gloo, interleaved round by round in one run, with a memcpy bandwidth
reference measured in the same run, and the load average.

- nbfork-shm: bench/allreduce.c (compiled here against the build tree's
  nbfork_internal, the runtime's objects as a static library) forks the
  ranks and times acc_all_reduce, i.e. the path and algorithm the runtime
  picks for each size (ranks on one node: shared memory,
  runtime/comm/acc_shm.c).
- nbfork-gloo: the same with NBFORK_SHM_COLLECTIVES=0 (Gloo over loopback
  TCP; with --algos all, every Gloo algorithm the runtime has, forced).
- PyTorch (.venv, `scripts/deps.sh --bench`: PyPI, pinned): torch.multiprocessing.start_processes
  (fork) + init_process_group("gloo") + dist.all_reduce on a float32 tensor,
  i.e. gloo::allreduce with AllreduceOptions (ring), as ProcessGroupGloo
  runs it.
- memcpy: memcpy of a buffer of the same size (one core), in the C program.
  PyTorch runs only when torch is in .venv (it is large: this bench does not
  install it).

Every call of every side is checked to have done the work: rank r
holds r + 1, so each call's result is a known integer (first, middle and
last element after each call, every element after the last; the buffers
are filled again, outside the timed span, before a value passes 2^24);
the memcpy's copy is compared with its source.

Each call is timed on rank 0; the table shows the median over the
iterations (median again over --rounds alternating rounds), the algorithm
bandwidth algbw = bytes / time and the bus bandwidth
busbw = algbw * 2(n-1)/n (nccl-tests' definition: the traffic per link of
a ring; equal to algbw for n = 2).

Usage: bench/allreduce.py [--build DIR] [--rounds R] [--algos auto|all]
                          [--sizes 4K,1M,16M,32M,64M]
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


def run_nbfork(exe, sizes, nproc, algos, shm):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NBFORK_SHM_COLLECTIVES="1" if shm else "0")
    out = subprocess.run([exe, "--nproc", str(nproc), "--algos", algos] + [str(s) for s in sizes],
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


# ---------------------------------------------------------------- PyTorch

def torch_rounds(dist, t, rank, world, iters, times=None):
    """`iters` in-place SUM all-reduces of t, each checked to have summed
    every rank's tensor, as bench/allreduce.c's check_rounds does: rank r
    holds r + 1, the first call gives world(world + 1)/2, each later one
    multiplies by world, and the tensor is filled again (untimed) before a
    value would pass 2^24 (integers exact in f32). First, middle and last
    element after each call; every element after the last."""
    first, want, n = world * (world + 1) // 2, 0, t.numel()
    for i in range(iters):
        if want == 0 or want * world >= 1 << 24:
            t.fill_(float(rank + 1))
            want = 0
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if times is not None:
            times.append(time.perf_counter() - t0)
        want = first if want == 0 else want * world
        got = (t[0].item(), t[n // 2].item(), t[n - 1].item())
        if got != (want, want, want):
            raise AssertionError("pytorch call %d: wrong sums %s (want %d)" % (i, got, want))
    if not bool(t.eq(want).all()):
        raise AssertionError("pytorch: wrong sums after %d calls (want %d)" % (iters, want))


def torch_worker(rank, world, port, sizes, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for nbytes in sizes:
        t = torch.empty((nbytes // 4,), dtype=torch.float32)
        torch_rounds(dist, t, rank, world, 4)  # first call correct, then warm-up
        dist.barrier()
        n = iters_for(nbytes)
        ts = []
        torch_rounds(dist, t, rank, world, n, ts)
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
    if len(rows) != len(sizes):  # start_processes raises when a worker fails
        sys.exit("pytorch: %d of %d sizes reported" % (len(rows), len(sizes)))
    return rows


# ---------------------------------------------------------------- report

def main():
    ap = argparse.ArgumentParser(description="all-reduce: nbfork vs torch.distributed (Gloo)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--algos", default="auto", help="auto (what the runtime runs) or all")
    ap.add_argument("--sizes", default="4K,1M,16M,32M,64M")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    exe = build_c(args.build)
    n = args.nproc
    have_torch = nbf_venv.torch_available()
    runs = {}  # (side, algo, bytes) -> [median per round]
    cpu = {}   # (side, bytes) -> [CPU s per call, rank 0]
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        rows = []
        for shm in (True, False):
            print("round %d/%d: nbfork-%s..." % (r + 1, args.rounds, "shm" if shm else "gloo"),
                  flush=True)
            got = run_nbfork(exe, sizes, n, "auto" if shm else args.algos, shm)
            for row in got:
                if row["side"] == "nbfork":
                    row["side"] = "nbfork-shm" if shm else "nbfork-gloo"
                    if row.get("forced"):
                        row["side"] = "gloo:" + row["algo"]
                elif not shm:
                    continue  # one memcpy per round: the one beside the shm run
                rows.append(row)
        if have_torch:
            print("round %d/%d: pytorch..." % (r + 1, args.rounds), flush=True)
            rows += run_torch(sizes, n)
        load.append(os.getloadavg()[0])
        for row in rows:
            algo = row.get("algo", "memcpy")
            runs.setdefault((row["side"], algo, row["bytes"]), []).append(row["median_s"])
            if "cpu_s" in row:
                cpu.setdefault((row["side"], row["bytes"]), []).append(row["cpu_s"])
    report(runs, cpu, sizes, n, args.rounds, have_torch, load)


def report(runs, cpu, sizes, n, rounds, have_torch, load):
    print()
    print("f32 all-reduce SUM, %d processes on CPU, %d rounds (interleaved); load average "
          "(1 min) %s on %d CPUs; busbw = algbw * 2(n-1)/n" %
          (n, rounds, " ".join("%.1f" % x for x in load), os.cpu_count()))
    print("%-28s %-26s %8s %12s %11s %11s %10s" % ("side", "algorithm", "size", "median",
                                                 "algbw GB/s", "busbw GB/s", "CPU/call"))
    factor = 2.0 * (n - 1) / n
    bw = {}
    order = ["nbfork-shm", "nbfork-gloo", "pytorch", "memcpy"]
    keys = sorted(runs, key=lambda k: (k[2], order.index(k[0]) if k[0] in order else 1.5, k[0]))
    for side, algo, nbytes in keys:
        med = statistics.median(runs[(side, algo, nbytes)])
        algbw = nbytes / med / 1e9
        busbw = algbw if side == "memcpy" else algbw * factor
        bw[(side, nbytes)] = algbw
        t = ("%.2f us" % (med * 1e6) if med < 1e-5 else "%.1f us" % (med * 1e6) if med < 1e-3
             else "%.2f ms" % (med * 1e3))
        c = cpu.get((side, nbytes))
        ct = "-" if not c else ("%.1f us" % (statistics.median(c) * 1e6)
                                if statistics.median(c) < 1e-3
                                else "%.2f ms" % (statistics.median(c) * 1e3))
        print("%-28s %-26s %8s %12s %11.3f %11s %10s" %
              (side, algo if side != "memcpy" else "memcpy", human(nbytes), t, algbw,
               "%.3f" % busbw if side != "memcpy" else "-", ct))
    print()
    print("%8s %16s %16s %18s %18s" % ("size", "shm/memcpy", "gloo/memcpy", "shm/gloo",
                                       "shm/pytorch"))
    for nbytes in sizes:
        s, g, m = bw[("nbfork-shm", nbytes)], bw[("nbfork-gloo", nbytes)], bw[("memcpy", nbytes)]
        p = bw.get(("pytorch", nbytes))
        print("%8s %15.1f%% %15.1f%% %17.2fx %18s" % (human(nbytes), 100 * s / m, 100 * g / m,
                                                       s / g, "%.2fx" % (s / p) if p else "-"))
    print()
    big = max(sizes)
    if 4096 in sizes:
        lat = statistics.median(runs[("nbfork-shm", next(a for (sd, a, b) in runs
                                                         if sd == "nbfork-shm" and b == 4096),
                                      4096)])
        print("goal 4 KiB latency <= 5 us: %.1f us (%s)" % (lat * 1e6,
                                                          "met" if lat <= 5e-6 else "NOT met"))
    frac = bw[("nbfork-shm", big)] / bw[("memcpy", big)]
    print("goal %s >= 50%% of memcpy: %.0f%% (%s)" % (human(big), 100 * frac,
                                                     "met" if frac >= 0.5 else "NOT met"))
    goal = 32 << 20
    if ("pytorch", goal) in bw:
        x = bw[("nbfork-shm", goal)] / bw[("pytorch", goal)]
        print("goal 32 MiB >= 5x PyTorch Gloo's bandwidth: %.1fx (%s)" %
              (x, "met" if x >= 5 else "NOT met"))
    print("(goals are for a quiet machine: load average above %d makes these figures a "
          "check that the bench works, not a measurement)" % os.cpu_count())

if __name__ == "__main__":
    main()
