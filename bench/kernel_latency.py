#!/usr/bin/env python3
"""bench/kernel_latency: request latency of nbfork vs ipykernel, side by
side in one run, measured with the same jupyter_client code.

It runs in the project's virtual environment (.venv/, scripts/deps.sh;
started with another Python it re-executes itself there), so the anchor is
ipykernel 7 and the client jupyter_client 8, both from PyPI (pinned in
requirements.txt). For each kernel (ipykernel: kernel name `python3`, the
venv's own; xeus-python, kernel `xpython`, where installed; nbfork: the
build tree's nbfork-kernel through a private kernelspec) it measures,
after a warm-up:

  kernel_info   kernel_info_request -> kernel_info_reply on shell
  new cell      execute_request -> execute_reply AND status idle on iopub,
                a cell never run before: `int x = <i>;` (nbfork: a new
                constant, so each one is compiled anew) / `x = <i>`
  re-run        the same, re-running one identical cell: `int x = 1;` /
                `x = 1` (nbfork: served by the compile cache)

The kernels run at once and take turns request by request (ABAB...), so
the machine's load (printed before and after) weighs on each alike. It
prints median and p95 in milliseconds with the ratio nbfork/ipykernel,
then the project's goals (issue 15): kernel_info median at most 0.5x
ipykernel's, a re-run's execute round trip below ipykernel's, a new trivial
C cell under 30 ms median. The goals are reported, not asserted: this is a
benchmark, not a test.

Usage: bench/kernel_latency.py [-n N] [--build-dir DIR]
                                [--xeus-prefix DIR]
       (build first: scripts/build.sh; DIR: a xeus-python installed with
       pip install --prefix DIR xeus-python, when not in .venv)
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
import nbf_venv  # noqa: E402
nbf_venv.ensure()
import nbf_harness as h  # noqa: E402  (the one test harness: kernels, replies, ports)
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


class Client:
    """One started kernel and a blocking client; every measurement is a
    request sent and its answers awaited with the same code (the test
    harness, tests/e2e/nbf_harness.py) for both kernels."""

    def __init__(self, kernel_name, env=None):
        self.km, self.kc = h.start_kernel(kernel_name, env=env, stderr=subprocess.DEVNULL)
        h.drain_iopub(self.kc)

    def kernel_info(self):
        """Seconds from kernel_info_request to its reply."""
        t0 = time.perf_counter()
        msg_id = self.kc.kernel_info()
        h.shell_reply(self.kc, msg_id)
        dt = time.perf_counter() - t0
        h.collect(self.kc, msg_id)  # keep iopub drained
        return dt

    def execute(self, code):
        """Seconds from execute_request to (reply and idle) received."""
        t0 = time.perf_counter()
        msg_id = self.kc.execute(code, store_history=True)
        reply = h.shell_reply(self.kc, msg_id)
        h.collect(self.kc, msg_id)
        dt = time.perf_counter() - t0
        if reply["content"]["status"] != "ok":
            raise RuntimeError("cell %r failed: %s" % (code, reply["content"]))
        return dt

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


def nbfork_kernelspec(build_dir):
    kernel = os.path.join(build_dir, "bin", "nbfork-kernel")
    if not os.access(kernel, os.X_OK):
        sys.exit("bench/kernel_latency: %s not found; build first (scripts/build.sh)" % kernel)
    return h.make_kernelspec_dir(kernel, name="nbfork-bench", prefix="nbfork-bench-ks-")


def measure(clients, n, warmup):
    """{kernel: {metric: list of milliseconds}}. The kernels take turns
    request by request (A B A B ...), so a change in the machine's load
    falls on all of them alike."""
    out = {k: {"kernel_info": [], "new cell": [], "re-run": []} for k in clients}
    for name, (c, new_cell, rerun_cell) in clients.items():
        for i in range(warmup):
            c.kernel_info()
            c.execute(new_cell(10**6 + i))
        c.execute(rerun_cell)
    for i in range(n):
        for name, (c, _, _) in clients.items():
            out[name]["kernel_info"].append(c.kernel_info() * 1e3)
    for i in range(n):
        for name, (c, new_cell, _) in clients.items():
            out[name]["new cell"].append(c.execute(new_cell(i + 2)) * 1e3)
    for i in range(n):
        for name, (c, _, rerun_cell) in clients.items():
            out[name]["re-run"].append(c.execute(rerun_cell) * 1e3)
    return out


def load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=40, help="requests per metric (default 40)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up requests (default 5)")
    ap.add_argument("--build-dir", default=os.environ.get("NBFORK_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    ap.add_argument("--xeus-prefix", help="where `pip install --prefix DIR xeus-python` put it")
    args = ap.parse_args()

    # debugpy, loaded by ipykernel, would warn about frozen modules
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    ks_dir = nbfork_kernelspec(os.path.abspath(args.build_dir))
    extra = [os.path.join(args.xeus_prefix, "share", "jupyter")] if args.xeus_prefix else []
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [ks_dir] + extra + [os.environ.get("JUPYTER_PATH", "")])
    kernels = [("ipykernel", "python3", lambda i: "x = %d" % i, "x = 1"),
               ("xeus-python", "xpython", lambda i: "x = %d" % i, "x = 1"),
               ("nbfork", "nbfork-bench", lambda i: "int x = %d;" % i, "int x = 1;")]
    have = KernelSpecManager().find_kernel_specs()
    for name, kernel, *_ in kernels:
        if kernel not in have:
            print("%s: kernel %r not installed in %s, left out" % (name, kernel, sys.prefix))
    kernels = [k for k in kernels if k[1] in have]
    clients = {}
    print("before: %s" % load())
    try:
        for name, kernel, new_cell, rerun in kernels:
            clients[name] = (Client(kernel, env=kernel_env(name, args.xeus_prefix)), new_cell, rerun)
        results = measure(clients, args.n, args.warmup)
    finally:
        for c, _, _ in clients.values():
            c.close()
        shutil.rmtree(ks_dir, ignore_errors=True)
    print("after:  %s (%d cores)" % (load(), os.cpu_count() or 0))
    stats = report(results, args.n)
    print()
    ipyk, nbf = stats["ipykernel"], stats["nbfork"]
    goals = [
        ("kernel_info median at most 0.5x ipykernel's", nbf["kernel_info"],
         0.5 * ipyk["kernel_info"]),
        ("re-run execute median below ipykernel's", nbf["re-run"], ipyk["re-run"]),
        ("new trivial C cell median under 30 ms", nbf["new cell"], 30.0),
    ]
    for text, value, limit in goals:
        print("goal: %-46s %7.2f ms vs %6.2f ms  %s"
              % (text, value, limit, "met" if value < limit else "NOT met"))


def kernel_env(name, prefix):
    """xeus-python installed under a prefix of its own (--xeus-prefix DIR,
    `pip install --prefix DIR xeus-python`): its Python packages on the
    kernel's path. None for the others (the inherited environment)."""
    if name != "xeus-python" or not prefix:
        return None
    env = dict(os.environ)
    site = os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "")
    return env


