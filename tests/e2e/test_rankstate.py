"""End-to-end tests of what every rank is doing (issue 21) and of failed
collectives (issue 27, item 1), through `nbfork launch` and
nbfork-rank-faults (rank_faults.c), whose loop ignores the return codes
of acc_all_reduce as a newcomer's training loop does.

- a failed collective ends its rank by default, and the report leads with
  the rank that left; NBFORK_COLLECTIVE_ERRORS=return hands it back;
- a hang past NBFORK_TIMEOUT_S reports every rank's position and names
  the odd one, within the timeout plus a margin;
- SIGQUIT prints where every rank is while the run goes on;
- through shared memory (issue 24) a crash or an interrupt leaves
  nothing in /dev/shm;
- several failed ranks are all listed, in the stated order, every run;
- ACCELERATE_DEBUG_MODE: a length mismatch is an error on every rank
  naming each rank's call; without it, an error (no SIGABRT); an
  unrecognised value is an error naming the accepted ones.

Each test method is its own ctest entry, e2e.rankstate.METHOD.
"""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from nbf_harness import BUILD_DIR

NBFORK = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork"))
PROG = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork-rank-faults"))
TIMEOUT = 120  # s: upper bound of any one command
HANG_TIMEOUT_S = 4  # NBFORK_TIMEOUT_S of the hang tests
MARGIN_S = 6.0  # start-up and the report, on a loaded 2-core machine


