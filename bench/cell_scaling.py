#!/usr/bin/python3
"""bench/cell_scaling: does a new trivial cell stay fast in a long
notebook? (issue 13, item 5)

One kernel of each kind (nbfork: the build tree's nbfork-kernel;
ipykernel 7 from .venv, for reference) runs, side by side in
one run with the same jupyter_client code (tests/e2e/nbf_harness.py):

  1. a warm-up, then N_SAMPLE new trivial cells (`int x = <i>;` / `x = <i>`,
     each never run before): the time of a new cell at the start;
  2. filler cells up to 1,000 and then 3,000 cells in all (the --filler
     kind: `define`, `int x = <i>;` that supersedes the one before,
     `distinct`, `int v<i> = <i>;`, a new name each (issue 20, item 7), or
     `print`, `printf("%d\\n", <i>);`, whose string literal keeps its
     object loaded), and after each, N_SAMPLE new trivial cells again.

It prints the median new-cell time (ms) at each point, its ratio to the
start (the goal: within 1.5x after 3,000 cells) and, for nbfork, the CPU
time per new cell of the executor and its compiler (steadier than wall
time on a loaded machine), and the executor's memory maps (/proc/PID/maps lines; vm.max_map_count is 65530
by default). A benchmark, not a test: nothing is asserted.

Usage: bench/cell_scaling.py [--cells 3000] [--sample 20] [--filler define|print|distinct]
                             [--build-dir DIR]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import nbf_venv  # noqa: E402  (.venv's Python: PyPI's jupyter_client, ipykernel, torch)
nbf_venv.ensure()
import nbf_harness as h  # noqa: E402


def run(kc, code):
    """Seconds from execute_request to reply and idle."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=True)
    reply = h.shell_reply(kc, msg_id, 120)
    h.collect(kc, msg_id, 120)
    dt = time.perf_counter() - t0
    if reply["content"]["status"] != "ok":
        raise RuntimeError("cell %r failed: %s" % (code, reply["content"]))
    return dt


def executor_pid(kernel_pid):
    """Pid of the kernel's nbfork-executor child, or None."""
    try:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    stat = f.read()
                with open("/proc/%s/comm" % pid) as f:
                    comm = f.read().strip()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == kernel_pid and comm.startswith("nbfork-exec"):
                return int(pid)
    except OSError:
        pass
    return None


def executor_maps(pid):
    """Lines of /proc/PID/maps, or None."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return sum(1 for _ in f)
    except (OSError, TypeError):
        return None


def executor_cpu_s(pid):
    """CPU seconds of the executor and of the children it waited for (the
    compiler): utime + stime + cutime + cstime. Less sensitive than wall
    time to other load on a shared machine. None when unknown."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError):
        return None


def measure(kernel_name, new_cell, filler, points, sample, is_nbfork):
    km, kc = h.start_kernel(kernel_name, stderr=subprocess.DEVNULL)
    h.drain_iopub(kc)
    out = []
    fresh = 10**7
    try:
        for i in range(5):  # warm-up
            run(kc, new_cell(fresh))
            fresh += 1
        done = 0
        for point in points:
            for i in range(done, point):
                run(kc, filler(i))
            done = point
            times = []
            pid = executor_pid(km.provisioner.process.pid) if is_nbfork else None
            cpu0 = executor_cpu_s(pid)
            for _ in range(sample):
                times.append(run(kc, new_cell(fresh)) * 1e3)
                fresh += 1
            cpu1 = executor_cpu_s(pid)
            cpu = (cpu1 - cpu0) * 1e3 / sample if cpu0 is not None and cpu1 is not None else None
            maps = executor_maps(pid)
            out.append((point, statistics.median(times), maps, cpu))
            print("  %s: after %5d cells: %7.2f ms%s%s" % (
                kernel_name, point, out[-1][1], "" if maps is None else ", %d maps" % maps,
                "" if cpu is None else ", %.1f ms CPU per cell" % cpu), flush=True)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=3000)
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--filler", choices=["define", "print", "distinct"], default="define")
    ap.add_argument("--build-dir", default=os.environ.get("NBFORK_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    args = ap.parse_args()
    ks_dir = h.install_bench_kernelspec(args.build_dir, "bench/cell_scaling")
    points = sorted({0, min(1000, args.cells), args.cells})
    fillers = {
        "nbfork": {"define": lambda i: "int x = %d;" % i,
                   "distinct": lambda i: "int v%d = %d;" % (i, i),
                   "print": lambda i: '#include <stdio.h>\nprintf("%%d\\n", %d);' % i},
        "ipykernel": {"define": lambda i: "x = %d" % i, "print": lambda i: "print(%d)" % i,
                      "distinct": lambda i: "v%d = %d" % (i, i)},
    }
    results = {}
    try:
        for name, kname, new_cell in [("ipykernel", "python3", lambda i: "x = %d" % i),
                                      ("nbfork", "nbfork-bench", lambda i: "int x = %d;" % i)]:
            results[name] = measure(kname, new_cell, fillers[name][args.filler], points,
                                    args.sample, name == "nbfork")
    finally:
        shutil.rmtree(ks_dir, ignore_errors=True)

    print("\nnew trivial cell in a long notebook, median of %d, ms (filler: %s, %d cores)"
          % (args.sample, args.filler, os.cpu_count() or 0))
    print("%-12s | %9s %7s | %9s %7s %9s %7s %6s | %s" % (
        "cells before", "ipykernel", "x start", "nbfork", "x start", "CPU ms", "x start", "maps",
        "nbfork/ipyk."))
    ip0, nb0 = results["ipykernel"][0][1], results["nbfork"][0][1]
    cpu0 = results["nbfork"][0][3] or float("nan")
    for (p, ip, _, _), (_, nb, maps, cpu) in zip(results["ipykernel"], results["nbfork"]):
        cpu = cpu if cpu is not None else float("nan")
        print("%-12d | %9.2f %7.2f | %9.2f %7.2f %9.1f %7.2f %6s | %6.2f" % (
            p, ip, ip / ip0, nb, nb / nb0, cpu, cpu / cpu0, maps if maps is not None else "?",
            nb / ip))
    last = results["nbfork"][-1]
    print("\ngoal: nbfork new cell after %d cells within 1.5x of the start: wall %.2fx, "
          "CPU %.2fx  %s" % (last[0], last[1] / nb0, (last[3] or float("nan")) / cpu0,
                             "met" if last[1] / nb0 <= 1.5 else "NOT met (wall)"))


if __name__ == "__main__":
    main()
