#!/usr/bin/python3
"""bench/complete_latency: completion and inspect round trips on a notebook
of 50 cells (issue 13, item 3: below 50 ms).

Three kernels, side by side in one run with the same jupyter_client code
(tests/e2e/nbf_harness.py): nbfork with libclang (the build tree's
nbfork-kernel, semantic answers, ex_clang.h), nbfork with NBFORK_LIBCLANG=0
(the lexical fallback) and ipykernel (7, from .venv: Jedi, the
anchor). Each first runs the same notebook of --cells cells (a struct /
class, a function and a global per cell, with a doc comment), then times:

  member       complete_request after `g_rec_<last>.` (Python: `g_rec_<last>.`)
               -> complete_reply: the members of the last cell's type
  name         complete_request after `make_rec_4` -> the functions of 10 cells
  inspect      inspect_request on `make_rec_<last>(` -> its declaration
  after a cell complete `g_rec_<last>.` right after running a new cell (nbfork
               with libclang re-parses the context header then: the first
               completion after a cell is its worst case)

and prints the median and p95 in milliseconds and the ratios nbfork/ipykernel.
The goal (below 50 ms) is reported, not asserted: a benchmark, not a test.

Usage: bench/complete_latency.py [--cells 50] [--sample 30] [--build-dir DIR]
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
from cell_scaling import run  # noqa: E402  (one cell, its reply and idle)


def c_cell(i):
    return ("/* Record of kind %d. */\nstruct rec_%d { int id; double value_%d; float w[4]; };\n"
            "/* Makes a record of kind %d. */\n"
            "struct rec_%d make_rec_%d(int id) { struct rec_%d r = {id, id * 0.5, {0}}; "
            "return r; }\nstruct rec_%d g_rec_%d;" % (i, i, i, i, i, i, i, i, i))


def py_cell(i):
    return ("class Rec%d:\n    \"\"\"Record of kind %d.\"\"\"\n    def __init__(self):\n"
            "        self.id = 0\n        self.value_%d = 0.0\n        self.w = [0.0] * 4\n\n"
            "def make_rec_%d(id):\n    \"\"\"Makes a record of kind %d.\"\"\"\n"
            "    return Rec%d()\n\ng_rec_%d = make_rec_%d(0)" % (i, i, i, i, i, i, i, i))


def timed(kc, send, check):
    """Milliseconds from a request to its reply; check(content) must hold."""
    t0 = time.perf_counter()
    reply = h.shell_reply(kc, send(), 60)["content"]
    dt = (time.perf_counter() - t0) * 1e3
    if not check(reply):
        raise RuntimeError("unexpected reply: %r" % (reply,))
    return dt


def measure(kernel_name, env, cell, cells, sample, semantic):
    km, kc = h.start_kernel(kernel_name, env=env, stderr=subprocess.DEVNULL)
    h.drain_iopub(kc)
    last = cells - 1
    out = {}
    try:
        for i in range(cells):
            run(kc, cell(i))
        member = "g_rec_%d." % last
        reqs = {
            "member": (lambda: kc.complete(member, len(member)),
                       # the lexical fallback offers every name after `.`
                       lambda r: r["status"] == "ok" and (not semantic or sorted(
                           r["matches"]) == ["id", "value_%d" % last, "w"])),
            "name": (lambda: kc.complete("make_rec_4", 10),
                     lambda r: "make_rec_4" in r["matches"]),
            "inspect": (lambda: kc.inspect("make_rec_%d(" % last, 11),
                        lambda r: r["found"]),
        }
        for name, (send, check) in reqs.items():
            timed(kc, send, check)  # warm-up
            out[name] = [timed(kc, send, check) for _ in range(sample)]
        after = []
        for j in range(max(3, sample // 3)):
            run(kc, cell(cells + j))
            after.append(timed(kc, *reqs["member"]))
        out["after a cell"] = after
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    return out


def p95(v):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(0.95 * len(v) + 0.5)) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=50)
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--build-dir", default=os.environ.get("NBFORK_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    args = ap.parse_args()
    ks_dir = h.install_bench_kernelspec(args.build_dir, "bench/complete_latency")
    kernels = [("nbfork libclang", "nbfork-bench", {"NBFORK_LIBCLANG": "1"}, c_cell),
               ("nbfork lexical", "nbfork-bench", {"NBFORK_LIBCLANG": "0"}, c_cell),
               ("ipykernel", "python3", {}, py_cell)]
    results = {}
    try:
        for label, kname, env, cell in kernels:
            print("  %s: %d cells ..." % (label, args.cells), flush=True)
            results[label] = measure(kname, env, cell, args.cells, args.sample,
                                     label != "nbfork lexical")
    finally:
        shutil.rmtree(ks_dir, ignore_errors=True)

    print("\ncomplete/inspect round trip after a notebook of %d cells, ms (median / p95; "
          "%d cores)" % (args.cells, os.cpu_count() or 0))
    print("%-13s | %17s | %17s | %17s | %s" % ("request", "nbfork libclang", "nbfork lexical",
                                               "ipykernel (Jedi)", "libclang/ipykernel"))
    worst = 0.0
    for req in ["member", "name", "inspect", "after a cell"]:
        row = []
        for label, _, _, _ in kernels:
            v = results[label][req]
            row.append("%7.2f / %7.2f" % (statistics.median(v), p95(v)))
        lc = statistics.median(results["nbfork libclang"][req])
        worst = max(worst, lc)
        print("%-13s | %s | %s | %s | %6.2f" % (
            req, row[0], row[1], row[2], lc / statistics.median(results["ipykernel"][req])))
    print("\ngoal: nbfork (libclang) completion round trip below 50 ms on %d cells: worst "
          "median %.2f ms  %s" % (args.cells, worst, "met" if worst < 50 else "NOT met"))


if __name__ == "__main__":
    main()
