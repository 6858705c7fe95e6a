"""%launch end to end on CPU, through the real kernel: workers inherit the
cells' globals, get the per-rank environment, stream their output; a worker
that crashes, exits or returns non-zero fails the cell with its rank, pid,
cause and stderr tail, and never hangs its blocked peers; interrupts stop
everything; restarts; bad options; a busy port; two kernels as two nodes;
CUDA-initialization detection with a fake driver (see fake_cuda.c); the fork
guard (no %launch from a multi-threaded kernel process).

Timing: the tests wait on events (a line on iopub, a file the test creates),
never on "it took between A and B seconds"; the only time bounds say "it ends,
never hangs" and are generous for a loaded 2-core machine. Ports: a port that
was free when chosen can be taken before the launch binds it, so every launch
on a chosen port goes through `on_free_port`, which picks another one and runs
the launch again when the store could not bind."""
import os
import queue
import re
import signal
import socket
import tempfile
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
void forever(void) { printf("rank %d ready\n", rank_env()); fflush(stdout); while (1) sleep(1); }
int chatty(const char *go) {
    for (int i = 0; i < 5; i++) { printf("rank %d line %d\n", rank_env(), i); fflush(stdout); usleep(20000); }
    fprintf(stderr, "rank %d done\n", rank_env());
    /* the lines must reach the notebook before this ends: wait until the
     * test, having seen them, creates `go` (at most 120 s) */
    for (int i = 0; i < 12000 && access(go, F_OK) != 0; i++) usleep(10000);
    return 0;
}
int null_ptr(const int *p) { return p == 0; }   /* 0 for any non-null p */
int partial_line(void) {  /* no newline; fails on the first run */
    printf("partial %s", getenv("NBFORK_RESTART_COUNT"));
    fflush(stdout);
    return atoi(getenv("NBFORK_RESTART_COUNT")) == 0;
}
#include <pthread.h>
static int guard_pipe[2];
static pthread_t guard_thread;
static void *guard_wait(void *arg) { char c; while (read(guard_pipe[0], &c, 1) < 0) {} return arg; }
int start_thread(void) { if (pipe(guard_pipe)) return -1; return pthread_create(&guard_thread, 0, guard_wait, 0); }
int stop_thread(void) { close(guard_pipe[1]); int r = pthread_join(guard_thread, 0); close(guard_pipe[0]); return r; }
""" + h.REDUCE_ONES_C

# Rank 1 stops taking part after 3 all-reduces; rank 0 waits in #4.
STUCK_C = r"""
int stuck(void) {
    acc_t *acc = acc_new(NULL);
    if (!acc) return 1;
    static float x[16];
    for (int i = 0; i < 3; i++) acc_all_reduce(acc, x, 16, ACC_F32, ACC_SUM);
    if (acc_rank(acc) == 1) { printf("rank 1 spins\n"); fflush(stdout); for (;;) usleep(1000); }
    printf("rank 0 waits\n"); fflush(stdout);
    acc_all_reduce(acc, x, 16, ACC_F32, ACC_SUM);
    return 0;
}
"""

# LaunchError texts of a store that could not bind its port.
PORT_TAKEN = ("cannot be used for the rendezvous store", "cannot host the rendezvous store")


def port_taken(out):
    return any(p in e["evalue"] for e in h.errors(out) for p in PORT_TAKEN)


def on_free_port(run, tries=5):
    """run(port) -> (reply, outputs, ...), or a list of them (one per kernel).
    A port free when h.free_port() chose it may be taken (a parallel test)
    before the launch binds it: then choose another and run again."""
    for _ in range(tries):
        result = run(h.free_port())
        if not any(port_taken(r[1]) for r in
                   (result if isinstance(result, list) else [result])):
            break
    return result


class Cell:
    """A cell sent to kernel k, read message by message, for tests that act
    when something happens (a line appears) rather than after a delay."""

    def __init__(self, k, code):
        self.k, self.msg_id, self.outputs, self.idle_at = k, k.kc.execute(code), [], None

    def wait_for(self, cond, timeout=120):
        """Read iopub until cond(stdout so far) holds: the time it did, or
        None when the cell went idle first."""
        deadline = time.time() + timeout
        while self.idle_at is None:
            if time.time() > deadline:
                raise TimeoutError("no event within %s s: %r" % (timeout, self.outputs[-5:]))
            try:
                m = self.k.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if m["parent_header"].get("msg_id") != self.msg_id:
                continue
            self.outputs.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                self.idle_at = time.time()
            elif m["msg_type"] == "stream" and cond(h.stream_text(self.outputs)):
                return time.time()
        return None

    def finish(self, timeout=120):
        """Read on until idle; (reply content, iopub messages)."""
        self.wait_for(lambda seen: False, timeout)
        reply = self.k.kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != self.msg_id:
            reply = self.k.kc.get_shell_msg(timeout=timeout)
        return reply["content"], self.outputs


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

    def launch(self, call, opts="", timeout=120, **kw):
        n = kw.pop("n", 2)
        return on_free_port(lambda port: self.k.execute(
            "%%launch %s num_processes=%s use_port=%d %s" % (call, n, port, opts),
            timeout=timeout, **kw))

    def assert_reduced(self, reply, out, world=2):
        """The launch of reduce_ones() ran: every rank summed world ones."""
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertEqual(h.stream_text(out).count("of %d sum %d" % (world, world)), world)


class LauncherTests(KernelWithDefs):
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
        # The workers print, then wait for a file the test creates only
        # after it saw every line: lines seen before that were forwarded
        # live, however slow the machine is.
        with tempfile.TemporaryDirectory() as d:
            def run(port):
                go = os.path.join(d, "go%d" % port)
                cell = Cell(self.k, '%%launch chatty("%s") num_processes=2 use_port=%d' %
                            (go, port))
                t_line = cell.wait_for(lambda seen: seen.count("line 4") == 2)
                open(go, "w").close()
                reply, out = cell.finish()
                return reply, out, t_line, cell.idle_at

            reply, out, t_line, t_idle = on_free_port(run)
        seen = h.stream_text(out)
        self.assertIsNotNone(t_line, seen)
        self.assertGreater(t_idle - t_line, 0, "worker output was not forwarded live")
        self.assertEqual(reply["status"], "ok", h.errors(out))
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
        # it ends (the blocked peer is stopped), with a bound a loaded machine meets
        self.assertLess(time.time() - t0, 90, "the blocked peer was not stopped in time")
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
        def run(port):
            first = self.k.execute("%%launch fail_on(0, 1) num_processes=2 use_port=%d" % port)
            if port_taken(first[1]):
                return first
            return [first, self.k.execute(
                "%%launch reduce_ones() num_processes=2 use_port=%d" % port)]

        (reply, _), (reply2, out) = on_free_port(run)
        self.assertEqual(reply["status"], "error")
        self.assert_reduced(reply2, out)

    def test_max_restarts(self):
        reply, out = self.launch("flaky()", "max_restarts=2")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        text = h.stream_text(out)
        self.assertIn("restart 1/2", text)
        self.assertIn("rank 1 ok after 1 restarts", text)

    def test_partial_line_is_ended_before_the_launchers_message(self):
        reply, out = self.launch("partial_line()", "max_restarts=1", n=1)
        self.assertEqual(reply["status"], "ok", h.errors(out))
        text = h.stream_text(out)
        self.assertIn("partial 0\nrestart 1/1: starting the worker group again\n", text)
        self.assertTrue(text.endswith("partial 1\n"), text)

    def test_interrupt(self):
        # interrupt once both workers run (an event, not a delay)
        def run(port):
            cell = Cell(self.k, "%%launch forever() num_processes=2 use_port=%d" % port)
            t_ready = cell.wait_for(lambda seen: seen.count(" ready") == 2)
            t0 = time.time()
            if t_ready is not None:
                self.k.km.interrupt_kernel()
            reply, out = cell.finish()
            return reply, out, t_ready, cell.idle_at - t0

        reply, out, t_ready, stop_s = on_free_port(run)
        self.assertIsNotNone(t_ready, h.errors(out))
        self.assertLess(stop_s, 60)  # stopped and reaped: it ends, never hangs
        self.assertEqual(reply["status"], "error")
        self.assertEqual(h.errors(out)[0]["ename"], "KeyboardInterrupt")
        reply, out = self.launch("reduce_ones()")
        self.assertEqual(reply["status"], "ok", h.errors(out))

    def test_status_file_and_sigquit_show_where_every_rank_is(self):
        # while a %launch cell runs, <work directory>/ranks-status says
        # where every rank is (rewritten each second), and SIGQUIT to the
        # kernel's executor prints the same view into the cell's output;
        # the file is gone once the group ended. Before: neither existed.
        reply, out = self.k.execute(STUCK_C)
        self.assertEqual(reply["status"], "ok", h.errors(out))
        kernel = self.k.km.provisioner.process.pid
        execs = [int(c) for t in os.listdir("/proc/%d/task" % kernel)
                 for c in open("/proc/%d/task/%s/children" % (kernel, t)).read().split()]
        self.assertEqual(len(execs), 1, execs)
        ex = execs[0]
        tmp = os.environ.get("TMPDIR", "/tmp")
        dirs = [d for d in os.listdir(tmp) if d.startswith("nbfork-%d-" % ex)]
        self.assertEqual(len(dirs), 1, dirs)
        status = os.path.join(tmp, dirs[0], "ranks-status")

        def run(port):
            cell = Cell(self.k, "%%launch stuck() num_processes=2 use_port=%d" % port)
            ready = cell.wait_for(lambda seen: "rank 1 spins" in seen and "rank 0 waits" in seen)
            view = ""
            if ready is not None:
                def current():
                    nonlocal view
                    try:
                        with open(status) as f:
                            view = f.read()
                    except FileNotFoundError:
                        return False
                    # the file is rewritten each second: one written before
                    # rank 1's all_reduce #3 returned shows it still there
                    return ("rank 0: in all_reduce #4 (f32 x 16) for" in view and
                            "rank 1: running its own code" in view)
                h.wait_until(current, timeout=30)
                os.kill(ex, signal.SIGQUIT)
                time.sleep(1.0)  # the monitor's next tick prints it
                self.k.km.interrupt_kernel()
            reply, out = cell.finish()
            return reply, out, view

        reply, out, view = on_free_port(run)
        print(view)
        self.assertIn("nbfork: where each rank is, ", view)
        self.assertIn("(running; their state records):", view)
        self.assertRegex(view, r"  rank 0: in all_reduce #4 \(f32 x 16\) for \d+\.\d s\n")
        self.assertRegex(view, r"  rank 1: running its own code for \d+\.\d s, after all_reduce #3")
        self.assertIn("  -> rank 1 did not reach all_reduce #4 (f32 x 16)", view)
        text = h.stream_text(out, "stdout") + h.stream_text(out, "stderr")
        self.assertIn("(SIGQUIT; their state records):", text)
        self.assertEqual(h.errors(out)[0]["ename"], "KeyboardInterrupt")
        self.assertFalse(os.path.exists(status))  # no view once no group runs

    def test_collective_two_processes(self):
        self.assert_reduced(*self.launch("reduce_ones()"))

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

    def test_call_with_an_int_for_a_pointer_is_a_compile_error(self):
        # TinyCC (-Werror) declines the thunk; GCC's warning is an error in
        # a thunk (issue 14: the launch went on, and workers crashed)
        reply, out = self.launch("null_ptr(8)")
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertIn("makes pointer from integer without a cast", reply["evalue"])
        self.assertNotIn("Launching training", h.stream_text(out))

    def test_fork_guard_threads(self):
        # a cell starts a thread: %launch refuses, naming the cause and the fix
        reply, out = self.k.execute("start_thread();")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        try:
            reply, out = self.launch("show()")
            self.assertEqual(reply["status"], "error")
            errs = h.errors(out)
            self.assertEqual(len(errs), 1, errs)
            self.assertEqual(errs[0]["ename"], "LaunchError")
            self.assertIn("runs 2 threads", errs[0]["evalue"])
            self.assertIn("pthread_join", "\n".join(errs[0]["traceback"]))
            self.assertNotIn("Launching training", h.stream_text(out))
        finally:
            reply, out = self.k.execute("stop_thread();")
        self.assertEqual(reply["status"], "ok", h.errors(out))
        # the thread is gone: %launch works again (its task entry can
        # outlive pthread_join by a moment, so allow a few tries)
        for _ in range(20):
            reply, out = self.launch("show()")
            if reply["status"] == "ok" or "threads" not in str(h.errors(out)):
                break
            time.sleep(0.1)
        self.assertEqual(reply["status"], "ok", h.errors(out))
        self.assertIn("Launching training on 2 CPU processes.", h.stream_text(out))

    def test_unresolvable_master_addr_is_named(self):
        reply, out = self.k.execute("%launch show() num_processes=2 num_nodes=2 node_rank=1 "
                                    "master_addr=nbf-no-such-host.invalid use_port=29999")
        errs = h.errors(out)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("master_addr=nbf-no-such-host.invalid does not resolve: ",
                      errs[0]["evalue"])
        self.assertIn("Give node 0's IP address", "\n".join(errs[0]["traceback"]))

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
        self.assert_reduced(*self.launch("reduce_ones()"))


class RendezvousTimeoutTests(KernelWithDefs):
    def test_missing_node_is_named(self):
        t0 = time.time()
        reply, out = self.launch("reduce_ones()",
                                 "num_nodes=3 node_rank=0 rdzv_timeout=2 rdzv_id=lonely", n=1)
        self.assertLess(time.time() - t0, 90)  # rdzv_timeout=2 ends it: never hangs
        errs = h.errors(out)
        self.assertEqual(len(errs), 1)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("nodes 1, 2 of num_nodes=3 did not join within rdzv_timeout=2 s",
                      errs[0]["evalue"])

    def test_secret_store(self):
        # every rank joins through a store that admits only the secret's holders
        self.assert_reduced(*self.launch("reduce_ones()", "rdzv_conf='secret=s3cr3t'"))

    def test_master_unreachable(self):
        reply, out = self.launch("reduce_ones()", "num_nodes=2 node_rank=1 rdzv_timeout=2", n=1)
        errs = h.errors(out)
        self.assertEqual(errs[0]["ename"], "LaunchError")
        self.assertIn("node 0's store at 127.0.0.1", errs[0]["evalue"])
        # and the kernel is usable at once
        reply, out = self.launch("reduce_ones()")
        self.assertEqual(reply["status"], "ok", h.errors(out))


class TwoNodeTests(unittest.TestCase):
    def test_wrong_secret_is_refused(self):
        a, b = h.Kernel(), h.Kernel()
        try:
            for k in (a, b):
                self.assertEqual(k.execute(DEFS)[0]["status"], "ok")
            def run(k, node, secret, port):
                return k.execute(
                    "%%launch reduce_ones() num_processes=1 num_nodes=2 node_rank=%d use_port=%d "
                    "rdzv_timeout=3 rdzv_conf=secret=%s" % (node, port, secret), timeout=120)

            results = on_free_port(lambda port: h.at_once(
                lambda: run(a, 0, "right", port), lambda: run(b, 1, "wrong", port)))
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
            def run(k, node, port):
                return k.execute(
                    "%%launch reduce_ones() num_processes=2 num_nodes=2 node_rank=%d "
                    "use_port=%d rdzv_id=twonode rdzv_conf=secret=shared" % (node, port),
                    timeout=180)

            results = on_free_port(lambda port: h.at_once(lambda: run(a, 0, port),
                                                          lambda: run(b, 1, port)))
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
