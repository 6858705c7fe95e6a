#!/usr/bin/env python3
"""Long notebooks with distinct names keep the executor's memory maps
bounded (issue 20, item 7): N distinct `int v<i> = <i>;` cells (default
2,000) through the executor, then a system-compiled cell and a TinyCC
cell that read the first and the last of them. Asserts the values and
that the executor's /proc/PID/maps grew by fewer than MAX_GROWTH lines
(a cell loaded as a shared object keeps ~3: 6,000 here; cells TinyCC
compiles into memory keep none). Prints the new-cell time at the start
and the end (not asserted: a shared machine's load decides it).

Usage: test_many_cells.py [--cells N] [--executor PATH]
Exit 0 when it holds, 1 when not, 77 without an executor or TinyCC."""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import exec_notebook  # noqa: E402

MAX_GROWTH = 100


def tinycc_made_one(workdir):
    """Whether some cell object in workdir is TinyCC's (no GCC .comment)."""
    for root, _, files in os.walk(workdir):
        for f in files:
            if f.endswith(".so"):
                with open(os.path.join(root, f), "rb") as fh:
                    if b"GCC: (" not in fh.read():
                        return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=2000)
    ap.add_argument("--executor", default=os.path.join(
        os.environ.get("NBFORK_BUILD_DIR", os.path.join(ROOT, "build")), "bin", "nbfork-executor"))
    a = ap.parse_args()
    if not os.access(a.executor, os.X_OK):
        print("SKIP: no executor at %s" % a.executor)
        return 77
    os.environ["NBFORK_WORKDIR"] = tempfile.mkdtemp(prefix="nbf-many-")
    os.environ.pop("NBFORK_JIT", None)
    try:
        return run(a)
    finally:  # two files a cell: nothing left behind
        shutil.rmtree(os.environ["NBFORK_WORKDIR"], ignore_errors=True)


def run(a):
    proc, pipes = exec_notebook.start_executor(a.executor)
    count = [0]

    def cell(code):
        count[0] += 1
        saved = sys.stdout
        sys.stdout = open(os.devnull, "w")
        t0 = time.perf_counter()
        try:
            reply, outs = exec_notebook.run_cell(proc, pipes, code, count[0], 120)
        finally:
            sys.stdout.close()
            sys.stdout = saved
        if reply.get("status") != "ok":
            raise RuntimeError("cell %r: %s %s" % (code, reply.get("ename"), reply.get("evalue")))
        text = "".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
        return (time.perf_counter() - t0) * 1e3, text

    def maps():
        with open("/proc/%d/maps" % proc.pid) as f:
            return sum(1 for _ in f)

    try:
        cell("#include <stdio.h>")
        first = [cell("int v%d = %d;" % (i, i))[0] for i in range(10)]
        if not tinycc_made_one(os.environ["NBFORK_WORKDIR"]):
            print("SKIP: no cell compiled by TinyCC (built without libtcc)")
            return 77
        m0 = maps()
        for i in range(10, a.cells - 10):
            cell("int v%d = %d;" % (i, i))
        last = [cell("int v%d = %d;" % (i, i))[0] for i in range(a.cells - 10, a.cells)]
        m1 = maps()
        cell("int first_and_last(void) { return v0 * 100000 + v%d; }" % (a.cells - 1))
        _, out = cell('printf("%%d %%d\\n", first_and_last(), v%d + v1);' % (a.cells - 2))
    finally:
        os.close(pipes["requests"])
        proc.wait(timeout=30)
    want = "%d %d\n" % (a.cells - 1, a.cells - 1)
    f, l = statistics.median(first), statistics.median(last)
    print("%d distinct cells: maps %d -> %d (+%d, bound %d); new cell %.1f ms at the start, "
          "%.1f ms at the end (%.2fx)" % (a.cells, m0, m1, m1 - m0, MAX_GROWTH, f, l, l / f))
    if out != want:
        print("FAIL: the cells read %r, expected %r" % (out, want))
        return 1
    if m1 - m0 >= MAX_GROWTH:
        print("FAIL: the maps grew by %d" % (m1 - m0))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
