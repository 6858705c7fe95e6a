#!/usr/bin/python3
"""bench/lifetime: the "nothing outlives its owner" faults of issue 14,
repeated, with what each left behind. Figures for README's "Faults
survived" table.

- kernel SIGKILL while a cell spins (`while (1) {}`): seconds until the
  executor is gone; work directories left (swept by the next kernel start);
- restart_kernel(now=True) while a cell spins: seconds until the old
  executor is gone;
- a launch of 2 workers that each leave `sleep 300 &` and a forked child:
  the launch's wall time, the processes it reports stopped, how many of them
  are still alive after it;
- executor crash (SIGSEGV in a cell) and kill during a busy cell (SIGINT
  ignored: killed after the 2 s grace): work directories left.

Each trial has its own TMPDIR. Usage: bench/lifetime.py [--trials N]
(build first; NBFORK_BUILD_DIR or ../build)."""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import nbf_harness as h  # noqa: E402
import test_lifetime as tl  # noqa: E402


class Bench(tl.LifetimeTests):
    def runTest(self):
        pass


def fresh():
    b = Bench()
    b.setUp()
    return b


def kernel_sigkill(trials):
    times, left = [], 0
    for _ in range(trials):
        b = fresh()
        try:
            k = b.kernel()
            ex = tl.executor_pid(k)
            b.start_spin(k)
            t0 = time.monotonic()
            os.kill(tl.kernel_pid(k), signal.SIGKILL)
            assert h.wait_until(lambda: tl.gone(ex), 30, interval=0.005)
            times.append(time.monotonic() - t0)
            k.km.shutdown_kernel(now=True)
            b.kernels.remove(k)
            left += len(tl.workdirs(b.tmp))
            b.kernel()  # the next start sweeps it
            assert len(tl.workdirs(b.tmp)) <= 1
        finally:
            b.tearDown()
    return times, "%d dirs until the next kernel start, 0 after" % left


def restart_now(trials):
    times = []
    b = fresh()
    try:
        k = b.kernel()
        for _ in range(trials):
            ex = tl.executor_pid(k)
            b.start_spin(k)
            t0 = time.monotonic()
            k.km.restart_kernel(now=True)
            assert h.wait_until(lambda: tl.gone(ex), 30, interval=0.005)
            times.append(time.monotonic() - t0)
            k.kc.wait_for_ready(timeout=60)
        h.wait_until(lambda: len(tl.workdirs(b.tmp)) == 1, 30)
        return times, "%d work dirs (the live executor's)" % len(tl.workdirs(b.tmp))
    finally:
        b.tearDown()


def leftovers(trials):
    times, stopped, alive = [], [], 0
    b = fresh()
    try:
        k = b.kernel()
        for i in range(trials):
            d = tempfile.mkdtemp(dir=b.tmp, prefix="pids-")
            b.ok(k, tl.LifetimeTests.LEAVER.replace("leave_behind", "leave%d" % i) % d)
            t0 = time.monotonic()
            reply, out = k.execute_with_port(
                "%%launch leave" + str(i) + "() num_processes=2 use_port=%d")
            times.append(time.monotonic() - t0)
            text = h.stream_text(out)
            stopped.append(int(text.split("nbfork: stopped ")[1].split()[0]))
            alive += sum(not tl.gone(p) for p in b.leftover_pids(d, 2))
        return times, "stopped %s per launch; %d alive after" % (sorted(set(stopped)), alive)
    finally:
        b.tearDown()


def crash_and_kill(trials):
    b = fresh()
    try:
        k = b.kernel()
        for _ in range(trials):
            ex = tl.executor_pid(k)
            k.execute("*(volatile int *)0 = 1;")
            h.wait_until(lambda: tl.executor_pid(k) != ex, 30)
            ex = tl.executor_pid(k)
            k.run('#include <signal.h>\n#include <stdio.h>\nsignal(SIGINT, SIG_IGN);\n'
                  'printf("deaf\\n"); fflush(stdout);\nwhile (1) {}\n',
                  interrupt_when=lambda o: "deaf" in h.stream_text(o))
        h.wait_until(lambda: len(tl.workdirs(b.tmp)) == 1, 30)
        return [], "%d crashes + %d kills: %d work dirs (the live executor's)" % (
            trials, trials, len(tl.workdirs(b.tmp)))
    finally:
        b.tearDown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    a = ap.parse_args()
    for name, fn in [("kernel SIGKILL while busy", kernel_sigkill),
                     ("restart_kernel(now=True) while busy", restart_now),
                     ("worker-started processes (2 workers x 2)", leftovers),
                     ("executor crash / kill during busy cell", crash_and_kill)]:
        times, left = fn(a.trials)
        stat = ("median %.3f s, max %.3f s" % (statistics.median(times), max(times))
                if times else "")
        print("%-42s trials %-3d %-28s %s" % (name, a.trials, stat, left), flush=True)


if __name__ == "__main__":
    unittest.TestCase.maxDiff = None
    main()
