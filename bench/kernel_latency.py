#!/usr/bin/python3
"""bench/kernel_latency: request latency of nbfork vs ipykernel, side by
side in one run, measured with the same jupyter_client code.

For each kernel (ipykernel: Debian python3-ipykernel, kernel name
`python3`; nbfork: the build tree's nbfork-kernel through a private
kernelspec) it measures, after a warm-up:

  kernel_info   kernel_info_request -> kernel_info_reply on shell
  new cell      execute_request -> execute_reply AND status idle on iopub,
                a cell never run before: `int x = <i>;` (nbfork: a new
                constant, so each one is compiled anew) / `x = <i>`
  re-run        the same, re-running one identical cell: `int x = 1;` /
                `x = 1` (nbfork: served by the compile cache)

and prints median and p95 in milliseconds with the ratio nbfork/ipykernel,
then the project's goals (issue 3): kernel_info median no slower than
ipykernel's, a new trivial C cell under 60 ms median, a re-run under 5 ms.
The goals are reported, not asserted: this is a benchmark, not a test.

Usage: bench/kernel_latency.py [-n N] [--build-dir DIR]
       (build first: scripts/build.sh)
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
import nbf_harness as h  # noqa: E402  (the one test harness: kernels, replies, ports)


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


def measure(client, new_cell, rerun_cell, n, warmup):
    """Dict of metric -> list of milliseconds."""
    out = {"kernel_info": [], "new cell": [], "re-run": []}
    for _ in range(warmup):
        client.kernel_info()
    for i in range(warmup):
        client.execute(new_cell(10**6 + i))
    client.execute(rerun_cell)
    for _ in range(n):
        out["kernel_info"].append(client.kernel_info() * 1e3)
    for i in range(n):
        out["new cell"].append(client.execute(new_cell(i + 2)) * 1e3)
    for _ in range(n):
        out["re-run"].append(client.execute(rerun_cell) * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=40, help="requests per metric (default 40)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up requests (default 5)")
    ap.add_argument("--build-dir", default=os.environ.get("NBFORK_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    args = ap.parse_args()

    # debugpy, loaded by ipykernel, would warn about frozen modules
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    ks_dir = nbfork_kernelspec(os.path.abspath(args.build_dir))
    os.environ["JUPYTER_PATH"] = ks_dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    results = {}
    try:
        for name, kernel, new_cell, rerun in [
                ("ipykernel", "python3", lambda i: "x = %d" % i, "x = 1"),
                ("nbfork", "nbfork-bench", lambda i: "int x = %d;" % i, "int x = 1;")]:
            c = Client(kernel)
            try:
                results[name] = measure(c, new_cell, rerun, args.n, args.warmup)
            finally:
                c.close()
    finally:
        shutil.rmtree(ks_dir, ignore_errors=True)

    print("kernel latency, %d requests per metric, milliseconds (%d cores)"
          % (args.n, os.cpu_count() or 0))
    print("%-12s | %17s | %17s | %13s" % ("", "ipykernel", "nbfork", "nbfork/ipyk."))
    print("%-12s | %8s %8s | %8s %8s | %6s %6s" % ("metric", "median", "p95", "median", "p95",
                                                   "median", "p95"))
    stats = {}
    for metric in ("kernel_info", "new cell", "re-run"):
        row = []
        for name in ("ipykernel", "nbfork"):
            v = results[name][metric]
            row += [statistics.median(v), percentile(v, 95)]
        stats[metric] = row
        print("%-12s | %8.2f %8.2f | %8.2f %8.2f | %6.2f %6.2f"
              % (metric, row[0], row[1], row[2], row[3], row[2] / row[0], row[3] / row[1]))
    print()
    goals = [
        ("kernel_info median no slower than ipykernel's", stats["kernel_info"][2],
         stats["kernel_info"][0]),
        ("new trivial C cell median under 60 ms", stats["new cell"][2], 60.0),
        ("re-run of an unchanged cell median under 5 ms", stats["re-run"][2], 5.0),
    ]
    for text, value, limit in goals:
        print("goal: %-48s %7.2f ms vs %6.2f ms  %s"
              % (text, value, limit, "met" if value <= limit else "NOT met"))


if __name__ == "__main__":
    main()
