"""%launch end to end on CPU, through the real kernel: workers inherit the
cells' globals, get the per-rank environment, stream their output; a worker
that crashes, exits or returns non-zero fails the cell with its rank, pid,
cause and stderr tail, and never hangs its blocked peers; interrupts stop
everything; restarts; bad options; a busy port; two kernels as two nodes;
CUDA-initialization detection with a fake driver (see fake_cuda.c)."""
import os
import re
import socket
import threading
import time
import unittest

import nbf_harness as h

DEFS = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int magic = 0;
magic = 42;
int rank_env(void) { return atoi(getenv("RANK")); }
int show(void) {
    printf("rank=%s local=%s world=%s lws=%s node=%s addr=%s port=%s mp=%s magic=%d\n",
           getenv("RANK"), getenv("LOCAL_RANK"), getenv("WORLD_SIZE"), getenv("LOCAL_WORLD_SIZE"),
           getenv("NODE_RANK"), getenv("MASTER_ADDR"), getenv("MASTER_PORT"),
           getenv("ACCELERATE_MIXED_PRECISION"), magic);
    return 0;
}
int fail_on(int bad_rank, int how) {
    if (rank_env() != bad_rank) { while (1) pause(); }   /* blocked peer */
    usleep(200000);
    fprintf(stderr, "rank %d is about to fail\n", bad_rank);
    if (how == 0) raise(SIGSEGV);
    if (how == 1) exit(3);
    return 1;
}
int flaky(void) {
    if (atoi(getenv("NBFORK_RESTART_COUNT")) == 0 && rank_env() == 1) return 5;
    printf("rank %d ok after %s restarts\n", rank_env(), getenv("NBFORK_RESTART_COUNT"));
    return 0;
}
void forever(void) { while (1) sleep(1); }
int chatty(void) {
    for (int i = 0; i < 5; i++) { printf("rank %d line %d\n", rank_env(), i); fflush(stdout); usleep(20000); }
    fprintf(stderr, "rank %d done\n", rank_env());
    sleep(1);  /* the lines must reach the notebook before this ends */
    return 0;
}
int null_ptr(const int *p) { return p == 0; }   /* 0 for any non-null p */
int reduce_ones(void) {
    acc_t *acc = acc_new(NULL);
    if (!acc) return 1;
    float one = 1;
    if (acc_all_reduce(acc, &one, 1, ACC_F32, ACC_SUM) != ACC_OK) return 2;
    printf("rank %d of %d sum %g\n", acc_rank(acc), acc_world_size(acc), one);
    acc_destroy(&acc);
    return 0;
}
"""


class KernelWithDefs(unittest.TestCase):
    """One kernel per test class (started with `kernel_env`) in which DEFS ran."""
    kernel_env = None

    @classmethod
    def setUpClass(cls):
        cls.k = h.Kernel(env=cls.kernel_env)
        reply, out = cls.k.execute(DEFS)
        assert reply["status"] == "ok", h.errors(out)

    @classmethod
    def tearDownClass(cls):
        cls.k.close()


class LauncherTests(KernelWithDefs):
    def launch(self, call, opts="", timeout=60, **kw):
        port = h.free_port()
        return self.k.execute("%%launch %s num_processes=%s use_port=%d %s" % (
            call, kw.pop("n", 2), port, opts), timeout=timeout, **kw)

    def test_globals_and_environment(self):
        reply, out = self.launch("show()", "mixed_precision=bf16", n=3)
        self.assertEqual(reply["status"], "ok", h.errors(out))
        text = h.stream_text(out)
        self.assertIn("Launching training on 3 CPU processes.", text)
        lines = sorted(l for l in text.splitlines() if l.startswith("rank="))
        self.assertEqual(len(lines), 3, text)
        for r, line in enumerate(lines):
            self.assertIn("rank=%d local=%d world=3 lws=3 node=0 addr=127.0.0.1" % (r, r), line)
            self.assertIn("mp=bf16 magic=42", line)

    def test_live_output_in_order_per_rank(self):
        port = h.free_port()
        msg_id = self.k.kc.execute("%%launch chatty() num_processes=2 use_port=%d" % port)
        seen, t_line, t_idle = "", None, None
        while t_idle is None:
            m = self.k.kc.get_iopub_msg(timeout=30)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout":
                seen += m["content"]["text"]
                if "line 4" in seen and t_line is None and seen.count("line 4") == 2:
                    t_line = time.time()
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                t_idle = time.time()
        self.k.kc.get_shell_msg(timeout=30)
        self.assertIsNotNone(t_line, seen)
        self.assertGreater(t_idle - t_line, 0.5, "worker output was not forwarded live")
        for r in (0, 1):
            lines = [l for l in seen.splitlines() if l.startswith("rank %d line" % r)]
            self.assertEqual(lines, ["rank %d line %d" % (r, i) for i in range(5)])

    def test_prefix_template(self):
        reply, out = self.launch("show()", "log_line_prefix_template='[rank{rank}]: '")
        self.assertEqual(reply["status"], "ok")
        text = h.stream_text(out)
        self.assertRegex(text, r"(?m)^\[rank0\]: rank=0 ")
        self.assertRegex(text, r"(?m)^\[rank1\]: rank=1 ")

    def check_failure(self, how, pattern):
        t0 = time.time()
        reply, out = self.launch("fail_on(1, %d)" % how)
        self.assertLess(time.time() - t0, 10, "the blocked peer was not stopped in time")
        self.assertEqual(reply["status"], "error")
        errs = h.errors(out)
        self.assertEqual(len(errs), 1)
        self.assertEqual(errs[0]["ename"], "WorkerFailed")
        self.assertRegex(errs[0]["evalue"], r"rank 1 \(local rank 1, pid \d+\) " + pattern)
        self.assertIn("rank 1 is about to fail", "\n".join(errs[0]["traceback"]))
        self.assertNotIn("rank 0 (", errs[0]["evalue"])  # the stopped peer is no culprit

    def test_segfault(self):
        self.check_failure(0, r"was killed by signal 11 \(SIGSEGV")

    def test_exit_code(self):
        self.check_failure(1, r"exited with code 3")

    def test_nonzero_return(self):
        self.check_failure(2, r"exited with code 1")

    def test_rerun_after_failure_same_port(self):
        port = h.free_port()
        reply, _ = self.k.execute("%%launch fail_on(0, 1) num_processes=2 use_port=%d" % port)
        self.assertEqual(reply["status"], "error")
        reply, out = self.k.execute("%%launch reduce_ones() num_processes=2 use_port=%d" % port)
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertEqual(h.stream_text(out).count("of 2 sum 2"), 2)

    def test_max_restarts(self):
        reply, out = self.launch("flaky()", "max_restarts=2")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        text = h.stream_text(out)
        self.assertIn("restart 1/2", text)
        self.assertIn("rank 1 ok after 1 restarts", text)

    def test_interrupt(self):
        t0 = time.time()
        reply, out = self.launch("forever()", interrupt_after=1.5)
        self.assertLess(time.time() - t0, 1.5 + 3)
        self.assertEqual(reply["status"], "error")
        self.assertEqual(h.errors(out)[0]["ename"], "KeyboardInterrupt")
        reply, out = self.launch("reduce_ones()")
        self.assertEqual(reply["status"], "ok", h.errors(out))

    def test_collective_two_processes(self):
        reply, out = self.launch("reduce_ones()")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertEqual(h.stream_text(out).count("of 2 sum 2"), 2)

    def test_bad_options(self):
        cases = [
            ("%launch show() num_processes=2 bogus=1", "unknown option 'bogus'"),
            ("%launch show()", "num_processes is missing"),
            ("%launch show() num_processes=0", "bad value for num_processes: '0'"),
            ("%launch show() num_processes=2 mixed_precision=fp8", "no, fp16 or bf16"),
            ("%launch show() num_processes=2 node_rank=2 num_nodes=2", "node_rank=2 is not below"),
            ("%launch show() num_processes=2 use_port=abc", "bad value for use_port"),
            ("%launch show() num_processes=2 monitor_interval=-1", "monitor_interval"),
            ("%launch show num_processes=2", "must be called with its arguments"),
        ]
        for code, expect in cases:
            reply, out = self.k.execute(code)
            self.assertEqual(reply["status"], "error", code)
            errs = h.errors(out)
            self.assertEqual(len(errs), 1, code)
            self.assertEqual(errs[0]["ename"], "LaunchError", code)
            self.assertIn(expect, errs[0]["evalue"], code)

    def test_call_type_checked(self):
        reply, out = self.k.execute("%launch show(1, 2) num_processes=2")
        self.assertEqual(reply["status"], "error")
        err = h.errors(out)[0]
        self.assertEqual(err["ename"], "CompileError")
        # the system compiler's diagnostic (TinyCC's names no function)
        self.assertIn("too many arguments to function 'show'", err["evalue"])

    def test_call_with_a_warning_runs_with_the_system_compiler(self):
        # TinyCC (-Werror) declines the thunk; GCC compiles it with a
        # warning, which the cell shows, and the launch goes on
        reply, out = self.launch("null_ptr(8)")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertIn("makes pointer from integer without a cast", h.stream_text(out, "stderr"))

    def test_port_in_use(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        try:
            reply, out = self.k.execute("%%launch show() num_processes=2 use_port=%d" % port)
        finally:
            s.close()
        errs = h.errors(out)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("use_port=%d" % port, errs[0]["evalue"])
        self.assertIn("pass another port", "\n".join(errs[0]["traceback"]))


class SystemCompilerThunkTests(KernelWithDefs):
    """NBFORK_JIT=0: every thunk goes through the system compiler."""
    kernel_env = {"NBFORK_JIT": "0"}

    def test_launch_without_jit(self):
        reply, out = self.k.execute("%%launch reduce_ones() num_processes=2 use_port=%d" %
                                    h.free_port())
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertEqual(h.stream_text(out).count("of 2 sum 2"), 2)


class RendezvousTimeoutTests(KernelWithDefs):
    def test_missing_node_is_named(self):
        t0 = time.time()
        reply, out = self.k.execute(
            "%%launch reduce_ones() num_processes=1 num_nodes=3 node_rank=0 use_port=%d "
            "rdzv_timeout=2 rdzv_id=lonely" % h.free_port())
        self.assertLess(time.time() - t0, 8)
        errs = h.errors(out)
        self.assertEqual(len(errs), 1)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("nodes 1, 2 of num_nodes=3 did not join within rdzv_timeout=2 s",
                      errs[0]["evalue"])

    def test_secret_store(self):
        # every rank joins through a store that admits only the secret's holders
        reply, out = self.k.execute("%%launch reduce_ones() num_processes=2 use_port=%d "
                                    "rdzv_conf='secret=s3cr3t'" % h.free_port())
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertEqual(h.stream_text(out).count("of 2 sum 2"), 2)

    def test_master_unreachable(self):
        reply, out = self.k.execute(
            "%%launch reduce_ones() num_processes=1 num_nodes=2 node_rank=1 use_port=%d "
            "rdzv_timeout=2" % h.free_port())
        errs = h.errors(out)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("node 0's store at 127.0.0.1", errs[0]["evalue"])
        # and the kernel is usable at once
        reply, out = self.k.execute("%%launch reduce_ones() num_processes=2 use_port=%d" %
                                    h.free_port())
        self.assertEqual(reply["status"], "ok", h.errors(out))


class TwoNodeTests(unittest.TestCase):
    def test_wrong_secret_is_refused(self):
        a, b = h.Kernel(), h.Kernel()
        try:
            for k in (a, b):
                self.assertEqual(k.execute(DEFS)[0]["status"], "ok")
            port = h.free_port()
            results = {}

            def run(k, node, secret):
                results[node] = k.execute(
                    "%%launch reduce_ones() num_processes=1 num_nodes=2 node_rank=%d use_port=%d "
                    "rdzv_timeout=3 rdzv_conf=secret=%s" % (node, port, secret), timeout=60)

            threads = [threading.Thread(target=run, args=(a, 0, "right")),
                       threading.Thread(target=run, args=(b, 1, "wrong"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            e0, e1 = h.errors(results[0][1]), h.errors(results[1][1])
            self.assertIn("node 1 of num_nodes=2 did not join", e0[0]["evalue"])
            self.assertIn("same rendezvous secret", e1[0]["evalue"])
        finally:
            a.close()
            b.close()

    def test_two_kernels_two_nodes(self):
        a, b = h.Kernel(), h.Kernel()
        try:
            for k in (a, b):
                reply, out = k.execute(DEFS)
                self.assertEqual(reply["status"], "ok", h.errors(out))
            port = h.free_port()
            results = {}

            def run(k, node):
                results[node] = k.execute(
                    "%%launch reduce_ones() num_processes=2 num_nodes=2 node_rank=%d "
                    "use_port=%d rdzv_id=twonode rdzv_conf=secret=shared" % (node, port),
                    timeout=120)

            threads = [threading.Thread(target=run, args=(k, n)) for n, k in ((0, a), (1, b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            text = ""
            for node in (0, 1):
                reply, out = results[node]
                self.assertEqual(reply["status"], "ok", h.errors(out))
                text += h.stream_text(out)
            ranks = sorted(int(r) for r in re.findall(r"rank (\d) of 4 sum 4", text))
            self.assertEqual(ranks, [0, 1, 2, 3], text)
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    unittest.main()
