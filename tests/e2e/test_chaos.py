"""Chaos and soak (e2e.chaos.*): faults injected into running launches,
through the real kernel (and `nbfork launch` for the network cut).

- kill -9 of each rank position at a random point of an all-reduce loop:
  the cell fails fast with WorkerFailed leading with the killed rank; no
  worker, zombie or process of a worker's group is left.
- SIGSTOP of a rank with NBFORK_TIMEOUT_S=5: a timeout error naming the
  stopped rank, not a hang; the stopped process is killed and reaped.
- kill -9 of the executor during a launch: its workers die within a
  second (PR_SET_PDEATHSIG), the kernel starts a fresh executor, the next
  launch works.
- two nodes in network namespaces, the veth deleted mid-training: both
  launchers fail within NBFORK_TIMEOUT_S naming the lost node.
- consecutive launches (a tenth of them failing on purpose): the kernel's
  and the executor's descriptors, threads and RSS stay flat, no zombies.

The kill point is an event (rank 0 reported K steps, K random), never a
delay. Time bounds only say "it ends"; they are generous for a loaded
2-core machine. bench/soak.py runs the full-size versions (20 kill trials,
1,000 launches) with the same functions and prints the figures.
"""
import ctypes
import os
import random
import re
import signal
import subprocess
import sys
import time
import unittest

import nbf_harness as h
import test_netns
from test_cli import NBFORK, PROG
from test_launcher import Cell, port_taken

CHAOS_DEFS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* Join the group, print this rank's pid, then all-reduce one float
 * `steps` times (0: for ever); rank 0 prints "step N" every `every` steps. */
int chaos_loop(long every, long steps) {
    acc_t *acc = acc_new(NULL);
    if (!acc) return 1;
    int rank = acc_rank(acc), world = acc_world_size(acc);
    printf("rank %d pid %d joined\n", rank, (int)getpid());
    fflush(stdout);
    for (long i = 1; steps == 0 || i <= steps; i++) {
        float x = 1;
        if (acc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM) != ACC_OK || x != world) {
            fprintf(stderr, "rank %d: all-reduce %ld failed: %s\n", rank, i, acc_last_error(acc));
            return 1;
        }
        if (rank == 0 && i % every == 0) { printf("step %ld\n", i); fflush(stdout); }
    }
    acc_destroy(&acc);
    return 0;
}
/* One short launch of the soak: all-reduce once; rank `bad` returns 3. */
int soak_one(int bad) {
    acc_t *acc = acc_new(NULL);
    if (!acc) return 1;
    float x = 1;
    int rc = acc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM) != ACC_OK || x != acc_world_size(acc);
    int rank = acc_rank(acc);
    acc_destroy(&acc);
    return rank == bad ? 3 : rc;
}
"""

EVERY = 100        # steps between rank 0's reports
END_BOUND = 60     # s: a failed launch ends within this (a bound against a hang)
STOP_TIMEOUT_S = 5  # NBFORK_TIMEOUT_S of the SIGSTOP trials


# ---- the process tree, from /proc ----

def children(pid):
    """Pids of pid's children (every thread's), [] when pid is gone."""
    out = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def stat_fields(pid):
    """(state letter, ppid, pgid) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2])


def dead(pid):
    st = stat_fields(pid)
    return st is None or st[0] in "ZX"


