#!/usr/bin/python3
"""End-to-end tests of interactive ranks (`%ranks`, `%%ranks`, `%autoranks`;
issue 22) through the REAL kernel and executor (jupyter_client). Each test
method is its own ctest test, exec.e2e.ranks.NAME (tests/exec/CMakeLists.txt).

  NBFORK_BUILD_DIR=build PYTHONPATH=tests/e2e:tests/exec \\
    .venv/bin/python -m unittest test_ranks_e2e.RanksE2ETest.test_globals_live_in_the_ranks
"""
import os
import re
import time
import unittest

import nbf_harness
from nbf_harness import Kernel, at_once, errors, results, stream_text

TIMEOUT = 60


def alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RanksE2ETest(nbf_harness.KernelTestCase):
    workdir_prefix = "nbfork-ranks-e2e-"
    cell_timeout = TIMEOUT

    def kernel_environ(self, workdir):
        return {"TMPDIR": workdir}

    def ok(self, code, **kw):
        return self.run_ok(code, **kw)[1]

    def fail_with(self, code, ename, **kw):
        reply, outputs, _, times = self.run_cell(code, **kw)
        self.assertEqual(reply["status"], "error", code)
        self.assertEqual(reply["ename"], ename, reply)
        return reply, outputs, times

    def start(self, n=2):
        for attempt in range(3):
            reply, outputs, _, _ = self.run_cell(
                "%%ranks start num_processes=%d use_port=%d" % (n, nbf_harness.free_port()))
            if reply["status"] == "ok" or nbf_harness.PORT_IN_USE not in str(reply):
                break
        self.assertEqual(reply["status"], "ok", reply)
        # an ordinary cell after the start: its function reaches the ranks
        self.ok('#include <stdlib.h>\n'
                'int my_rank(void) { const char *r = getenv("RANK"); return r ? atoi(r) : -1; }')
        return self.pids()

    def two_nodes(self):
        """self.k is node 0, the kernel returned node 1 (its own process,
        as a second machine's notebook would be): each starts 2 ranks of
        one group of 4, meeting at node 0's store on loopback with a
        secret, as two `%launch`es across machines do."""
        b = Kernel(env={"TMPDIR": self.workdir})
        self.addCleanup(b.close)
        for attempt in range(3):
            port = nbf_harness.free_port()
            start = ("%%ranks start num_processes=2 num_nodes=2 node_rank=%d use_port=%d "
                     "rdzv_conf=secret=two-kernels rdzv_timeout=30")
            r0, r1 = at_once(lambda: self.run_cell(start % (0, port)),
                             lambda: b.run(start % (1, port), timeout=TIMEOUT))
            if nbf_harness.PORT_IN_USE not in str(r0[0]) + str(r1[0]):
                break
            at_once(lambda: self.run_cell("%ranks stop"), lambda: b.run("%ranks stop"))
        for node, (reply, outputs, _, _) in enumerate((r0, r1)):
            self.assertEqual(reply["status"], "ok", reply)
            self.assertIn("node %d of 2 in one process group of world size 4" % node,
                          stream_text(outputs))
        return b

    def on_both(self, b, code, **kw0):
        """Run `code` in node 0's kernel (with kw0: interrupt_when, ...) and
        node 1's at once: [(reply, outputs, times)] for node 0, node 1."""
        r0, r1 = at_once(lambda: self.run_cell(code, **kw0), lambda: b.run(code, timeout=TIMEOUT))
        return [(r[0], r[1], r[3]) for r in (r0, r1)]

    def assert_each_rank(self, out, value):
        """on_both's cell succeeded on both nodes and each node's two ranks
        (0-1 on node 0, 2-3 on node 1) showed `value`."""
        for node, (reply, outputs, _) in enumerate(out):
            self.assertEqual(reply["status"], "ok", reply)
            self.assertEqual(sorted(results(outputs)),
                             ["[rank %d] %s" % (2 * node + k, value) for k in (0, 1)])

    def pids(self):
        text = stream_text(self.ok("%ranks status"))
        return [int(m.group(1)) for m in re.finditer(r"^\d+\s+(\d+)\s", text, re.M)]

    # ------------------------------------------------------------ tests

    def test_start_status_stop(self):
        pids = self.start(2)
        self.assertEqual(len(pids), 2)
        self.assertTrue(all(alive(p) for p in pids))
        status = stream_text(self.ok("%ranks status"))
        self.assertEqual(len(re.findall(r"\bidle\b", status)), 2, status)
        self.assertIn("MiB", status)
        self.ok("%ranks stop")
        self.assertTrue(nbf_harness.wait_until(lambda: not any(alive(p) for p in pids), 5))
        self.assertIn("No rank workers", stream_text(self.ok("%ranks status")))

    def test_globals_live_in_the_ranks(self):
        self.start(2)
        self.ok("%%ranks\nint x = 5;")
        self.ok("%%ranks 1\nx += 10;")
        out = self.ok("%%ranks\nx")
        self.assertEqual(sorted(results(out)), ["[rank 0] 5", "[rank 1] 15"])
        out = self.ok('%%ranks 0-1\n#include <stdio.h>\nprintf("x=%d\\n", x);')
        self.assertEqual(sorted(stream_text(out).splitlines()),
                         ["[rank 0] x=5", "[rank 1] x=15"])
        # the kernel's x is its own: the cell's statements (its initializer
        # among them) ran on the ranks only
        self.assertEqual(results(self.ok("x")), ["0"])
        self.assertIn("pulled x (4 bytes) from rank 1", stream_text(self.ok("%ranks pull x from=1")))
        self.assertEqual(results(self.ok("x")), ["15"])

    def test_ordinary_definitions_reach_the_ranks(self):
        self.start(2)
        self.ok("typedef struct { int a, b; } pair_t;\n"
                "int add(pair_t p) { return p.a + p.b; }\nint k = 3;\nk = 100;")
        out = self.ok("%%ranks\npair_t p;\np.a = my_rank();\np.b = 2;\nadd(p) + k")
        # functions and types are usable; k is 0 there (its initializer and
        # the statement `k = 100` ran in the kernel only)
        self.assertEqual(sorted(results(out)), ["[rank 0] 2", "[rank 1] 3"])
        self.ok("%ranks push k")
        self.assertEqual(sorted(results(self.ok("%%ranks\nk"))), ["[rank 0] 100", "[rank 1] 100"])

    def test_libc_calls_bind_their_default_versions(self):
        """A cell the ranks dlopen() links libc by file, so realpath(p,
        NULL) is GLIBC_2.3's (the oldest, 2.2.5's, wants a buffer: EINVAL);
        statements (TinyCC) and a function (the system compiler) both."""
        self.start(2)
        self.ok("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <errno.h>")
        out = self.ok('%%ranks\nchar *rp = realpath("/tmp/..", NULL);\n'
                      'printf("%s\\n", rp ? rp : strerror(errno));')
        self.assertEqual(sorted(stream_text(out).splitlines()), ["[rank 0] /", "[rank 1] /"])
        out = self.ok('%%ranks\nint rp_ok(void) { char *q = realpath("/", NULL);'
                      ' int ok = q ? 1 : -errno; free(q); return ok; }\nrp_ok()')
        self.assertEqual(sorted(results(out)), ["[rank 0] 1", "[rank 1] 1"])

    def test_accelerator_across_cells(self):
        self.start(2)
        self.ok("%%ranks\nacc_t *acc = acc_new(NULL);")
        out = self.ok("%%ranks\nfloat v = acc_rank(acc) + 1;\n"
                      "acc_all_reduce(acc, &v, 1, ACC_F32, ACC_SUM);\nv")
        self.assertEqual(sorted(results(out)), ["[rank 0] 3", "[rank 1] 3"])
        out = self.ok("%%ranks\nacc_world_size(acc)")
        self.assertEqual(sorted(results(out)), ["[rank 0] 2", "[rank 1] 2"])

    def test_compile_error_runs_nothing(self):
        self.start(2)
        reply, outputs, _ = self.fail_with(
            '%%ranks\n#include <stdio.h>\nprintf("ran\\n");\nint z = ;', "CompileError")
        self.assertIn("cell[", reply["evalue"])
        self.assertIn(":4:", reply["evalue"])  # the cell's own line
        self.assertNotIn("ran", stream_text(outputs))

    def test_crash_reports_the_rank_and_restart_recovers(self):
        pids = self.start(2)
        self.ok("%%ranks\nint alive_x = 1;")
        reply, _, _ = self.fail_with("%%ranks\nif (my_rank() == 1) *(volatile int *)0 = 1;",
                                     "RankFailed")
        self.assertIn("rank 1", reply["evalue"])
        self.assertIn("SIGSEGV", reply["evalue"])
        status = stream_text(self.ok("%ranks status"))
        self.assertRegex(status, r"(?m)^1\s+%d\s.*exited in cell \[\d+\]: killed by signal 11"
                         % pids[1])
        self.assertRegex(status, r"(?m)^0\s+%d\s.*idle" % pids[0])
        reply, _, _ = self.fail_with("%%ranks\nalive_x", "LaunchError")
        self.assertIn("rank 1 is dead", reply["evalue"])
        # rank 0 alone still runs cells, with its state
        self.assertEqual(results(self.ok("%%ranks 0\nalive_x")), ["[rank 0] 1"])
        self.ok("%ranks restart")
        self.assertEqual(len(re.findall(r"\bidle\b", stream_text(self.ok("%ranks status")))), 2)
        # forked again from the kernel's state: the ranks' values are gone
        self.assertEqual(sorted(results(self.ok("%%ranks\nalive_x + my_rank()"))),
                         ["[rank 0] 0", "[rank 1] 1"])

    def test_interrupt_ends_the_cell_and_keeps_state(self):
        self.start(2)
        self.ok("%%ranks\nint kept = 7;")
        reply, _, times = self.fail_with(
            '%%ranks\n#include <stdio.h>\nkept = 8;\nprintf("looping\\n"); fflush(stdout);\n'
            "for (volatile long i = 0;; i++) ;", "KeyboardInterrupt",
            interrupt_when=lambda out: stream_text(out).count("looping") == 2)
        self.assertLess(times["idle"] - times["interrupt"], 2.0)
        out = self.ok("%%ranks\nkept")
        self.assertEqual(sorted(results(out)), ["[rank 0] 8", "[rank 1] 8"])

    def test_interrupt_mid_collective_rebuilds_the_group(self):
        self.start(2)
        self.ok("%%ranks\nacc_t *acc = acc_new(NULL);")
        # rank 0 waits in an all-reduce that rank 1 never joins: the cut
        # leaves rank 0's 100 on the wire of the old group
        reply, _, times = self.fail_with(
            '%%ranks\n#include <stdio.h>\n#include <unistd.h>\nfloat cut = 100;\n'
            'printf("entered\\n"); fflush(stdout);\n'
            "if (my_rank() == 0) acc_all_reduce(acc, &cut, 1, ACC_F32, ACC_SUM);\n"
            "else for (;;) pause();", "KeyboardInterrupt",
            interrupt_when=lambda out: stream_text(out).count("entered") == 2)
        self.assertLess(times["idle"] - times["interrupt"], 2.0)
        tb = "\n".join(reply["traceback"])
        self.assertRegex(tb, r"rank 0: in all_reduce #1 \(f32 x 1\) for \d+\.\d s")
        self.assertIn("rank 1: running its own code", tb)
        self.assertIn("Rank 0 was cut inside all_reduce #1 (f32 x 1)", tb)
        self.assertIn("rebuilds its process groups at its next collective", tb)
        status = stream_text(self.ok("%ranks status"))
        self.assertRegex(status, r"(?m)^0\s.*idle \(last cell \[\d+\]\); cut inside "
                         r"all_reduce #1 \(f32 x 1\)")
        # the next collective runs on a new group: both ranks get 1 + 2,
        # not the cut call's 100
        out = self.ok("%%ranks\nfloat w = my_rank() + 1;\n"
                      "acc_all_reduce(acc, &w, 1, ACC_F32, ACC_SUM);\nw")
        self.assertEqual(sorted(results(out)), ["[rank 0] 3", "[rank 1] 3"])
        # numbered alike after the rebuild: the cut call was #1
        status = stream_text(self.ok("%ranks status"))
        self.assertEqual(len(re.findall(r"process group: last all_reduce #2\b", status)), 2,
                         status)

    def test_crash_mid_collective_reports_positions(self):
        self.start(2)
        self.ok("%%ranks\nacc_t *acc = acc_new(NULL);")
        reply, _, _ = self.fail_with(
            "%%ranks\n#include <unistd.h>\nfloat v = 1;\n"
            "if (my_rank() == 1) { usleep(300000); *(volatile int *)0 = 1; }\n"
            "acc_all_reduce(acc, &v, 1, ACC_F32, ACC_SUM);", "RankFailed")
        self.assertIn("rank 1", reply["evalue"])
        tb = "\n".join(reply["traceback"])
        # rank 0 waited in the all-reduce rank 1 never reached (still in it
        # at the stop, or already failed in it: its peer was lost)
        self.assertIn("Where each rank was when the cell stopped:", tb)
        self.assertRegex(tb, r"rank 0: (in all_reduce #1 \(f32 x 1\) for|"
                         r"all_reduce #1 \(f32 x 1\) failed after)")

    def test_pull_push_sizes(self):
        self.start(2)
        self.ok("%%ranks\nsize_t n = 25u << 20;\nfloat *w = acc_keep(\"w\", n * 4, NULL);\n"
                "for (size_t i = 0; i < n; i++) w[i] = i + my_rank();")
        t = time.monotonic()
        out = self.ok("%ranks pull w from=1")
        self.assertLess(time.monotonic() - t, 1.0)  # 100 MB
        self.assertIn("104857600 bytes", stream_text(out))
        # another name in the kernel: redefining w in an ordinary cell would
        # give the ranks a new w too (README, "Interactive ranks")
        self.assertEqual(results(self.ok('float *wk = acc_keep("w", (25u << 20) * 4, NULL);\n'
                                         'wk[5]')), ["6"])
        self.ok("wk[5] = -1;")
        self.ok("%ranks push w to=0")
        self.assertEqual(sorted(results(self.ok("%%ranks\nw[5]"))), ["[rank 0] -1", "[rank 1] 6"])
        # sizes must match: the error names both sides
        self.ok('%%ranks\nfloat *small = acc_keep("small", 16, NULL);')
        self.ok('float *small_k = acc_keep("small", 32, NULL);')
        reply, _, _ = self.fail_with("%ranks pull small", "ValueError")
        self.assertIn("16 bytes", reply["evalue"])
        self.assertIn("32 bytes", reply["evalue"])
        reply, _, _ = self.fail_with("%ranks push small", "ValueError")
        self.assertIn("16 bytes", reply["evalue"])
        self.assertIn("32 bytes", reply["evalue"])
        self.fail_with("%ranks pull nothing_here", "NameError")

    def test_group_output_and_prefix(self):
        self.start(2)
        out = self.ok('%%ranks --group\n#include <stdio.h>\n'
                      'printf("a%d\\n", my_rank()); printf("b%d\\n", my_rank());')
        self.assertEqual(stream_text(out), "[rank 0]\na0\nb0\n[rank 1]\na1\nb1\n")
        out = self.ok('%%ranks 1\n#include <stdio.h>\nprintf("one\\n");')
        self.assertEqual(stream_text(out), "[rank 1] one\n")

    def test_display_from_a_rank(self):
        self.start(2)
        out = self.ok('%%ranks 0\nacc_progress_t *pb = acc_progress_new(NULL, "train", 3);\n'
                      "for (int i = 0; i < 3; i++) acc_progress_update(pb, 1, NULL);\n"
                      "acc_progress_destroy(&pb);")
        kinds = [m["msg_type"] for m in out]
        self.assertIn("display_data", kinds)
        self.assertIn("update_display_data", kinds)

    def test_autoranks(self):
        self.start(2)
        self.ok("%autoranks on")
        self.ok("int ar = 4;")
        self.assertEqual(sorted(results(self.ok("ar * 2"))), ["[rank 0] 8", "[rank 1] 8"])
        self.ok("%autoranks off")
        self.assertEqual(results(self.ok("2 + 2")), ["4"])

    def test_help_lists_the_ranks_magics(self):
        for name, usage in [("%ranks", "%ranks start num_processes=N"),
                            ("%%ranks", "%%ranks [all | 0 | 1,3 | 0-2] [--group]"),
                            ("%autoranks", "%autoranks on|off")]:
            reply = self.run_cell(name + "?")[0]
            self.assertEqual(reply["status"], "ok", reply)
            self.assertIn(usage, reply["payload"][0]["data"]["text/plain"], name)

    def test_usage_errors(self):
        reply, _, _ = self.fail_with("%%ranks\nint q;", "UsageError")
        self.assertIn("%ranks start", reply["evalue"])
        self.start(2)
        reply, _, _ = self.fail_with("%%ranks 5\nint q;", "UsageError")
        self.assertIn("0-1", reply["evalue"])
        self.fail_with("%ranks start num_processes=2", "UsageError")
        self.fail_with("%ranks frobnicate", "UsageError")

    def test_shutdown_leaves_no_worker_and_no_file(self):
        pids = self.start(2)
        self.ok("%%ranks\nint q = 1;")
        self.k.close()
        self.assertTrue(nbf_harness.wait_until(lambda: not any(alive(p) for p in pids), 10),
                        "rank workers outlived the kernel")
        self.assertTrue(nbf_harness.wait_until(lambda: os.listdir(self.workdir) == [], 10),
                        os.listdir(self.workdir))
        self.k = Kernel(env={"TMPDIR": self.workdir})  # for tearDown

    def test_executor_death_kills_the_ranks(self):
        pids = self.start(2)
        self.run_cell("#include <signal.h>\n#include <unistd.h>\nkill(getpid(), SIGKILL);")
        self.assertTrue(nbf_harness.wait_until(lambda: not any(alive(p) for p in pids), 10),
                        "rank workers outlived their executor")
        self.assertIn("No rank workers", stream_text(self.ok("%ranks status")))

    # ------------------------------------------------- two nodes, two kernels

    def test_two_nodes_form_one_group_and_rebuild_it_after_a_cut(self):
        b = self.two_nodes()
        out = self.on_both(b, "%%ranks\n#include <stdio.h>\n#include <unistd.h>\n"
                              "acc_t *acc = acc_new(NULL);\nfloat v = acc_rank(acc) + 1;\n"
                              "acc_all_reduce(acc, &v, 1, ACC_F32, ACC_SUM);\n"
                              'printf("world %d\\n", acc_world_size(acc));\nv')
        for node, (reply, outputs, _) in enumerate(out):
            self.assertEqual(reply["status"], "ok", reply)
            # each kernel's cell ran on its own node's ranks, the sum on all 4
            ranks = (0, 1) if node == 0 else (2, 3)
            self.assertEqual(sorted(results(outputs)), ["[rank %d] 1e+01" % k for k in ranks])
            self.assertEqual(stream_text(outputs).count("world 4"), 2)
        status = [stream_text(k.execute("%ranks status")[1]) for k in (self.k, b)]
        for node, text in enumerate(status):
            self.assertIn("one process group of world size 4: 2 nodes x 2 ranks; this is node %d"
                          % node, text)
            self.assertEqual(sorted(int(m) for m in re.findall(r"(?m)^(\d+)\s+\d+\s", text)),
                             [2 * node, 2 * node + 1], text)
        # node 0's kernel is interrupted while rank 1 never joins the
        # all-reduce the others wait in: both nodes end the cell
        out = self.on_both(b, '%%ranks\nfloat cut = 100;\nprintf("entered\\n"); fflush(stdout);\n'
                              "if (acc_rank(acc) != 1) acc_all_reduce(acc, &cut, 1, ACC_F32, "
                              "ACC_SUM);\nelse for (;;) pause();",
                           interrupt_when=lambda o: stream_text(o).count("entered") == 2)
        (r0, _, t0), (r1, _, t1) = out
        self.assertEqual((r0["ename"], r1["ename"]), ("KeyboardInterrupt", "KeyboardInterrupt"))
        self.assertLess(t0["idle"] - t0["interrupt"], 2.0)
        self.assertIn("node 0 was interrupted during this cell", r1["evalue"])
        for reply in (r0, r1):
            self.assertRegex("\n".join(reply["traceback"]),
                             r"every rank of the 2 nodes rebuilds its process groups at its next "
                             r"collective \(.* epoch \d+ agreed by the nodes")
        # the next collective runs on one new group of 4: 1+2+3+4, not the
        # cut call's 100s
        out = self.on_both(b, "%%ranks\nfloat w = acc_rank(acc) + 1;\n"
                              "acc_all_reduce(acc, &w, 1, ACC_F32, ACC_SUM);\nw")
        self.assert_each_rank(out, "1e+01")

    def test_two_nodes_a_crash_is_reported_on_both_and_restart_recovers(self):
        b = self.two_nodes()
        self.on_both(b, "%%ranks\n#include <unistd.h>\nacc_t *acc = acc_new(NULL);")
        out = self.on_both(b, "%%ranks\nfloat x = 1;\n"
                              "if (acc_rank(acc) == 3) { usleep(300000); *(volatile int *)0 = 1; }"
                              "\nacc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM);")
        (r0, _, t0), (r1, _, _) = out
        self.assertEqual((r0["ename"], r1["ename"]), ("RankFailed", "RankFailed"))
        self.assertIn("rank 3", r1["evalue"])
        # node 0's ranks waited on the dead rank's node: stopped, and told why
        self.assertLess(t0["idle"] - t0["sent"], 10.0)
        # (first, whether node 0's ranks were stopped or lost node 1's first)
        self.assertRegex(r0["evalue"], r"^rank 3 \(node 1, pid \d+\) was killed by signal 11 "
                                       r"\(SIGSEGV\)( on another node)? during this cell")
        for reply in (r0, r1):
            self.assertRegex("\n".join(reply["traceback"]),
                             r"cannot be used again \([^)]*rank [\d, ]+ dead on node 1[^)]*\): run "
                             r"%ranks restart on every node")
        status = stream_text(b.execute("%ranks status")[1])
        self.assertRegex(status, r"(?m)^3\s.*killed by signal 11")
        out = self.on_both(b, "%ranks restart")
        for reply, _, _ in out:
            self.assertEqual(reply["status"], "ok", reply)
        out = self.on_both(b, "%%ranks\nacc_t *acc2 = acc_new(NULL);\nfloat y = 1;\n"
                              "acc_all_reduce(acc2, &y, 1, ACC_F32, ACC_SUM);\ny")
        self.assert_each_rank(out, "4")


if __name__ == "__main__":
    unittest.main()
