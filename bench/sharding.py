#!/usr/bin/python3
"""bench/sharding: sharded data parallel on CPU, nbfork against PyTorch
(issue 23 item 8): per-rank memory and samples/s for DDP and ZeRO stages
1-3 on 2 and 4 processes, one MLP of 50-100 M parameters, interleaved
round by round, with the load average printed; two models of about the
same size: 12 layers 2048 wide (large wrap units: one layer is 8% of the
model) and 48 layers 1024 wide (2%), since stage 3's peak holds one or
two gathered units beyond the shards.

- nbfork: bench/sharding.c (compiled here against the build tree's
  libnbfork) forks the ranks; each trains the toolkit MLP (OpenBLAS's
  sgemm, one thread per process) through acc_shard at the stage (stage 0 =
  DDP: the gradient all-reduced; host collectives through shared memory,
  the default on one node), AdamW, one fixed batch per rank. Stage 3 runs
  twice: with prefetch of the next unit (cfg.prefetch both ways: FSDP's
  BACKWARD_PRE + forward_prefetch) and without (the default, as
  Accelerate's FSDP plugin: one unit gathered at a time).
- PyTorch (.venv): torch.multiprocessing (fork) + init_process_group("gloo"),
  nn.Sequential of the same Linear/ReLU layers, torch.optim.AdamW,
  cross-entropy, torch.set_num_threads(1), the same batch shape. DDP:
  DistributedDataParallel. Stage 3: FSDP2 `fully_shard` on every Linear
  and the root (reshard_after_forward=True: FULL_SHARD). Stages 1 and 2:
  `fully_shard(..., reshard_after_forward=False)` (FSDP's SHARD_GRAD_OP,
  the nearest FSDP has: FSDP has no optimizer-only sharding; it is
  compared with both).

Each side is checked to have done the work: the same number of steps, and
the loss of the last step below that of the first (the batch is fixed, so
training must fit it). Memory per rank, the largest over the ranks:
"state" = parameters + gradients + optimizer state. nbfork's is measured
(acc_shard_state_bytes: resident pages, peak over the step and after it;
at stage 3 the unit buffers a layer is gathered into and its gradient
computed in count, the one a prefetch is filling whole);
PyTorch's is counted from the local tensors after the last step (shards
for FSDP2: its steady state; its peak during a step is not visible from
Python). "RSS" = the process's peak resident set (getrusage), both sides.
The goals checked: nbfork's stage 3 state, after a step and at its peak,
<= DDP's / N +10%; nbfork's samples/s >= 1.5x PyTorch's at each stage.

Usage: bench/sharding.py [--build DIR] [--rounds R] [--steps K]
                         [--batch B] [--nprocs 2,4] [--stages 0,1,2,3]
                         [--models 12,48 | --sizes 2048,...]
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import nbf_venv  # noqa: E402  (.venv's Python: PyPI's torch)
nbf_venv.ensure()
from nbf_harness import free_port  # noqa: E402  (the one test harness)
import nbf_cbench  # noqa: E402  (bench/: the C side's build and BLAS)

# 12 layers 2048 x 2048 and a 1000-way head: 52.4 M parameters (params());
# 48 layers 1024 x 1024 and the head: 51.4 M parameters in units 4x smaller
MODELS = {"12": [2048] * 13 + [1000], "48": [1024] * 49 + [1000]}


def params(sizes):
    return sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))


# ---------------------------------------------------------------- nbfork

def run_nbfork(exe, stage, nproc, steps, batch, sizes, prefetch=True):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([exe, "--nproc", str(nproc), "--stage", str(stage), "--steps",
                          str(steps), "--batch", str(batch)] + ([] if prefetch else ["--no-prefetch"])
                         + [str(s) for s in sizes],
                         env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return rows[0]


# ---------------------------------------------------------------- PyTorch

def torch_worker(rank, world, port, stage, steps, batch, sizes, q):
    import torch
    import torch.distributed as dist
    from torch import nn
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if stage == 0:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        reshard = stage == 3
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank + 1)
    x = torch.rand(batch, sizes[0], generator=g) * 2 - 1
    y = torch.arange(batch) % sizes[-1]
    lossf = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    first = last = step()  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        last = step()
    dist.barrier()
    dt = time.perf_counter() - t0

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    state = 0
    for p in model.parameters():
        state += local(p).numel() * 4
        if p.grad is not None:
            state += local(p.grad).numel() * 4
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.numel() > 1:
                state += local(v).numel() * v.element_size()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = torch.tensor([float(state), float(rss)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put({"side": "pytorch", "stage": stage, "nproc": world, "steps": steps,
               "params": params(sizes), "samples_per_s": world * batch * steps / dt,
               "loss_first": first, "loss_last": last, "state_after_step_bytes": t[0].item(),
               "maxrss_bytes": t[1].item()})
    dist.destroy_process_group()


def run_torch(stage, nproc, steps, batch, sizes):
    import torch.multiprocessing as mp
    q = mp.get_context("fork").SimpleQueue()
    mp.start_processes(torch_worker, args=(nproc, free_port(), stage, steps, batch, sizes, q),
                       nprocs=nproc, start_method="fork")
    return q.get()


def torch_blas():
    import torch
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", cfg)
    return "torch %s, BLAS_INFO=%s" % (torch.__version__, m.group(1) if m else "?")


# ---------------------------------------------------------------- report

TORCH_NAME = {0: "DDP", 1: "FSDP2 reshard_after_forward=False (SHARD_GRAD_OP)",
              2: "FSDP2 reshard_after_forward=False (SHARD_GRAD_OP)",
              3: "FSDP2 reshard_after_forward=True (FULL_SHARD)"}


def check_work(row, steps):
    ok = row["steps"] == steps and row["loss_last"] < row["loss_first"]
    if not ok:
        print("WORK CHECK FAILED: %s" % json.dumps(row))
    return ok


SIDES = {"nbfork": "nbfork", "nbfork_np": "nbfork, no prefetch", "pytorch": "PyTorch"}


def run_side(side, exe, st, n, args, sizes):
    if side == "pytorch":
        return run_torch(st, n, args.steps, args.batch, sizes)
    return run_nbfork(exe, st, n, args.steps, args.batch, sizes, prefetch=side == "nbfork")


def main():
    ap = argparse.ArgumentParser(description="sharding: nbfork ZeRO/FSDP vs PyTorch FSDP2")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--nprocs", default="2,4")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--models", default="12,48", help="of " + ", ".join(MODELS))
    ap.add_argument("--sizes", help="one model of these layer sizes instead of --models")
    args = ap.parse_args()
    models = ([("custom", [int(s) for s in args.sizes.split(",")])] if args.sizes else
              [(k, MODELS[k]) for k in args.models.split(",")])
    nprocs = [int(n) for n in args.nprocs.split(",")]
    stages = [int(s) for s in args.stages.split(",")]
    exe = nbf_cbench.build(args.build, "sharding")
    runs = {}  # (model, side, stage, nproc) -> [row per round]
    load = [os.getloadavg()[0]]
    ok = True
    for r in range(args.rounds):
        for name, sizes in models:
            for n in nprocs:
                for st in stages:
                    for side in ("nbfork", "nbfork_np", "pytorch"):
                        if side == "nbfork_np" and st != 3:
                            continue
                        print("round %d/%d: model %s, %s stage %d, %d processes..." %
                              (r + 1, args.rounds, name, SIDES[side], st, n), flush=True)
                        row = run_side(side, exe, st, n, args, sizes)
                        ok &= check_work(row, args.steps)
                        runs.setdefault((name, side, st, n), []).append(row)
        load.append(os.getloadavg()[0])
    print()
    print("load average (1 min) %s on %d CPUs; %d rounds interleaved" %
          (" ".join("%.1f" % x for x in load), os.cpu_count(), args.rounds))
    print("nbfork: %s, one thread per process; PyTorch: %s, torch.set_num_threads(1); "
          "Gloo (torch) and shared memory (nbfork, one node)" %
          (nbf_cbench.blas_of_libnbfork(args.build), torch_blas()))
    print("samples/s: median over rounds (all ranks' samples); MB = 1e6 bytes, largest rank")
    for name, sizes in models:
        report(runs, name, sizes, nprocs, stages, args)
    return 0 if ok else 1


def mb(x):
    return "%.0f" % (x / 1e6)


def report(runs, name, sizes, nprocs, stages, args):
    P = params(sizes)
    unit = max(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
    print()
    print("MLP %s (%s): %.1f M parameters, largest unit (layer) %.1f M = %.1f%% of the model; "
          "AdamW, batch %d per rank, %d timed steps (+1 warm-up)" %
          (name, compact(sizes), P / 1e6, unit / 1e6, 100.0 * unit / P, args.batch, args.steps))
    print()
    hdr = ("| N | stage | nbfork samples/s | PyTorch samples/s | ratio | nbfork state peak / after "
           "step MB | PyTorch state MB | nbfork RSS MB | PyTorch RSS MB | PyTorch side |")
    print(hdr)
    print("|---" * (hdr.count("|") - 1) + "|")
    goals = []
    for n in nprocs:
        ddp_state = None
        for st in stages:
            b = runs.get((name, "pytorch", st, n), [])
            for side in ("nbfork", "nbfork_np"):
                a = runs.get((name, side, st, n), [])
                if not a or not b:
                    continue
                label = "%d%s" % (st, " (no prefetch)" if side == "nbfork_np" else "")
                sa = statistics.median(x["samples_per_s"] for x in a)
                sb = statistics.median(x["samples_per_s"] for x in b)
                peak = max(x["state_peak_bytes"] for x in a)
                after = max(x["state_after_step_bytes"] for x in a)
                if st == 0:
                    ddp_state = after
                print("| %d | %s | %.1f | %.1f | %.2fx | %s / %s | %s | %s | %s | %s |" %
                      (n, label, sa, sb, sa / sb, mb(peak), mb(after),
                       mb(max(x["state_after_step_bytes"] for x in b)),
                       mb(max(x["maxrss_bytes"] for x in a)),
                       mb(max(x["maxrss_bytes"] for x in b)), TORCH_NAME[st]))
                goals.append("N=%d stage %s: throughput %.2fx PyTorch's (goal >= 1.5x): %s" %
                             (n, label, sa / sb, "met" if sa / sb >= 1.5 else "NOT met"))
                if st == 3 and ddp_state:
                    lim = ddp_state / n * 1.10
                    goals.append("N=%d stage %s: state after a step %s MB, peak %s MB (+%.1f%%); "
                                 "DDP's / N + 10%% = %s MB: %s after a step, %s at peak" %
                                 (n, label, mb(after), mb(peak),
                                  100.0 * (peak * n / ddp_state - 1), mb(lim),
                                  "met" if after <= lim else "NOT met",
                                  "met" if peak <= lim else "NOT met"))
    print()
    for g in goals:
        print(g)
    for k in sorted(k for k in runs if k[0] == name and k[1] == "nbfork" and k[2] == 3):
        print("nbfork stage 3, N=%d: %s" % (k[3], runs[k][-1]["describe"]))


def compact(sizes):
    """2048x13-1000 for 2048,2048,...,1000."""
    out, i = [], 0
    while i < len(sizes):
        j = i
        while j < len(sizes) and sizes[j] == sizes[i]:
            j += 1
        out.append("%dx%d" % (sizes[i], j - i) if j - i > 1 else str(sizes[i]))
        i = j
    return "-".join(out)


if __name__ == "__main__":
    sys.exit(main())
