#!/usr/bin/env python3
"""bench/gpu_train: Fashion-MNIST training on the GPU, nbfork vs PyTorch DDP
started by Accelerate's notebook_launcher, side by side in one run.

Both sides: the same data (Fashion-MNIST, the notebook's 80/20 split of the
60000 training images, pixels / 255 kept in host memory, each batch copied
to the device), model (MLP 784-256-10, nn.Linear initialization), optimizer
(SGD lr 0.1 with cosine decay to 0, momentum 0.9), batch 64 per process,
--epochs epochs, --mixed-precision, --num-processes (default: every GPU).

- nbfork: the cells of notebooks/fashion_mnist.ipynb run in nbfork's
  executor (scripts/exec_notebook.py: no Jupyter needed) from a build with
  CUDA (--build-dir); the bench's copy of the training cell prints the wall
  clock after the first optimizer step (the notebook file is unchanged).
- PyTorch: accelerate.notebook_launcher(training_function, num_processes=N)
  in a fresh Python process; Accelerator(mixed_precision=...) prepares
  model and optimizer (DDP), torch.cuda.synchronize() before the clock is
  read after the first step.

Figures: time from the launch call to the end of the first step (s);
images per second from the first step to the end of the last epoch
(evaluation included on both sides); the last epoch's accuracy (%); and the
ratios nbfork / PyTorch. Goals (issue 10): images/s ratio >= 1.5, launch
ratio <= 0.25. The figures need a GPU: without one the script says so and
exits 77, measuring nothing.

Usage: bench/gpu_train.py [--epochs N] [--mixed-precision no|fp16|bf16]
                          [--num-processes N] [--build-dir DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
FIRST = re.compile(r"FIRST_STEP (\d+\.\d+)")
EPOCH = re.compile(r"epoch (\d+): (\d+\.\d+)")


def gpu_count():
    """GPUs nvidia-smi sees (0 without a driver); never initializes CUDA."""
    if not shutil.which("nvidia-smi"):
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for l in r.stdout.splitlines() if l.startswith("GPU")) if r.returncode == 0 else 0


# ---------------------------------------------------------------- PyTorch side

def torch_training(mixed_precision, epochs, t_launch):
    import math
    import gzip
    import struct
    import torch
    import torch.nn as nn
    from accelerate import Accelerator

    def idx(path):
        data = gzip.open(path, "rb").read()
        nd = struct.unpack(">I", data[:4])[0] & 0xFF
        return data[4 + 4 * nd:]

    acc = Accelerator(mixed_precision=mixed_precision)
    x = torch.frombuffer(bytearray(idx(DATA + "/train-images-idx3-ubyte.gz")), dtype=torch.uint8)
    x = x.float().div_(255).view(-1, 784).pin_memory()
    y = torch.frombuffer(bytearray(idx(DATA + "/train-labels-idx1-ubyte.gz")), dtype=torch.uint8).long()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    n_train = len(y) * 8 // 10
    train_idx, eval_idx = perm[:n_train], perm[n_train:]
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = acc.prepare(model, opt)
    loss_fn = nn.CrossEntropyLoss()
    world, rank = acc.num_processes, acc.process_index
    from torch.utils.data import DistributedSampler
    train_s = DistributedSampler(range(n_train), num_replicas=world, rank=rank, shuffle=True, seed=42)
    eval_s = DistributedSampler(range(len(eval_idx)), num_replicas=world, rank=rank, shuffle=False)
    steps = epochs * ((len(train_s) + 63) // 64)
    step = 0
    for epoch in range(epochs):
        train_s.set_epoch(epoch)
        order = train_idx[torch.tensor(list(iter(train_s)))]
        model.train()
        for b in range(0, len(order), 64):
            i = order[b:b + 64]
            xb = x[i].to(acc.device, non_blocking=True)
            yb = y[i].to(acc.device, non_blocking=True)
            for g in opt.param_groups:
                g["lr"] = 0.1 * 0.5 * (1 + math.cos(math.pi * step / steps))
            opt.zero_grad()
            acc.backward(loss_fn(model(xb), yb))
            opt.step()
            step += 1
            if step == 1 and acc.is_main_process:
                torch.cuda.synchronize()
                print("FIRST_STEP %.6f" % time.time(), flush=True)
        model.eval()
        e_order = eval_idx[torch.tensor(list(iter(eval_s)))]
        correct = torch.zeros(1, device=acc.device)
        with torch.no_grad():
            for b in range(0, len(e_order), 64):
                i = e_order[b:b + 64]
                correct += (model(x[i].to(acc.device)).argmax(1) == y[i].to(acc.device)).sum()
        correct = acc.reduce(correct, "sum")
        acc.print("epoch %d: %.2f" % (epoch, 100.0 * correct.item() / (len(e_order) * world)))


def torch_side(a):
    from accelerate import notebook_launcher
    t0 = time.time()
    print("LAUNCH %.6f" % t0, flush=True)
    notebook_launcher(torch_training, (a.mixed_precision, a.epochs, t0), num_processes=a.num_processes)
    print("END %.6f" % time.time(), flush=True)


# ---------------------------------------------------------------- nbfork side

def nbfork_side(a):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import exec_notebook as ex
    nb = json.load(open(os.path.join(ROOT, "notebooks", "fashion_mnist.ipynb")))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    stamp = ('            step++;\n            if (step == 1 && acc_is_main_process(acc)) {\n'
             '                struct timespec ts_; clock_gettime(CLOCK_REALTIME, &ts_);\n'
             '                printf("FIRST_STEP %.6f\\n", ts_.tv_sec + ts_.tv_nsec * 1e-9); fflush(stdout);\n'
             '            }\n')
    cells = [c.replace("            step++;\n", stamp).replace("#include <math.h>", "#include <math.h>\n#include <time.h>")
             for c in cells]
    assert any("FIRST_STEP" in c for c in cells), "the notebook's training loop changed: update the bench"
    os.environ["FMNIST_EPOCHS"] = str(a.epochs)
    proc, pipes = ex.start_executor(os.path.join(a.build_dir, "bin", "nbfork-executor"))
    try:
        for n, c in enumerate(cells[:-1], 1):
            reply, _ = ex.run_cell(proc, pipes, c, n, 600)
            assert reply["status"] == "ok", reply
        launch = '%%launch training_loop("%s", 42, 64) num_processes=%d' % (a.mixed_precision, a.num_processes)
        t0 = time.time()
        reply, outs = ex.run_cell(proc, pipes, launch, len(cells), 3600)
        t_end = time.time()
        assert reply["status"] == "ok", reply
    finally:
        os.close(pipes["requests"])
        proc.wait(timeout=10)
    text = "".join(o.get("text", "") for o in outs if o["output_type"] == "stream")
    return figures(text, t0, t_end, a.epochs)


def figures(text, t0, t_end, epochs):
    first = FIRST.search(text)
    accs = EPOCH.findall(text)
    if not first or not accs:
        raise RuntimeError("no FIRST_STEP / epoch lines in the output:\n" + text[-2000:])
    t1 = float(first.group(1))
    n_train = 48000
    return {"launch_s": t1 - t0, "images_per_s": n_train * epochs / (t_end - t1),
            "accuracy": float(accs[-1][1])}


def run_torch(a):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-side", "--epochs", str(a.epochs),
           "--mixed-precision", a.mixed_precision, "--num-processes", str(a.num_processes)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("the PyTorch side failed:\n" + (r.stdout + r.stderr)[-3000:])
    t0 = float(re.search(r"LAUNCH (\d+\.\d+)", r.stdout).group(1))
    t_end = float(re.search(r"END (\d+\.\d+)", r.stdout).group(1))
    return figures(r.stdout, t0, t_end, a.epochs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    ap.add_argument("--num-processes", type=int, default=0, help="default: every GPU")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-gpu"))
    ap.add_argument("--torch-side", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_side:
        return torch_side(a)
    ngpu = gpu_count()
    if ngpu == 0:
        print("bench/gpu_train.py: no NVIDIA GPU present (nvidia-smi sees none): nothing measured.")
        return 77
    a.num_processes = a.num_processes or ngpu
    if not os.access(os.path.join(a.build_dir, "bin", "nbfork-executor"), os.X_OK):
        print("bench/gpu_train.py: no nbfork build with CUDA in %s (scripts/gpu_check.sh makes one)" % a.build_dir)
        return 1
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.splitlines()[0]
    print("%s; %d process(es), mixed precision %s, %d epoch(s)" % (gpu, a.num_processes, a.mixed_precision, a.epochs))
    nbf = nbfork_side(a)
    try:
        import accelerate  # noqa: F401
        import torch  # noqa: F401
        ref = run_torch(a)
    except ImportError as e:
        print("PyTorch/Accelerate not installed (%s): nbfork's figures only" % e)
        ref = None
    print("%-28s %12s %12s %8s" % ("", "nbfork", "PyTorch", "ratio"))
    for key, label, fmt in (("images_per_s", "images/s", "%12.0f"), ("launch_s", "launch to first step (s)", "%12.3f"),
                            ("accuracy", "accuracy (%)", "%12.2f")):
        r = ref[key] if ref else float("nan")
        print("%-28s %s %s %8.2f" % (label, fmt % nbf[key], fmt % r, nbf[key] / r if ref else float("nan")))
    if ref:
        print("goals: images/s ratio >= 1.5: %s; launch ratio <= 0.25: %s" % (
            "met" if nbf["images_per_s"] / ref["images_per_s"] >= 1.5 else "NOT met",
            "met" if nbf["launch_s"] / ref["launch_s"] <= 0.25 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