def in_groups(pgids):
    """Live or zombie processes whose process group is one of pgids (a
    worker's group holds what it started)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat_fields(int(d))
            if st and st[2] in pgids:
                found.append(int(d))
    return found


def figures(pid):
    """(open descriptors, threads, VmRSS in KiB) of pid."""
    with open("/proc/%d/status" % pid) as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    return len(os.listdir("/proc/%d/fd" % pid)), int(st["Threads"]), int(st["VmRSS"].split()[0])


def zombies(pids):
    return [c for p in pids for c in children(p) if (stat_fields(c) or "?")[0] == "Z"]


def become_subreaper():
    """Orphans of the kernel's tree (workers of a killed executor) become
    this process's children, so the test can see them die and reap them
    (this machine's PID 1 may not reap)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(timeout=10):
    """Reap the children a subreaper inherited (the executor, should the
    kernel end before it), until none is left or `timeout` s passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def reap_ours(pids):
    for p in pids:
        try:
            os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            pass  # not our child: its parent reaps it


# ---- a kernel with the chaos functions ----

class ChaosKernel:
    """A started nbfork kernel (environment `env`) in which CHAOS_DEFS ran."""

    def __init__(self, env=None):
        self.k = h.Kernel(env=env)
        try:
            self.define()
        except BaseException:
            self.k.close()
            raise

    def define(self):
        reply, out = self.k.execute(CHAOS_DEFS)
        if reply["status"] != "ok":
            raise AssertionError(h.errors(out))

    @property
    def kernel_pid(self):
        return self.k.km.provisioner.process.pid

    def executor_pid(self):
        ex = children(self.kernel_pid)
        return ex[0] if len(ex) == 1 else None

    def start_loop(self, world, reports, tries=5):
        """%launch chaos_loop(EVERY, 0) on `world` ranks; returns (cell,
        {rank: pid}) once every rank joined and rank 0 reported `reports`
        times, or raises naming what the cell said."""
        for _ in range(tries):
            cell = Cell(self.k, "%%launch chaos_loop(%d, 0) num_processes=%d use_port=%d" %
                        (EVERY, world, h.free_port()))
            mark = "step %d\n" % (EVERY * reports)
            seen = cell.wait_for(lambda s: s.count(" joined") == world and mark in s)
            if seen is not None:
                pids = {int(r): int(p) for r, p in
                        re.findall(r"rank (\d+) pid (\d+) joined", h.stream_text(cell.outputs))}
                return cell, pids
            reply, out = cell.finish()
            if not port_taken(out):
                raise AssertionError("the loop ended before the fault: %r" % h.errors(out))
        raise AssertionError("no free port in %d tries" % tries)

    def fault_trial(self, world, victim, sig, interrupt=False):
        """Send `sig` to rank `victim` of an all-reduce loop at a random
        step (then interrupt the kernel, with `interrupt`); wait for the
        cell's end. Returns a dict: elapsed (s from the signal to the
        cell's idle), errors, pids, left (processes of the workers still
        there: workers, their groups' members, zombies)."""
        cell, pids = self.start_loop(world, random.randint(1, 8))
        t0 = time.monotonic()
        os.kill(pids[victim], sig)
        if interrupt:
            self.k.km.interrupt_kernel()
        try:
            reply, out = cell.finish(timeout=END_BOUND + 60)
        finally:
            for p in pids.values():  # never leave a stopped worker behind
                if not dead(p) and p in children(self.executor_pid() or -1):
                    os.kill(p, signal.SIGKILL)
        elapsed = time.monotonic() - t0
        left = [p for p in pids.values() if stat_fields(p) is not None]
        left += in_groups(set(pids.values()))
        left += zombies([self.kernel_pid, self.executor_pid() or -1])
        left += [c for c in children(self.executor_pid() or -1)]
        return {"elapsed": elapsed, "reply": reply, "errors": h.errors(out), "pids": pids,
                "left": sorted(set(left))}

    def assert_launches(self, case):
        """A short launch of 2 ranks succeeds: the kernel is usable again."""
        reply, out = self.k.execute("%%launch chaos_loop(1, 5) num_processes=2 use_port=%d" %
                                    h.free_port())
        case.assertEqual(reply["status"], "ok", h.errors(out))

    def close(self):
        self.k.close()


def leads_with(err, rank, pid, how):
    """The WorkerFailed summary names rank `rank` (pid) first, as `how`."""
    return err["evalue"].startswith("rank %d (local rank %d, pid %d) %s" % (rank, rank, pid, how))


class KillRanks(unittest.TestCase):
    WORLD = 3

    def test_kill_each_rank_during_all_reduce(self):
        ck = ChaosKernel()
        try:
            for victim in range(self.WORLD):
                t = ck.fault_trial(self.WORLD, victim, signal.SIGKILL)
                errs = t["errors"]
                self.assertEqual(t["reply"]["status"], "error")
                self.assertEqual(len(errs), 1, errs)
                self.assertEqual(errs[0]["ename"], "WorkerFailed")
                self.assertTrue(leads_with(errs[0], victim, t["pids"][victim],
                                           "was killed by signal 9 (SIGKILL"),
                                "rank %d was killed, the error says: %s" % (victim,
                                                                            errs[0]["evalue"]))
                self.assertLess(t["elapsed"], END_BOUND)  # fails fast: no timeout involved
                self.assertEqual(t["left"], [])
            # and the kernel launches again
            ck.assert_launches(self)
        finally:
            ck.close()


class StopRank(unittest.TestCase):
    def test_stopped_rank_times_out(self):
        ck = ChaosKernel(env={"NBFORK_TIMEOUT_S": str(STOP_TIMEOUT_S)})
        try:
            t = ck.fault_trial(3, 1, signal.SIGSTOP)
            errs = t["errors"]
            self.assertEqual(len(errs), 1, errs)
            self.assertEqual(errs[0]["ename"], "WorkerFailed")
            text = errs[0]["evalue"] + "\n".join(errs[0]["traceback"])
            self.assertIn("timeout", text.lower())
            # the stopped rank is named first, as stopped
            self.assertTrue(leads_with(errs[0], 1, t["pids"][1], "was stopped by signal 19"),
                            errs[0]["evalue"])
            self.assertLess(t["elapsed"], STOP_TIMEOUT_S + END_BOUND)  # a timeout, not a hang
            self.assertEqual(t["left"], [])  # the stopped process was killed and reaped
        finally:
            ck.close()


    def test_stopped_rank_interrupted(self):
        # the stop path's TERM reaches a stopped worker too (SIGCONT)
        ck = ChaosKernel()
        try:
            t = ck.fault_trial(3, 2, signal.SIGSTOP, interrupt=True)
            self.assertEqual([e["ename"] for e in t["errors"]], ["KeyboardInterrupt"])
            self.assertLess(t["elapsed"], END_BOUND)
            self.assertEqual(t["left"], [])
            ck.assert_launches(self)
        finally:
            ck.close()


def executor_kill_trial(ck):
    """kill -9 the executor while a launch runs its all-reduce loop.
    Returns a dict: workers_dead_s (kill to every worker dead), reply,
    errors, left (workers not reaped), old and new executor pids. The
    caller must be a subreaper (become_subreaper) to see the orphans."""
    cell, pids = ck.start_loop(3, random.randint(1, 8))
    old = ck.executor_pid()
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    h.wait_until(lambda: all(dead(p) for p in pids.values()), timeout=30, interval=0.002)
    workers_dead_s = time.monotonic() - t0
    reply, out = cell.finish(timeout=END_BOUND)
    h.wait_until(lambda: (reap_ours(pids.values()) or
                          all(stat_fields(p) is None for p in pids.values())), timeout=30)
    left = [p for p in pids.values() if stat_fields(p) is not None]
    return {"workers_dead_s": workers_dead_s, "reply": reply, "errors": h.errors(out),
            "left": left, "old": old, "new": ck.executor_pid()}


class KillExecutor(unittest.TestCase):
    def test_executor_killed_during_launch(self):
        become_subreaper()
        ck = ChaosKernel()
        try:
            t = executor_kill_trial(ck)
            # PR_SET_PDEATHSIG: the kernel kills them as the executor dies
            # (the goal is 1 s; the bound is generous for a loaded machine)
            self.assertLess(t["workers_dead_s"], 5)
            self.assertEqual(t["left"], [])
            errs = t["errors"]
            self.assertEqual(len(errs), 1, errs)
            self.assertIn("executor", errs[0]["evalue"])
            self.assertIn("SIGKILL", errs[0]["evalue"])
            self.assertTrue(dead(t["old"]))
            self.assertIsNotNone(t["new"])
            self.assertNotEqual(t["new"], t["old"])
            # the fresh executor: define again, launch again
            ck.define()
            ck.assert_launches(self)
            self.assertEqual(zombies([ck.kernel_pid, t["new"]]), [])
        finally:
            ck.close()
            reap_orphans()


def soak(ck, launches, warmup=10, fail_every=10):
    """`launches` consecutive 2-rank launches of soak_one (every
    fail_every-th fails on purpose: rank 1 returns 3). Returns a dict of
    figures: kernel/executor (fds, threads, rss_kib) after the warm-up
    and at the end, zombies and leftover workers seen, failures that were
    not the expected ones."""
    kpid, expid = ck.kernel_pid, ck.executor_pid()
    res = {"launches": launches, "zombies": 0, "left": 0, "wrong": []}
    t0 = time.monotonic()
    for i in range(launches):
        if i == warmup:
            res["before"] = (figures(kpid), figures(expid))
        bad = 1 if i % fail_every == fail_every - 1 else -1
        reply, out = ck.k.execute("%%launch soak_one(%d) num_processes=2 use_port=%d" %
                                  (bad, h.free_port()))
        errs = h.errors(out)
        ok = (reply["status"] == "ok") if bad < 0 else (
            len(errs) == 1 and errs[0]["evalue"].startswith("rank 1 ") and
            "exited with code 3" in errs[0]["evalue"])
        if not ok and not port_taken(out):
            res["wrong"].append((i, errs))
        res["zombies"] += len(zombies([kpid, expid]))
        res["left"] += len(children(expid))
    res["seconds"] = time.monotonic() - t0
    res["after"] = (figures(kpid), figures(expid))
    res["executor_same"] = ck.executor_pid() == expid
    return res


class Soak(unittest.TestCase):
    LAUNCHES = 100

    def test_consecutive_launches_leave_nothing(self):
        ck = ChaosKernel()
        try:
            r = soak(ck, self.LAUNCHES)
            print("soak: %d launches in %.1f s; kernel (fds, threads, RSS KiB) %s -> %s; "
                  "executor %s -> %s; zombies %d" % (r["launches"], r["seconds"], r["before"][0],
                                                     r["after"][0], r["before"][1], r["after"][1],
                                                     r["zombies"]), file=sys.stderr)
            self.assertEqual(r["wrong"], [])
            self.assertTrue(r["executor_same"])
            self.assertEqual(r["zombies"], 0)
            self.assertEqual(r["left"], 0)
            for who, pid in enumerate((ck.kernel_pid, ck.executor_pid())):
                (fd0, th0, rss0), (fd1, th1, rss1) = r["before"][who], r["after"][who]
                if (fd1, th1) > (fd0, th0):  # a descriptor of the last request may close late
                    h.wait_until(lambda: figures(pid)[:2] <= (fd0, th0), timeout=10)
                    fd1, th1, _ = figures(pid)
                self.assertLessEqual(fd1, fd0, "descriptors grew")
                self.assertLessEqual(th1, th0, "threads grew")
                # the kernel keeps each cell in its history: a little growth
                self.assertLess(rss1 - rss0, 4096, "RSS grew by %d KiB" % (rss1 - rss0))
        finally:
            ck.close()


# ---- two nodes in network namespaces, the link deleted mid-training ----

def hung_report(namespaces):
    """ps and gdb stacks of what still runs in the namespaces (for a
    failure message)."""
    pids = [p for ns in namespaces for p in test_netns.ip("netns", "pids", ns).stdout.split()]
    text = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,cmd", "-p", ",".join(pids) or "1"],
                          capture_output=True, text=True).stdout
    for p in pids:
        r = subprocess.run(["gdb", "-p", p, "-batch", "-ex", "thread apply all bt 15"],
                           capture_output=True, text=True, timeout=60)
        text += "\n".join(l for l in r.stdout.splitlines() if l.startswith(("#", "Thread")))
    return text