def report(results, n):
    """Print median and p95 per kernel and metric, and each kernel's ratio
    to ipykernel; return {kernel: {metric: median}}."""
    names = list(results)
    print("kernel latency, %d requests per metric, milliseconds (%d cores), %s"
          % (n, os.cpu_count() or 0, " vs ".join(
              "%s %s" % (k, version_of(k)) for k in names)))
    print("%-12s" % "metric" + "".join(" | %-11s median    p95" % k for k in names) +
          "".join(" | %s/ipyk." % k for k in names if k != "ipykernel"))
    stats = {k: {} for k in names}
    for metric in ("kernel_info", "new cell", "re-run"):
        line = "%-12s" % metric
        for k in names:
            v = results[k][metric]
            stats[k][metric] = statistics.median(v)
            line += " | %11s %6.2f %6.2f" % ("", statistics.median(v), percentile(v, 95))
        for k in names:
            if k != "ipykernel":
                line += " | %*.2f" % (len(k) + 6, stats[k][metric] / stats["ipykernel"][metric])
        print(line)
    return stats


def version_of(kernel):
    """The anchor's version, as its package says."""
    from importlib import metadata
    pkg = {"ipykernel": "ipykernel", "xeus-python": "xeus-python"}.get(kernel)
    try:
        return metadata.version(pkg) if pkg else "(build tree)"
    except metadata.PackageNotFoundError:
        return "?"

if __name__ == "__main__":
    main()
