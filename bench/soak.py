#!/usr/bin/python3
"""bench/soak: the full-size chaos and soak runs of tests/e2e/test_chaos.py
(the same trial functions), with the figures for README's "Faults
survived" table.

- kill -9 of a rank at a random step of an all-reduce loop: --kill-trials
  trials on --world ranks, the victims cycling through every rank
  position (20 on 4 ranks: each position 5 times);
- SIGSTOP of a rank with NBFORK_TIMEOUT_S=5 (--stop-trials);
- kill -9 of the executor during a launch (--exec-trials): time until
  every worker is dead, then the next launch must work;
- two nodes in network namespaces, the veth deleted at a random step
  (--cut-trials; skipped without root/iproute2), NBFORK_TIMEOUT_S=8;
- --launches consecutive launches (a tenth failing on purpose): the
  kernel's and executor's descriptors, threads and RSS after a warm-up
  and at the end, zombies.

For each fault: trials, trials whose error named the cause as required,
time from the fault to the error (median / max), what was left behind.
A trial that does not meet the requirement is listed with its error.

Usage: bench/soak.py [--build build] [--kill-trials 20] [--world 4]
       [--stop-trials 5] [--exec-trials 5] [--cut-trials 5] [--launches 1000]
"""
import argparse
import os
import random
import signal
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))


def fmt(ts):
    return "%.2f s / %.2f s" % (statistics.median(ts), max(ts)) if ts else "-"


def row(fault, n, named, ts, left, rows):
    rows.append("| %s | %d | %d/%d | %s | %s |" % (fault, n, named, n, fmt(ts),
                                                  "nothing" if not left else left))


def run_signal_trials(c, rows, ck, trials, world, sig, effect, label):
    """`trials` fault trials on kernel `ck`: each signals one rank (every
    position in turn) with `sig`; a trial counts as named when the only
    error leads with that rank and says `effect`. Adds the table row and
    returns the trials that missed it."""
    ts, named, left, bad = [], 0, [], []
    try:
        for i in range(trials):
            victim = i % world
            t = ck.fault_trial(world, victim, sig)
            ts.append(t["elapsed"])
            e = t["errors"]
            ok = len(e) == 1 and c.leads_with(e[0], victim, t["pids"][victim], effect)
            named += ok
            if not ok:
                bad.append((victim, [x["evalue"] for x in e]))
            left += t["left"]
    finally:
        ck.close()
    row(label, trials, named, ts, left, rows)
    return bad


def run_kills(c, args, rows):
    return run_signal_trials(c, rows, c.ChaosKernel(), args.kill_trials, args.world,
                             signal.SIGKILL, "was killed by signal 9 (SIGKILL",
                             "kill -9 of a rank mid all-reduce (%d ranks, each position)"
                             % args.world)


def run_stops(c, args, rows):
    ck = c.ChaosKernel(env={"NBFORK_TIMEOUT_S": str(c.STOP_TIMEOUT_S)})
    return run_signal_trials(c, rows, ck, args.stop_trials, 3, signal.SIGSTOP,
                             "was stopped by signal 19",
                             "SIGSTOP of a rank, NBFORK_TIMEOUT_S=%d (3 ranks)"
                             % c.STOP_TIMEOUT_S)


def run_exec_kills(c, args, rows):
    import nbf_harness as h
    c.become_subreaper()
    ck = c.ChaosKernel()
    ts, named, left, bad = [], 0, [], []
    try:
        for _ in range(args.exec_trials):
            t = c.executor_kill_trial(ck)
            ts.append(t["workers_dead_s"])
            ck.define()
            reply, out = ck.k.execute("%%launch chaos_loop(1, 5) num_processes=2 use_port=%d" %
                                      h.free_port())
            ok = (len(t["errors"]) == 1 and "executor" in t["errors"][0]["evalue"] and
                  reply["status"] == "ok" and t["new"] not in (None, t["old"]))
            named += ok
            if not ok:
                bad.append((t["errors"], h.errors(out)))
            left += t["left"] + c.zombies([ck.kernel_pid, t["new"] or -1])
    finally:
        ck.close()
        c.reap_orphans()
    row("kill -9 of the executor during a launch (3 ranks; time: workers dead)",
        args.exec_trials, named, ts, left, rows)
    return bad


def run_cuts(c, args, rows):
    import test_netns
    if not test_netns.can_make_namespaces():
        rows.append("| veth deleted between two namespaces | skipped: needs root and iproute2 |")
        return []
    ts, named, left, bad = [], 0, [], []
    for _ in range(args.cut_trials):
        case = c.CutLink("test_veth_deleted_mid_training")
        case.setUp()
        try:
            elapsed, outs = c.cut_trial(case, "delete")
            ok = True
            for node, (rc, out, err) in enumerate(outs):
                ts.append(elapsed[node])
                node_ok = rc == 1 and "[%s]" % case.addr[1 - node] in err
                ok = ok and node_ok
                if not node_ok:
                    bad.append((node, err.strip().splitlines()[-4:]))
            named += ok
            for ns in case.ns:
                left += test_netns.ip("netns", "pids", ns).stdout.split()
        finally:
            case.doCleanups()
    row("veth deleted mid-training, 2 nodes x 2 ranks, NBFORK_TIMEOUT_S=%d (time per node)" %
        test_netns.TIMEOUT_S, args.cut_trials, named, ts, left, rows)
    return bad


def run_soak(c, args):
    ck = c.ChaosKernel()
    try:
        r = c.soak(ck, args.launches)
    finally:
        ck.close()
    names = ("descriptors", "threads", "RSS KiB")
    lines = ["%d consecutive launches (2 ranks, every 10th failing on purpose) in %.1f s "
             "(%.1f ms each): zombies %d, workers left %d, unexpected results %d" %
             (r["launches"], r["seconds"], 1e3 * r["seconds"] / r["launches"], r["zombies"],
              r["left"], len(r["wrong"]))]
    for who, i in (("kernel", 0), ("executor", 1)):
        lines.append("  %-8s " % who + ", ".join(
            "%s %d -> %d" % (n, b, a) for n, b, a in zip(names, r["before"][i], r["after"][i])))
    return lines, r["wrong"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--kill-trials", type=int, default=20)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--stop-trials", type=int, default=5)
    ap.add_argument("--exec-trials", type=int, default=5)
    ap.add_argument("--cut-trials", type=int, default=5)
    ap.add_argument("--launches", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    random.seed(args.seed)
    os.environ["NBFORK_BUILD_DIR"] = os.path.abspath(args.build)
    if not os.access(os.path.join(args.build, "bin", "nbfork-kernel"), os.X_OK):
        sys.exit("bench/soak: %s/bin/nbfork-kernel not found; build first" % args.build)
    import test_chaos as c  # its kernels use the build's kernel through a private kernelspec
    rows, bad = [], []
    for trials, run in ((args.kill_trials, run_kills), (args.stop_trials, run_stops),
                        (args.exec_trials, run_exec_kills), (args.cut_trials, run_cuts)):
        if trials > 0:
            bad += [(run.__name__,) + tuple(b) for b in run(c, args, rows)]
    soak_lines, wrong = run_soak(c, args) if args.launches > 0 else ([], [])
    print("| fault | trials | cause named | fault to error (median / max) | left behind |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(soak_lines))
    for b in bad + [("soak",) + tuple(w) for w in wrong]:
        print("not as required:", b)
    return 1 if bad or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