def cut_trial(case, how="delete"):
    """Run `nbfork launch ... loop 600` on both nodes of a TwoNamespaces
    case; once rank 0 reported a random step (2 to 8: training under way,
    the synchronous mesh connected at step 1), cut the veth (`delete` it, or set
    node 0's end `down`). Returns (elapsed per node from the cut to its
    exit, [(returncode, stdout, stderr)] per node)."""
    nodes = [case.launch(0, "loop", "600"), case.launch(1, "loop", "600")]
    try:
        line = nodes[0].stdout.readline()  # the banner, then rank lines
        mark = "step %d\n" % random.randint(2, 8)
        while not line.endswith(mark):
            case.assertTrue(line, "node 0 ended before the cut")
            line = nodes[0].stdout.readline()
        cmd = (["-n", case.ns[0], "link", "del", case.dev[0]] if how == "delete" else
               ["-n", case.ns[0], "link", "set", case.dev[0], "down"])
        r = test_netns.ip(*cmd)
        case.assertEqual(r.returncode, 0, r.stderr)
        cut = time.monotonic()
        elapsed, outs = [None, None], [None, None]
        while None in elapsed:  # in the order they end
            done = h.wait_until(lambda: any(p.poll() is not None and elapsed[i] is None
                                            for i, p in enumerate(nodes)),
                                timeout=test_netns.TIMEOUT_S + END_BOUND, interval=0.01)
            if not done:
                case.fail("a node did not end after the cut: %s" % hung_report(case.ns))
            for i, p in enumerate(nodes):
                if p.poll() is not None and elapsed[i] is None:
                    elapsed[i] = time.monotonic() - cut
        for i, p in enumerate(nodes):
            out, err = p.communicate(timeout=60)
            outs[i] = (p.returncode, out, err)
        return elapsed, outs
    finally:
        for p in nodes:  # the launchers' workers die with them (PDEATHSIG)
            if p.poll() is None:
                p.kill()
            p.communicate()


class CutLink(test_netns.TwoNamespaces):
    # the parent's tests run as e2e.netns.*
    test_job_across_two_addresses = None
    test_cut_link_fails_every_node_within_the_timeout = None

    def test_veth_deleted_mid_training(self):
        elapsed, outs = cut_trial(self, "delete")
        print("cut: nodes ended %.2f s and %.2f s after the cut (NBFORK_TIMEOUT_S=%d)" %
              (elapsed[0], elapsed[1], test_netns.TIMEOUT_S), file=sys.stderr)
        for node, (rc, out, err) in enumerate(outs):
            self.assertEqual(rc, 1, out + err)
            self.assertIn("nbfork launch: WorkerFailed", err)
            lost = self.addr[1 - node]
            self.assertIn("[%s]" % lost, err)  # names the lost node's address
            self.assertIn("does not answer this node", err)  # the launcher's probe
            # within the timeout (and what ending the group takes), never a hang
            self.assertLess(elapsed[node], test_netns.TIMEOUT_S + END_BOUND)
        for ns in self.ns:  # no process is left in either namespace
            self.assertEqual(test_netns.ip("netns", "pids", ns).stdout.split(), [])

if __name__ == "__main__":
    unittest.main()