class RankState(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="nbf-rs-")
        self.env = dict(os.environ, NBFORK_CONFIG_FILE=os.path.join(self.tmp.name, "c.yaml"))
        for k in list(self.env):
            if k.startswith(("SLURM_", "OMPI_", "PMI_", "NBFORK_COLLECTIVE", "ACCELERATE_")) or \
                    k in ("RANK", "WORLD_SIZE", "NBFORK_TIMEOUT_S"):
                del self.env[k]

    def tearDown(self):
        self.tmp.cleanup()

    def launch(self, n, *args, **env):
        e = dict(self.env, **env)
        t0 = time.monotonic()
        r = subprocess.run([NBFORK, "launch", "--num_processes", str(n), "--main_process_port",
                            "0", PROG, *args], capture_output=True, text=True, env=e,
                           timeout=TIMEOUT)
        r.secs = time.monotonic() - t0
        return r

    def report(self, r):
        """The launcher's WorkerFailed report: from its summary line on."""
        i = r.stderr.find("nbfork launch: WorkerFailed: ")
        self.assertGreaterEqual(i, 0, r.stderr)
        return r.stderr[i + len("nbfork launch: WorkerFailed: "):]

    def interrupt_hang(self, during):
        """Launch 2 ranks of PROG hang (rank 1 reaches step 58 at once; rank 0
        then waits in all-reduce #58), call during(p) 3 s in, then SIGINT the
        launcher; asserts that it exited 130 and returns its stderr."""
        p = subprocess.Popen([NBFORK, "launch", "--num_processes", "2", "--main_process_port",
                              "0", PROG, "hang"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(self.env, NBFORK_TIMEOUT_S="60"))
        try:
            time.sleep(3)
            during(p)
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 130, err)
        return err

    def timed_launch(self, n, mode, mark, **env):
        """Launch, and time from the worker's "rank 1 <mark> at T" line
        (CLOCK_MONOTONIC, as time.monotonic) to the launcher's report line."""
        p = subprocess.Popen([NBFORK, "launch", "--num_processes", str(n), "--main_process_port",
                              "0", PROG, mode], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=dict(self.env, **env))
        t_mark = t_report = None
        lines = []
        try:
            for line in p.stderr:
                lines.append(line)
                m = re.search(r"rank 1 %s at (\d+\.\d+)" % mark, line)
                if m:
                    t_mark = float(m.group(1))
                if t_report is None and "nbfork launch: WorkerFailed: " in line:
                    t_report = time.monotonic()
            p.wait(timeout=TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
        err = "".join(lines)
        self.assertIsNotNone(t_mark, err)
        self.assertIsNotNone(t_report, err)
        return p.returncode, err, t_report - t_mark

    def test_leaving_rank_stops_the_group_at_once(self):
        # rank 1 leaves before all-reduce #58 (acc_destroy's barrier #58)
        # while ranks 0 and 2 wait in all-reduce #58. Before: they all
        # waited until NBFORK_TIMEOUT_S (60 s here), then rank 0 failed.
        # Through Gloo's mesh (as across nodes) the peers cannot see the
        # leave: the launcher stops the group. Through shared memory (one
        # node, the default; issue 24) the peers see it themselves: last.
        rc, err, leave_to_report = self.timed_launch(3, "leave", "leaves",
                                                     NBFORK_TIMEOUT_S="60",
                                                     NBFORK_SHM_COLLECTIVES="0")
        print("leave -> report: %.3f s" % leave_to_report)
        self.assertEqual(rc, 1, err)
        rep = self.report(subprocess.CompletedProcess([], rc, "", err))
        print(rep)
        self.assertRegex(rep, r"^rank 1 \(local rank 1, pid \d+\) left first: it (exited with "
                              r"code 0|was leaving the group \(acc_destroy\)) .* after "
                              r"all_reduce #57, while its peers")
        self.assertIn("nbfork stopped the group when rank 1's record showed it leaving: its "
                      "peers would have waited in their collectives until NBFORK_TIMEOUT_S (60 s)",
                      rep)
        self.assertRegex(rep, r"  rank 1: in acc_destroy's barrier #58 for \d+\.\d s \(leaving "
                              r"the group\)")
        self.assertRegex(rep, r"  -> rank 1 left early: it is leaving the group \(acc_destroy's "
                              r"barrier\) after all_reduce #57 while rank [02] waits in "
                              r"all_reduce #58 \(f32 x 4096\)")
        self.assertNotIn("failed after", rep)  # nobody waited for the timeout
        # the monitor sees it within one tick (0.1 s); SIGTERM, reaping and
        # the drain follow; a loaded 2-core machine gets a margin
        self.assertLess(leave_to_report, 3.0)
        rc, err, leave_to_report = self.timed_launch(3, "leave", "leaves",
                                                     NBFORK_TIMEOUT_S="60")
        print("through shared memory: leave -> report: %.3f s" % leave_to_report)
        self.assertEqual(rc, 1, err)
        rep = self.report(subprocess.CompletedProcess([], rc, "", err))
        self.assertRegex(rep, r"^rank 1 \(local rank 1, pid \d+\) left first: it (exited with "
                              r"code 0|was leaving the group \(acc_destroy\)) .* after "
                              r"all_reduce #57, while its peers")
        self.assertIn("through shared memory: the connection to rank 1 was lost: it left the "
                      "group (acc_destroy)", err)
        self.assertLess(leave_to_report, 3.0)

    def test_errors_return_opt_in_hands_the_error_back(self):
        r = self.launch(2, "leave", NBFORK_TIMEOUT_S=str(HANG_TIMEOUT_S),
                        NBFORK_COLLECTIVE_ERRORS="return")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rank 0 finished", r.stdout)  # the caller's choice: it ignored them
        bad = self.launch(2, "leave", NBFORK_COLLECTIVE_ERRORS="maybe")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("NBFORK_COLLECTIVE_ERRORS='maybe' is not one of fatal, return", bad.stderr)

    def test_hang_reports_every_rank_and_the_odd_one(self):
        rc, err, hang_to_report = self.timed_launch(3, "hang", "hangs",
                                                    NBFORK_TIMEOUT_S=str(HANG_TIMEOUT_S))
        print("hang -> report: %.3f s (NBFORK_TIMEOUT_S=%d)" % (hang_to_report, HANG_TIMEOUT_S))
        self.assertEqual(rc, 1, err)
        rep = self.report(subprocess.CompletedProcess([], rc, "", err))
        print(rep)
        self.assertIn("Where each rank was when the group failed", rep)
        self.assertRegex(rep, r"  rank 0: (all_reduce #58 \(f32 x 4096\) failed after \d+\.\d s "
                              r"\(timed out|in all_reduce #58 \(f32 x 4096\) for \d+\.\d s)")
        # (its end follows when the stop's SIGTERM was reaped first)
        self.assertRegex(rep, r"  rank 1: running its own code for \d+\.\d s, after all_reduce "
                              r"#57(; killed by signal 15 \(SIGTERM\))?\n")
        self.assertRegex(rep, r"  -> rank 1 did not reach all_reduce #58 \(f32 x 4096\): it ran "
                              r"its own code for \d+\.\d s after all_reduce #57")
        self.assertLess(hang_to_report, HANG_TIMEOUT_S + MARGIN_S)

    def test_shm_crash_and_interrupt_leave_nothing_in_dev_shm(self):
        # issue 24: the ranks of one node share memory through anonymous
        # memfds (no names): neither a crash nor an interrupt leaves
        # anything in /dev/shm (a peer's death seen by the survivors
        # themselves: runtime.peer_failure.shm_killed_leaves_nothing)
        before = sorted(os.listdir("/dev/shm"))
        t0 = time.monotonic()
        r = self.launch(3, "crash", NBFORK_TIMEOUT_S="60")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertLess(time.monotonic() - t0, 30)  # nobody waited for the timeout
        self.assertIn("killed by signal 11 (SIGSEGV", r.stderr)
        self.assertEqual(sorted(os.listdir("/dev/shm")), before)
        def check_maps(p):
            maps = ""
            for pid in os.listdir("/proc"):
                try:
                    stat = open("/proc/%s/stat" % pid).read()
                    if int(stat[stat.rindex(")") + 2:].split()[1]) == p.pid:
                        maps += open("/proc/%s/maps" % pid).read()
                except (OSError, ValueError):
                    pass
            self.assertIn("/memfd:nbfork-shm", maps)  # the path under test is the one in use
            self.assertNotIn("/dev/shm/", maps)
        self.interrupt_hang(check_maps)
        self.assertEqual(sorted(os.listdir("/dev/shm")), before)

    def test_sigquit_prints_where_every_rank_is(self):
        def quit_first(p):
            p.send_signal(signal.SIGQUIT)
            time.sleep(1)
        err = self.interrupt_hang(quit_first)
        self.assertRegex(err, r"nbfork: where each rank is, \d+\.\d s into the run \(SIGQUIT; "
                              r"their state records\):")
        self.assertRegex(err, r"  rank 0: in all_reduce #58 \(f32 x 4096\) for \d+\.\d s\n")
        self.assertIn("  -> rank 1 did not reach all_reduce #58", err)
        # and the interrupt's report says it again
        self.assertIn("Where each rank was when interrupted", err)

    def test_every_failed_rank_is_listed_in_order(self):
        # ranks 1, 2, 3 exit(3) at nearly the same time; rank 0's all-reduce
        # then loses them. Before: 1-2 of the failed ranks appeared, varying
        # by run. A rank the launcher stopped before its own exit(3) ran (a
        # loaded machine) is no cause; every rank whose record says it
        # exited 3 is listed, those first, by rank.
        for trial in range(3):
            r = self.launch(4, "own3", NBFORK_TIMEOUT_S="30")
            self.assertEqual(r.returncode, 1, r.stderr)
            rep = self.report(r)
            heads = re.findall(r"^rank (\d) \(local rank \d, pid \d+\) (.*)$", rep, re.M)
            ranks = [int(k) for k, _ in heads]
            own = [int(k) for k, how in heads if "exited with code 3" in how]
            exited3 = sorted(int(k) for k in re.findall(r"^  rank (\d): .*; exited 3$", rep, re.M))
            self.assertTrue(own, rep)
            self.assertTrue(set(exited3) <= set(own), rep)  # every own failure is listed
            self.assertEqual(own, sorted(own), rep)
            self.assertEqual(ranks[:len(own)], own, rep)  # first, by rank
            self.assertTrue(set(own) <= {1, 2, 3}, rep)
            if 0 in ranks:  # rank 0 failed too (it lost them), after them
                self.assertGreater(ranks.index(0), len(own) - 1, rep)

    def test_debug_mode_names_each_ranks_call(self):
        r = self.launch(2, "mismatch", ACCELERATE_DEBUG_MODE="1", NBFORK_TIMEOUT_S="30")
        self.assertEqual(r.returncode, 1, r.stderr)
        call = ("Operation: all_reduce #4. Process 0: f32 x 4096, sum; Process 1: f32 x 4095, "
                "sum")
        # fatal (the default): the first rank to fail leads, naming both calls
        self.assertRegex(r.stderr, r"nbfork: rank [01]: all_reduce #4 \(f32 x 409[56]\) failed "
                                   r"\(the ranks called different collectives")
        self.assertIn(call, self.report(r))
        self.assertIn("  -> rank 0 called all_reduce #4 (f32 x 4096) where rank 1 called "
                      "all_reduce #4 (f32 x 4095)", self.report(r))
        self.assertLess(r.secs, 30)  # never a hang
        # errors returned: the error is on every rank, and the group goes on
        r = self.launch(2, "mismatch", ACCELERATE_DEBUG_MODE="1", NBFORK_TIMEOUT_S="30",
                        NBFORK_COLLECTIVE_ERRORS="return")
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in (0, 1):
            self.assertIn("error: rank %d: %s" % (rank, "the ranks' calls differ: " + call),
                          r.stderr)
        self.assertIn("rank 0 finished", r.stdout)

    def test_length_mismatch_without_debug_mode_is_an_error(self):
        r = self.launch(2, "mismatch", NBFORK_TIMEOUT_S="10")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("SIGABRT", r.stderr)
        self.assertRegex(r.stderr, r"nbfork: rank [01]: all_reduce #4 \(f32 x 409[56]\) failed")
        # the default: the failed collective ended its rank, which says how to opt out
        self.assertIn("a failed collective is fatal (ACC_ERRORS_ARE_FATAL)", r.stderr)
        self.assertIn("NBFORK_COLLECTIVE_ERRORS=return", r.stderr)
        rep = self.report(r)
        self.assertIn("  -> rank 0 called all_reduce #4 (f32 x 4096) where rank 1 called "
                      "all_reduce #4 (f32 x 4095)", rep)

    def test_unrecognised_debug_mode_is_an_error(self):
        r = self.launch(2, "leave", ACCELERATE_DEBUG_MODE="verbose")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("ACCELERATE_DEBUG_MODE='verbose' is not one of 1, true, yes, on, y or 0, "
                      "false, no, off, n", r.stderr)


if __name__ == "__main__":
    unittest.main()
