#!/usr/bin/python3
"""bench/bad_launch: what a hostile `%launch` cell costs (issue 14, items 3
and 5): for each bad input, the time from execute_request to the reply
(median and max over N trials) and what is left afterwards (processes under
the kernel besides its executor: must be 0), through the real kernel.

Inputs: an argument of the wrong type, too few arguments, code after the
%launch line, a repeated option, a function returning double, and (a
success) two workers reading stdin, which must get EOF with no
input_request.

Usage: bench/bad_launch.py [--trials N]   (build first; NBFORK_BUILD_DIR
or ./build)
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

DEFS = r"""
#include <stdio.h>
#include <stdlib.h>
void g(const char *s, int n) { printf("%s %d\n", s, n); }
double half(void) { return 1.5; }
int reader(void) { char b[8]; return fgets(b, sizeof b, stdin) != NULL; }
"""

CASES = [
    ('type mismatch g(42, "no")', '%launch g(42, "no") num_processes=2'),
    ("too few arguments", '%launch g("a") num_processes=2'),
    ("code after %launch", '%launch g("a", 1) num_processes=2\nprintf("x");'),
    ("repeated option", '%launch g("a", 1) num_processes=2 num_processes=4'),
    ("double return", "%launch half() num_processes=2"),
    ("workers read stdin (EOF)", "%launch reader() num_processes=2"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    import psutil
    import nbf_harness as h
    k = h.Kernel()
    try:
        kpid = k.km.provisioner.process.pid
        reply, out = k.execute(DEFS)
        assert reply["status"] == "ok", h.errors(out)
        print("| input | trials | reply | median ms | max ms | left behind |")
        print("|---|---|---|---|---|---|")
        for name, cell in CASES:
            ts, left, reqs = [], 0, 0
            for _ in range(args.trials):
                t0 = time.monotonic()
                reply, _, stdin_reqs, _ = k.run(cell, timeout=120, allow_stdin=True)
                ts.append(time.monotonic() - t0)
                reqs += len(stdin_reqs)
                left = max(left, len(psutil.Process(kpid).children(recursive=True)) - 1)
            what = reply["status"] if reply["status"] == "ok" else reply["ename"]
            print("| %s | %d | %s%s | %.0f | %.0f | %d processes |" % (
                name, args.trials, what, ", %d input_request" % reqs if reqs else "",
                1e3 * statistics.median(ts), 1e3 * max(ts), left))
    finally:
        k.close()


if __name__ == "__main__":
    main()
