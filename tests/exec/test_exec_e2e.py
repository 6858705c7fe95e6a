#!/usr/bin/python3
"""End-to-end tests of the REAL nbfork kernel and executor (the C cell
engine), driven through jupyter_client, nbclient and jupyter console.

The kernel is the build tree's (NBFORK_BUILD_DIR), started through a private
kernelspec by tests/e2e/nbf_harness.py's Kernel class. Each test method is
its own ctest test (tests/exec/CMakeLists.txt); one runs by hand with

  NBFORK_BUILD_DIR=build PYTHONPATH=tests/e2e:tests/exec \\
    /usr/bin/python3 -m unittest test_exec_e2e.ExecutorE2ETest.test_hello_world
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

import nbf_harness
from nbf_harness import Kernel, errors, results, stream_text

TIMEOUT = 60
# Upper bound, seconds, from an interrupt to status idle: what it proves
# ("stopped at once", "not the compiler's 30 s") holds far below it; the
# state checks after each interrupt prove the executor was not killed.
INTERRUPT_BOUND_S = 15


def find_nvcc():
    """nvcc as the executor finds it (ex_compile_find_nvcc), or None."""
    env = os.environ.get("NBFORK_NVCC")
    if env:
        return env if os.access(env, os.X_OK) else shutil.which(env)
    for cand in [shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc"),
                 "/usr/local/cuda/bin/nvcc"]:
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class ExecutorE2ETest(nbf_harness.KernelTestCase):
    kernel_env = None
    workdir_prefix = "nbfork-exec-e2e-"
    cell_timeout = TIMEOUT

    def kernel_environ(self, workdir):
        env = {"NBFORK_WORKDIR": os.path.join(workdir, "cells"),
               "NBFORK_KEEP_WORKDIR": "1"}
        env.update(self.kernel_env or {})
        return env

    # ------------------------------------------------------------ helpers

    def ok(self, code, **kw):
        """Run a cell that must succeed; returns its iopub messages."""
        outputs = self.run_ok(code, **kw)[1]
        self.assertEqual(errors(outputs), [])
        return outputs

    def value(self, code):
        """text/plain of the cell's execute_result (exactly one)."""
        r = results(self.ok(code))
        self.assertEqual(len(r), 1, "expected one execute_result for %r, got %r" % (code, r))
        return r[0]

    def shell(self, msg_id):
        return nbf_harness.shell_reply(self.kc, msg_id, TIMEOUT)["content"]

    def objects(self):
        return sorted(glob.glob(os.path.join(self.workdir, "cells", "*.so")))

    # -------------------------------------------------------------- cells

    def test_hello_world(self):
        reply, outputs, _, _ = self.run_cell('#include <stdio.h>\nprintf("hello, world\\n");')
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(outputs[0]["msg_type"], "status")
        self.assertEqual(outputs[0]["content"]["execution_state"], "busy")
        self.assertEqual(outputs[1]["msg_type"], "execute_input")
        self.assertEqual(stream_text(outputs), "hello, world\n")
        self.assertEqual(stream_text(outputs, "stderr"), "")
        self.assertEqual(results(outputs), [])

    def test_output_streams_live_and_stderr(self):
        reply, outputs, _, times = self.run_cell(
            '#include <stdio.h>\n#include <unistd.h>\n'
            'printf("first\\n");\nfprintf(stderr, "to stderr\\n");\nusleep(800000);\n'
            'printf("second\\n");')
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(stream_text(outputs), "first\nsecond\n")
        self.assertEqual(stream_text(outputs, "stderr"), "to stderr\n")

    def test_output_arrives_while_the_cell_runs(self):
        # The cell prints "early", then waits until the test has seen it
        # (a file the test creates; 60 s at most), then prints "late". If
        # output only came when the cell ended, "early" would not be seen
        # before "late": an event order, whatever the load.
        seen = {}
        release = os.path.join(self.workdir, "release")
        msg_id = self.kc.execute(
            '#include <stdio.h>\n#include <unistd.h>\n'
            'printf("early\\n");\n'
            'for (int i = 0; i < 6000 && access("%s", F_OK) != 0; i++) usleep(10000);\n'
            'printf("late\\n");' % release)
        sent = time.monotonic()

        def on_poll(outputs):
            for m in outputs:
                if m["msg_type"] == "stream":
                    for line in m["content"]["text"].splitlines():
                        seen.setdefault(line, time.monotonic() - sent)
            if "early" in seen and "released" not in seen:
                open(release, "w").close()
                seen["released"] = time.monotonic() - sent

        nbf_harness.collect(self.kc, msg_id, TIMEOUT + 60, on_poll)
        self.shell(msg_id)
        self.assertIn("released", seen, "'early' was not streamed while the cell ran: %r" % seen)
        self.assertLess(seen["early"], seen["late"],
                        "'early' was not streamed before the cell ended: %r" % seen)
        self.assertLess(seen["released"], seen["late"], seen)

    def test_state_across_cells(self):
        self.ok("int counter = 41;")
        self.ok("int bump(int by) { counter += by; return counter; }")
        self.ok("counter++;")
        self.assertEqual(self.value("counter"), "42")
        self.assertEqual(self.value("bump(8)"), "50")
        self.ok("typedef struct { int x, y; } point;\n#define SCALE 10")
        self.assertEqual(self.value("point p = { 2, 3 };\np.x * SCALE + p.y"), "23")
        self.assertEqual(self.value("p.y"), "3")

    def test_rerun_replaces_definitions(self):
        self.ok("int sq(int x) { return x * x; }")
        self.ok("int call_sq(void) { return sq(3); }")
        self.assertEqual(self.value("sq(3)"), "9")
        # Re-running the defining cell with a new body replaces sq for every
        # cell compiled from now on ...
        self.ok("int sq(int x) { return x + 1; }")
        self.assertEqual(self.value("sq(3)"), "4")
        # ... while code compiled EARLIER keeps the version it was compiled
        # against: call_sq still calls the old sq (README, "Cells are C").
        self.assertEqual(self.value("call_sq()"), "9")
        # a global redefined with another type and value
        self.ok("int g = 1;")
        self.ok("double g = 2.5;")
        self.assertEqual(self.value("g"), "2.5")
        # re-running an unchanged cell gives its globals their initial values
        self.ok("int arr[3] = {1, 2, 3};\nint total;")
        self.ok("arr[0] = 100; total = 7;")
        self.ok("int arr[3] = {1, 2, 3};\nint total;")
        self.assertEqual(self.value("arr[0] + total"), "1")

    def test_execute_result_values(self):
        self.ok("int j = 5;")
        reply, outputs, _, _ = self.run_cell("j")
        self.assertEqual(results(outputs), ["5"])
        er = [m for m in outputs if m["msg_type"] == "execute_result"][0]
        self.assertEqual(er["content"]["execution_count"], reply["execution_count"])
        self.assertEqual(self.value("2.5 * 2"), "5")
        self.assertEqual(self.value("1.0 / 4"), "0.25")
        self.assertEqual(self.value('"abc"'), '"abc"')
        self.assertEqual(self.value('char *s = "hi";\ns'), '"hi"')
        self.assertRegex(self.value("&j"), r"^0x[0-9a-f]+$")
        self.assertEqual(self.value("(void *)0"), "NULL")
        self.assertEqual(self.value("-7L"), "-7")
        self.assertEqual(self.value("'A'"), "65")  # a char literal is an int in C
        self.assertEqual(self.value("(char)'A'"), "'A' (65)")
        # a void last expression and a statement show nothing
        self.assertEqual(results(self.ok("void f(void) {}\nf()")), [])
        self.assertEqual(results(self.ok("j;")), [])

    def test_compile_error_shape(self):
        self.ok("int before = 1;")
        reply, outputs, _, _ = self.run_cell("int ok = 1;\nint bad = undefined_name + 1;\nok")
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["ename"], "CompileError")
        errs = errors(outputs)
        self.assertEqual(len(errs), 1, errs)
        e = errs[0]
        self.assertEqual(e["ename"], "CompileError")
        self.assertNotIn("\n", e["evalue"])
        self.assertIn("undefined_name", e["evalue"])
        self.assertRegex(e["evalue"], r"^cell\[%d\]:2:\d+: error:" % reply["execution_count"])
        self.assertTrue(any(re.match(r"cell\[%d\]:2:\d+: error:" % reply["execution_count"], t)
                            for t in e["traceback"]), e["traceback"])
        for t in e["traceback"]:
            self.assertNotIn("__nbf", t)
            self.assertNotIn("<nbfork>", t)
        self.assertEqual(stream_text(outputs, "stderr"), "")
        self.assertEqual(stream_text(outputs), "")
        self.assertEqual(reply["ename"], e["ename"])
        self.assertEqual(reply["evalue"], e["evalue"])
        # nothing of the failed cell was kept; earlier state was
        self.assertEqual(self.value("before"), "1")
        reply, _, _, _ = self.run_cell("ok")
        self.assertEqual(reply["status"], "error")

    def test_unbalanced_cell_is_one_compile_error(self):
        reply, outputs, _, _ = self.run_cell("int f(void) {\n  return 1;\n")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertEqual(len(errors(outputs)), 1)
        self.assertIn("not closed", reply["evalue"])

    def test_link_error(self):
        reply, outputs, _, _ = self.run_cell("int nowhere(void);\nnowhere()")
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["ename"], "LinkError")
        self.assertEqual(len(errors(outputs)), 1)
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]: undefined function: nowhere$")
        self.assertEqual(self.value("1 + 1"), "2")

    def test_crash_survival(self):
        self.ok("int lost = 3;")
        reply, outputs, _, _ = self.run_cell("*(volatile int *)0 = 1;")
        self.assertEqual(reply["status"], "error")
        errs = errors(outputs)
        self.assertEqual(len(errs), 1)
        self.assertIn("SIGSEGV", errs[0]["ename"] + errs[0]["evalue"])
        self.assertIn("lost", errs[0]["evalue"])
        # the kernel is alive, with a fresh executor
        self.assertEqual(self.value("6 * 7"), "42")
        reply, _, _, _ = self.run_cell("lost")
        self.assertEqual(reply["ename"], "CompileError")

    def test_abort_names_the_signal(self):
        reply, outputs, _, _ = self.run_cell("#include <stdlib.h>\nabort();")
        self.assertEqual(len(errors(outputs)), 1)
        self.assertIn("SIGABRT", reply["ename"] + reply["evalue"])
        self.assertEqual(self.value("1"), "1")

    def test_interrupt_infinite_loop(self):
        self.ok("int kept = 7;")
        # interrupt once the loop runs (the cell said so), not after a guess;
        # the surviving state below proves the executor was not killed
        reply, outputs, _, times = self.run_cell(
            '#include <stdio.h>\nprintf("looping\\n");\nfflush(stdout);\nwhile (1) {}',
            interrupt_when=lambda outputs: "looping" in stream_text(outputs))
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertLess(times["idle"] - times["interrupt"], INTERRUPT_BOUND_S)
        self.assertEqual(len(errors(outputs)), 1)
        # the state survived: no new executor
        self.assertEqual(self.value("kept"), "7")
        self.assertEqual(self.value("kept + 1"), "8")

    def test_interrupt_while_compiling(self):
        # a compiler that takes 30 s (a wrapper around cc): the interrupt
        # stops it at once, and the state of earlier cells is kept
        slow = os.path.join(self.workdir, "slow-cc")
        started = os.path.join(self.workdir, "cc-started")
        with open(slow, "w") as f:
            # (%cflags' probe, cell_flags*, compiles at once)
            f.write('#!/bin/sh\ncase "$*" in *cell_flags*) exec cc "$@" ;; esac\n'
                    'case "$1" in -print*) ;; *) touch "%s"; sleep 30 ;; esac\n'
                    'exec cc "$@"\n' % started)
        os.chmod(slow, 0o755)
        self.k.close()
        self.k = Kernel(env={"NBFORK_CC": slow})
        self.kc = self.k.kc
        self.ok("%cflags -DFAST")  # only its probe compiles, not a cell
        # interrupt once the compiler runs (it left a file), not after a guess
        reply, outputs, _, times = self.run_cell(
            "int compiled = 1;", interrupt_when=lambda outputs: os.path.exists(started))
        self.assertEqual(reply["ename"], "KeyboardInterrupt")
        self.assertIn("compiled", reply["evalue"])
        self.assertLess(times["idle"] - times["interrupt"], INTERRUPT_BOUND_S)  # not the 30 s
        self.assertEqual(len(errors(outputs)), 1)
        # the same executor answers (a killed one would have lost %cflags)
        self.assertIn("-DFAST", stream_text(self.ok("%cflags")))

    def test_input_request_scanf_and_fgets(self):
        reply, outputs, reqs, _ = self.run_cell(
            '#include <stdio.h>\nint n = 0;\nscanf("%d", &n);\nprintf("got %d\\n", n);',
            allow_stdin=True, answers=["42"])
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(len(reqs), 1)
        self.assertEqual(reqs[0]["msg_type"], "input_request")
        self.assertFalse(reqs[0]["content"]["password"])
        self.assertEqual(stream_text(outputs), "got 42\n")
        reply, outputs, reqs, _ = self.run_cell(
            '#include <string.h>\nchar line[64];\nfgets(line, sizeof line, stdin);\n'
            'line[strcspn(line, "\\n")] = 0;\nprintf("[%s]\\n", line);',
            allow_stdin=True, answers=["hello there"])
        self.assertEqual(len(reqs), 1)
        self.assertEqual(stream_text(outputs), "[hello there]\n")

    def test_stdin_without_allow_is_eof(self):
        reply, outputs, reqs, times = self.run_cell(
            '#include <stdio.h>\nint n = 5;\nint r = scanf("%d", &n);\n'
            'char buf[8];\nchar *g = fgets(buf, sizeof buf, stdin);\n'
            'printf("%d %d %s\\n", r, n, g ? "line" : "eof");', allow_stdin=False)
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(reqs, [])
        self.assertEqual(stream_text(outputs), "-1 5 eof\n")
        # end-of-file is not sticky: the next cell that may read, reads
        reply, outputs, reqs, _ = self.run_cell(
            'scanf("%d", &n);\nprintf("%d\\n", n);', allow_stdin=True, answers=["9"])
        self.assertEqual(len(reqs), 1)
        self.assertEqual(stream_text(outputs), "9\n")

    # ------------------------------------------------ requests about code

    def test_is_complete(self):
        for code, want in [("int x = 1;", "complete"),
                           ("int f(int x) {", "incomplete"),
                           ('printf("%d",\n', "incomplete"),
                           ("/* open comment", "incomplete"),
                           ("}", "invalid")]:
            reply = self.shell(self.kc.is_complete(code))
            self.assertEqual(reply["status"], want, code)
            if want == "incomplete":
                self.assertIn("indent", reply)

    def test_complete(self):
        self.ok("int my_counter = 1;\nint my_function(void) { return 2; }\n"
                "typedef struct { int a; } my_type;")
        reply = self.shell(self.kc.complete("my_", 3))
        self.assertEqual(reply["status"], "ok")
        for name in ["my_counter", "my_function", "my_type"]:
            self.assertIn(name, reply["matches"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (0, 3))
        reply = self.shell(self.kc.complete("acc_all_r", 9))
        self.assertIn("acc_all_reduce", reply["matches"])
        # the display API lives in its own header, nbf_display.h
        reply = self.shell(self.kc.complete("nbf_upd", 7))
        self.assertIn("nbf_update_display", reply["matches"])
        # and the Trainer in nbf_trainer.h
        reply = self.shell(self.kc.complete("acc_training_args_pa", 20))
        self.assertIn("acc_training_args_parse", reply["matches"])
        reply = self.shell(self.kc.complete("x = prin", 8))
        self.assertIn("printf", reply["matches"])
        self.assertEqual(reply["cursor_start"], 4)
        # cursor positions are code points: "é" (2 bytes) before the cursor
        code = 'puts("é"); my_c'
        reply = self.shell(self.kc.complete(code, len(code)))
        self.assertEqual(reply["matches"], ["my_counter"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (len(code) - 4, len(code)))
        # in the middle of a line, after a non-ASCII comment
        code = "/* ü */ my_f + 1"
        reply = self.shell(self.kc.complete(code, 12))
        self.assertEqual(reply["matches"], ["my_function"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (8, 12))

    def test_inspect(self):
        self.ok("/* Doubles x (an int). */\nint twice(int x) { return 2 * x; }")
        reply = self.shell(self.kc.inspect("twice", 5))
        self.assertEqual(reply["status"], "ok")
        self.assertTrue(reply["found"])
        text = reply["data"]["text/plain"]
        self.assertIn("int twice(int x)", text)
        self.assertIn("Doubles x", text)
        self.assertRegex(text, r"cell\[\d+\]")
        self.assertNotIn("__asm__", text)
        # the cursor inside a call's parentheses inspects the callee
        reply = self.shell(self.kc.inspect("twice(3", 7))
        self.assertTrue(reply["found"])
        self.assertIn("int twice(int x)", reply["data"]["text/plain"])
        # the runtime API, from nbfork.h, with its doc comment
        reply = self.shell(self.kc.inspect("acc_all_reduce", 3))
        self.assertTrue(reply["found"])
        text = reply["data"]["text/plain"]
        self.assertIn("acc_result_t acc_all_reduce(acc_t *acc, void *buf, size_t count", text)
        self.assertIn("In-place all-reduce", text)
        reply = self.shell(self.kc.inspect("nbf_clear_output", 3))
        self.assertTrue(reply["found"])
        self.assertIn("int nbf_clear_output(int wait)", reply["data"]["text/plain"])
        reply = self.shell(self.kc.inspect("no_such_name", 4))
        self.assertFalse(reply["found"])

    def test_history(self):
        self.ok("int h1 = 1;")
        self.ok("int h2 = 2;")
        self.ok("h1 + h2")
        reply = self.shell(self.kc.history(hist_access_type="tail", n=2, output=False, raw=True))
        self.assertEqual([h[2] for h in reply["history"]], ["int h2 = 2;", "h1 + h2"])
        reply = self.shell(self.kc.history(hist_access_type="search", pattern="int h*",
                                           output=False, raw=True))
        self.assertEqual([h[2] for h in reply["history"]], ["int h1 = 1;", "int h2 = 2;"])
        reply = self.shell(self.kc.history(hist_access_type="range", session=0, start=1,
                                           stop=2, output=False, raw=True))
        self.assertEqual([h[2] for h in reply["history"]], ["int h1 = 1;"])

    def test_execution_count(self):
        r1, _, _, _ = self.run_cell("int c1 = 1;")
        r2, _, _, _ = self.run_cell("c1")
        self.assertEqual(r2["execution_count"], r1["execution_count"] + 1)
        r3, out3, _, _ = self.run_cell("c1 = 5;", silent=True)
        self.assertEqual(r3["execution_count"], r2["execution_count"])
        self.assertEqual([m["msg_type"] for m in out3 if m["msg_type"] != "status"], [])
        r4, _, _, _ = self.run_cell("c1", store_history=False)
        self.assertEqual(r4["execution_count"], r2["execution_count"])
        r5, out5, _, _ = self.run_cell("c1")
        self.assertEqual(r5["execution_count"], r2["execution_count"] + 1)
        self.assertEqual(results(out5), ["5"])
        # an error counts too
        r6, _, _, _ = self.run_cell("syntax error here")
        self.assertEqual(r6["execution_count"], r5["execution_count"] + 1)

    # ------------------------------------------------------------- magics

    def test_magic_cflags_ldflags(self):
        out = self.ok("%cflags -DMAGIC_VALUE=31")
        self.assertIn("-DMAGIC_VALUE=31", stream_text(out))
        self.assertEqual(self.value("MAGIC_VALUE + 1"), "32")
        # libssl (Debian libssl-dev) is not loaded in the executor: its
        # functions need %ldflags -lssl
        cell = "#include <openssl/ssl.h>\nTLS_method() != NULL"
        reply, outputs, _, _ = self.run_cell(cell)
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["ename"], "LinkError")
        self.assertIn("TLS_method", reply["evalue"])
        self.assertEqual(len(errors(outputs)), 1)
        out = self.ok("%ldflags -lssl")
        self.assertIn("-lssl", stream_text(out))
        self.assertEqual(self.value(cell), "1")
        # flags the linker or compiler rejects are refused when given,
        # and the flags before them stay: later cells are not broken
        reply, _, _, _ = self.run_cell("%ldflags -lnbfork_no_such_lib\n1")
        self.assertEqual(reply["ename"], "UsageError")
        self.assertIn("cannot find -lnbfork_no_such_lib", reply["evalue"])
        self.assertIn("(now: -lssl)", reply["evalue"])
        self.assertEqual(self.value(cell), "1")
        reply, _, _, _ = self.run_cell("%cflags -fnbfork-no-such-flag")
        self.assertEqual(reply["ename"], "UsageError")
        self.assertIn("unrecognized command-line option", reply["evalue"])
        self.assertIn("-DMAGIC_VALUE=31", stream_text(self.ok("%cflags")))
        self.assertEqual(self.value("MAGIC_VALUE + 2"), "33")
        self.assertIn("(none)", stream_text(self.ok("%ldflags --clear")))
        self.assertEqual(self.value("2"), "2")
        # magics and code in one cell
        self.assertEqual(self.value("%cflags -DMAGIC_VALUE=40\nMAGIC_VALUE"), "40")

    def test_magic_env_who_lsmagic(self):
        out = self.ok("%env NBFORK_TEST_VAR=hello")
        self.assertIn("NBFORK_TEST_VAR=hello", stream_text(out))
        self.assertEqual(stream_text(self.ok("%env NBFORK_TEST_VAR")).strip(), "hello")
        self.assertEqual(self.value('#include <stdlib.h>\ngetenv("NBFORK_TEST_VAR")'), '"hello"')
        self.assertIn("Nothing defined", stream_text(self.ok("%who")))
        self.ok("int w_var = 1;\nint w_fn(void) { return 0; }\ntypedef int w_type;\n#define W_MAC 1")
        who = stream_text(self.ok("%who"))
        for name, kind in [("w_var", "variable"), ("w_fn", "function"), ("w_type", "type"),
                           ("W_MAC", "macro")]:
            self.assertRegex(who, r"(?m)^%s\s+%s" % (name, kind))
        ls = stream_text(self.ok("%lsmagic"))
        for magic in ["%launch", "%time ", "%timeit", "%cflags", "%ldflags", "%env", "%who",
                      "%lsmagic", "%%cuda", "%%timeit", "%%writefile", "%%file", "%ranks",
                      "%autoranks", "%%ranks"]:
            self.assertIn(magic, ls)
        reply, outputs, _, _ = self.run_cell("%nosuchmagic")
        self.assertEqual(reply["ename"], "UsageError")
        self.assertEqual(len(errors(outputs)), 1)

    def test_magic_usage_errors(self):
        # IPython's UsageError for arguments a magic does not take
        for code, text in [("%timeit -q 1 + 1", "unknown option -q"),
                           ("%timeit -n 5 -x 1 + 1", "unknown option -x"),
                           ("%env =x", "'=x' is not NAME or NAME=VALUE"),
                           ("%env A B", "'A B' is not NAME"),
                           ("%who int", "%who takes no arguments"),
                           ("%lsmagic -v", "%lsmagic takes no arguments"),
                           ("%time -n 3 1", "%time takes no options"),
                           ("%time", "%time needs a statement"),
                           ("%%writefile", "needs a file name"),
                           ("%%writefile -q f.txt\nx", "unknown option -q"),
                           ("%%timeit -q\n1;", "unknown option -q"),
                           ("%%timeit -n 2", "needs the statements")]:
            reply, outputs, _, _ = self.run_cell(code)
            self.assertEqual(reply["status"], "error", code)
            self.assertEqual(reply["ename"], "UsageError", code)
            self.assertIn(text, reply["evalue"], code)
            self.assertEqual(len(errors(outputs)), 1, code)
        # an option glued to its value, as IPython's getopt reads it
        text = stream_text(self.ok("%timeit -n5 -r1 (void)0"))
        self.assertIn("of 1 run, 5 loops each", text)
        # a statement that starts with a minus is no option
        self.ok("int neg_me = 3;")
        self.assertIn("per loop", stream_text(self.ok("%timeit -n 2 -r 1 -neg_me;")))

    def test_magic_writefile(self):
        path = os.path.join(self.workdir, "written.h")
        out = self.ok("%%%%writefile %s\n#define WRITTEN 41\nint written_fn(void);" % path)
        self.assertEqual(stream_text(out), "Writing %s\n" % path)
        with open(path) as f:  # IPython's body: the lines after the magic, newline-ended
            self.assertEqual(f.read(), "#define WRITTEN 41\nint written_fn(void);\n")
        out = self.ok("%%%%file -a %s\n#define MORE 1\n" % path)
        self.assertEqual(stream_text(out), "Appending to %s\n" % path)
        with open(path) as f:
            self.assertEqual(f.read(),
                             "#define WRITTEN 41\nint written_fn(void);\n#define MORE 1\n")
        out = self.ok("%%%%writefile '%s'\n#define WRITTEN 42\n" % path)
        self.assertEqual(stream_text(out), "Overwriting %s\n" % path)
        # what was written is C a cell can include; the magic cell compiled nothing
        self.assertEqual(self.value('#include "%s"\nWRITTEN' % path), "42")
        reply, _, _, _ = self.run_cell("%%writefile /nonexistent-dir/x.c\nint x;")
        self.assertEqual(reply["ename"], "OSError")
        self.assertIn("No such file or directory", reply["evalue"])

    def test_magic_time(self):
        self.ok("#include <unistd.h>\nlong napped;\nvoid nap_ms(int ms) { usleep(ms * 1000); "
                "napped++; }")
        text = stream_text(self.ok("%time nap_ms(300)"))
        unit = r"[\d.]+ (?:s|ms|\u00b5s|ns)"
        m = re.fullmatch(r"CPU times: user %s, sys: %s, total: %s\nWall time: ([\d.]+) (s|ms)\n"
                         % (unit, unit, unit), text)
        self.assertTrue(m, text)
        wall = float(m.group(1)) * {"s": 1, "ms": 1e-3}[m.group(2)]
        self.assertGreaterEqual(wall, 0.3)
        self.assertEqual(self.value("napped"), "1")  # once, not a %timeit loop

    def test_cell_magic_timeit(self):
        self.ok("#include <unistd.h>\nlong ticks;")
        # SETUP on the magic's line runs once first; the body is timed
        out = self.ok("%%timeit -n 4 -r 2 ticks = 100;\nusleep(1000);\nticks++;")
        text = stream_text(out)
        m = re.search(r"^([\d.]+) (ms|s) \u00b1 [\d.]+ (?:s|ms|\u00b5s|ns) per loop \(mean "
                      r"\u00b1 std\. dev\. of 2 runs, 4 loops each\)$", text.strip())
        self.assertTrue(m, text)
        self.assertGreaterEqual(float(m.group(1)) * {"ms": 1e-3, "s": 1}[m.group(2)], 0.001)
        self.assertEqual(self.value("ticks"), "108")
        reply, _, _, _ = self.run_cell("%%timeit -n 1 -r 1\nno_such_fn();")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertIn("no_such_fn", reply["evalue"])

    def test_help_through_the_pager(self):
        self.ok("/* Squares x. */\nint sq(int x) { return x * x; }")
        for code, detail in [("sq?", 1), ("?sq", 1), ("sq??", 2), ("??sq", 2)]:
            reply, outputs, _, _ = self.run_cell(code)
            self.assertEqual(reply["status"], "ok", code)
            self.assertEqual(len(reply["payload"]), 1, code)
            page = reply["payload"][0]
            self.assertEqual((page["source"], page["start"]), ("page", 0), code)
            text = page["data"]["text/plain"]
            self.assertIn("function sq, defined in cell[", text)
            if detail == 1:  # the declaration and its doc comment, as inspect
                self.assertIn("Squares x.", text)
                self.assertNotIn("return x * x", text)
            else:  # the definition's source
                self.assertIn("int sq(int x) { return x * x; }", text)
            self.assertEqual(stream_text(outputs), "", code)
        page = self.run_cell("printf?")[0]["payload"][0]
        self.assertIn("stdio.h", page["data"]["text/plain"])
        page = self.run_cell("%timeit?")[0]["payload"][0]
        self.assertIn("%timeit [-n N] [-r R] STATEMENT", page["data"]["text/plain"])
        page = self.run_cell("struct Pt { int x, y; };\n")[0]
        page = self.run_cell("struct Pt??")[0]["payload"][0]
        self.assertIn("struct Pt { int x, y; };", page["data"]["text/plain"])
        reply, outputs, _, _ = self.run_cell("no_such_name?")
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(reply["payload"], [])
        self.assertEqual(stream_text(outputs), "Object `no_such_name` not found.\n")
        # a conditional expression is C, not help
        self.assertEqual(self.value("1 ? 2 : 3"), "2")

    def test_magic_timeit(self):
        self.ok("#include <unistd.h>\nlong calls;\nvoid nap(void) { usleep(2000); calls++; }")
        # IPython's line: mean ± std per loop, runs and loops; -n/-r honoured
        text = stream_text(self.ok("%timeit -n 5 -r 3 nap()"))
        m = re.search(r"^([\d.]+) (s|ms|\u00b5s|ns) \u00b1 [\d.]+ (s|ms|\u00b5s|ns) per loop "
                      r"\(mean \u00b1 std\. dev\. of 3 runs, 5 loops each\)$", text.strip())
        self.assertTrue(m, text)
        per_loop = float(m.group(1)) * {"s": 1, "ms": 1e-3, "\u00b5s": 1e-6, "ns": 1e-9}[m.group(2)]
        self.assertGreaterEqual(per_loop, 0.002)  # usleep(2000) each
        self.assertEqual(self.value("calls"), "15")
        # without -n: loops chosen so that a run takes >= 0.2 s
        text = stream_text(self.ok("%timeit nap()"))
        # 100 loops of ~2 ms; fewer when a loaded machine makes usleep slower
        self.assertRegex(text, r"of 7 runs, (1|2|5|10|20|50|100) loops each")
        # a statement list too; the cell's own code runs first, once
        self.ok("calls = 0;")
        self.assertIn("per loop", stream_text(self.ok("%timeit -n 2 -r 1 calls += 10; nap()\n"
                                                      "calls = 1000;")))
        self.assertEqual(self.value("calls"), "1022")
        for code, ename, text in [
                ("%timeit", "UsageError", "needs a statement"),
                ("%timeit -n x nap()", "UsageError", "-n needs a positive number"),
                ("%timeit -r 0 nap()", "UsageError", "-r needs a positive number"),
                ("%timeit no_such_fn()", "CompileError", "no_such_fn"),
                ("%timeit nap()\n%launch nap() num_processes=1", "UsageError", "cannot share")]:
            reply, outputs, _, _ = self.run_cell(code)
            self.assertEqual(reply["ename"], ename, code)
            self.assertIn(text, reply["evalue"], code)

    # -------------------------------------------------------- compile cache

    def test_compile_cache_skips_the_compiler(self):
        cell = "int cached = 11;\nint cached_fn(void) { return cached * 2; }"
        self.ok(cell)
        first = self.objects()
        self.assertEqual(len(first), 1, first)
        stamp = os.stat(first[0]).st_mtime_ns
        # the identical cell again (new execution count): no new object,
        # the same one untouched -> the compiler did not run
        self.ok(cell)
        self.assertEqual(self.objects(), first)
        self.assertEqual(os.stat(first[0]).st_mtime_ns, stamp)
        self.assertEqual(self.value("cached_fn()"), "22")
        n = len(self.objects())
        self.ok("cached = 1;")  # a new cell compiles
        self.assertEqual(len(self.objects()), n + 1)
        self.ok("cached = 1;")  # ... once
        self.assertEqual(len(self.objects()), n + 1)
        # a changed flag is a new object
        self.ok("%cflags -O0")
        self.ok(cell)
        self.assertEqual(len(self.objects()), n + 2)

    def test_cached_cell_shows_its_warnings_again(self):
        # a re-run served by the compile cache shows what the compiler
        # said the first time (the object is not rebuilt)
        cell = ("const char *warn_src = \"x\";\n"
                "char *warn_fn(void) { return warn_src; }")
        texts = []
        for _ in range(2):
            before = self.objects()
            texts.append(stream_text(self.ok(cell), "stderr"))
        self.assertEqual(self.objects(), before)
        self.assertIn("discards 'const' qualifier", texts[0])
        self.assertEqual(texts[1], texts[0])

    def new_object(self, code):
        """Run `code` (it must succeed and compile anew); return whether
        its object was built by GCC (GCC writes its name and version into
        every object's .comment section; TinyCC writes none)."""
        before = set(self.objects())
        self.ok(code)
        made = sorted(set(self.objects()) - before)
        self.assertEqual(len(made), 1, made)
        with open(made[0], "rb") as f:
            return b"GCC: (" in f.read()

    def test_straight_cells_compile_with_tinycc_and_link_with_gcc_cells(self):
        # a declaration-only cell: TinyCC, in the executor (issue 15's
        # new-cell latency); its variable is a later GCC cell's
        self.assertFalse(self.new_object("int tcc_var = 40;"))
        self.assertTrue(self.new_object("int tcc_get(void) { return tcc_var + 2; }"))
        self.assertEqual(self.value("tcc_get()"), "42")
        self.assertFalse(self.new_object("tcc_var = tcc_get();"))
        self.assertEqual(self.value("tcc_var"), "42")
        # what TinyCC would only warn about goes to GCC, whose error the
        # user sees, as without the fast path
        reply, outputs, _, _ = self.run_cell("int bad = undeclared_function(1);")
        self.assertEqual(reply["status"], "error")
        self.assertIn("implicit declaration of function", reply["evalue"] +
                      "\n".join(reply.get("traceback", [])))
        # an aggregate passed by value across the two compilers: GCC only
        self.ok("typedef struct { int a; double b; } mixed_t;\n"
                "int mixed_a(mixed_t m) { return m.a; }")
        self.assertTrue(self.new_object("int via_struct = mixed_a((mixed_t){7, 0.5});"))
        self.assertEqual(self.value("via_struct"), "7")
        # flags the user chose: the system compiler
        self.ok("%cflags -DFROM_FLAGS=1")
        self.assertTrue(self.new_object("int flagged = FROM_FLAGS;"))

    # ------------------------------------------------------------- display
    # ------------------------------------------------------------- display

    def test_display_update_clear(self):
        reply, outputs, _, _ = self.run_cell(
            'long id = nbf_display("text/html", "<b>one</b>", 10);\n'
            'nbf_update_display(id, "text/html", "<b>two</b>", 10);\n'
            'nbf_clear_output(1);\n'
            'nbf_display("text/plain", "after", 5);')
        self.assertEqual(reply["status"], "ok")
        kinds = [m["msg_type"] for m in outputs
                 if m["msg_type"] not in ("status", "execute_input")]
        self.assertEqual(kinds, ["display_data", "update_display_data", "clear_output",
                                 "display_data"])
        d, u, c, d2 = [m["content"] for m in outputs
                       if m["msg_type"] not in ("status", "execute_input")]
        self.assertEqual(d["data"]["text/html"], "<b>one</b>")
        self.assertEqual(u["data"]["text/html"], "<b>two</b>")
        self.assertTrue(d["transient"]["display_id"])
        self.assertEqual(d["transient"]["display_id"], u["transient"]["display_id"])
        self.assertTrue(c["wait"])
        self.assertEqual(d2["data"]["text/plain"], "after")

    # ----------------------------------------------------- other front ends

    def test_notebook_run_by_nbclient(self):
        import nbformat
        from nbclient import NotebookClient

        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("#include <stdio.h>\nint n = 6;"),
                    nbformat.v4.new_code_cell('printf("n is %d\\n", n);\nn * 7'),
                    nbformat.v4.new_code_cell('nbf_display("text/markdown", "**bold**", 8);')]
        nb.metadata["kernelspec"] = {"name": "nbfork", "display_name": "C (nbfork)",
                                     "language": "c"}
        with nbf_harness.kernelspec_env():
            NotebookClient(nb, timeout=120, kernel_name="nbfork").execute()
        out1 = nb.cells[1].outputs
        self.assertEqual(out1[0]["output_type"], "stream")
        self.assertEqual(out1[0]["text"], "n is 6\n")
        self.assertEqual(out1[1]["output_type"], "execute_result")
        self.assertEqual(out1[1]["data"]["text/plain"], "42")
        self.assertEqual(out1[1]["execution_count"], 2)
        self.assertEqual(nb.cells[2].outputs[0]["output_type"], "display_data")
        self.assertEqual(nb.cells[2].outputs[0]["data"]["text/markdown"], "**bold**")
        self.assertEqual(nb.metadata["language_info"]["name"], "c")

    def test_jupyter_console_one_cell(self):
        # the one beside this Python (the venv's, jupyter_client 8)
        console = os.path.join(os.path.dirname(sys.executable), "jupyter-console")
        if not os.access(console, os.X_OK):
            self.skipTest("%s is not installed (scripts/deps.sh)" % console)
        ks = nbf_harness.make_kernelspec_dir()
        env = dict(os.environ, JUPYTER_PATH=ks,
                   JUPYTER_RUNTIME_DIR=os.path.join(self.workdir, "runtime"))
        try:
            # --simple-prompt reads one line per cell from a plain pipe
            p = subprocess.run(
                [console, "--kernel", "nbfork", "--simple-prompt"],
                input='#include <stdio.h>\nprintf("console says %d\\n", 6 * 7);\n20 + 1\n',
                capture_output=True, text=True, env=env, timeout=120)
        finally:
            shutil.rmtree(ks, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("console says 42", p.stdout)
        self.assertRegex(p.stdout, r"Out\[3\]: 21")
        self.assertIn("nbfork", p.stdout)  # the banner
        self.assertNotIn("error", p.stderr.lower())

    # --------------------------------------------------------------- CUDA

    def test_cuda_cell_host_code(self):
        nvcc = find_nvcc()
        if not nvcc:
            self.skipTest("no nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): %%cuda "
                          "cells cannot compile here")
        # a %%cuda cell is C++ compiled by nvcc; host code only (no GPU needed)
        reply, outputs, _, _ = self.run_cell(
            "%%cuda\n#include <cstdio>\n"
            "/* The answer, from C++. */\n"
            "int answer(void) { return 6 * 7; }\n"
            "template <typename T> T twice(T v) { return v + v; }\n"
            'printf("host side %d\\n", twice(answer()));\n'
            "answer()", timeout=300)
        self.assertEqual(reply["status"], "ok", reply.get("traceback"))
        self.assertEqual(stream_text(outputs), "host side 84\n")
        self.assertEqual(results(outputs), ["42"])
        # C cells call what the CUDA cell defined (versioned, unmangled)
        self.assertEqual(self.value("answer() + 1"), "43")
        # a compile error in a CUDA cell is one CompileError
        reply, outputs, _, _ = self.run_cell("%%cuda\nint broken( {", timeout=300)
        self.assertEqual(reply["ename"], "CompileError")
        self.assertEqual(len(errors(outputs)), 1)

    def test_cuda_cell_without_nvcc(self):
        # the same cell where no nvcc can be found: a clear CompileError
        self.k.close()
        self.k = Kernel(env={"NBFORK_NVCC": "/nonexistent/nvcc"})
        self.kc = self.k.kc
        reply, outputs, _, _ = self.run_cell("%%cuda\nint x = 1;")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertIn("nvcc", reply["evalue"])
        self.assertEqual(len(errors(outputs)), 1)

    # ---------------------- issue 13: where users push the cell engine

    def error_of(self, code):
        """Run a cell that must fail; returns its reply (one error shown)."""
        reply, outputs, _, _ = self.run_cell(code)
        self.assertEqual(reply["status"], "error", code)
        self.assertEqual(len(errors(outputs)), 1, errors(outputs))
        return reply

    def test_type_redefinition_never_corrupts_memory(self):
        # the repro: cell 2 would let cell 3 write 64 bytes into a
        # 4-byte global and over its neighbour
        self.ok("struct S { int a; }; struct S gs = {42}; int neighbor = 7;")
        reply = self.error_of("struct S { char name[64]; int a; };")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]: 'struct S' \(defined by cell\[\d+\]\)")
        self.assertIn("gs (variable, cell[", reply["evalue"])
        self.assertIn("restart the kernel", reply["evalue"])
        reply = self.error_of("memset(gs.name, 'A', sizeof gs.name);")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertEqual(self.value("neighbor"), "7")
        self.assertEqual(self.value("gs.a"), "42")
        # the same text again (a re-run) is no redefinition
        self.ok("struct S { int a; };")
        # a typedef: the error names the cell that defined it and the cells
        # of its users, a function among them
        _, _, _, _ = self.run_cell("typedef int T1;")
        reply, _, _, _ = self.run_cell("T1 tv = 3;\nint twice(T1 x) { return 2 * x; }")
        self.assertEqual(reply["status"], "ok")
        users_cell = reply["execution_count"]
        reply = self.error_of("typedef double T1;")
        self.assertRegex(reply["evalue"], r"'T1' \(defined by cell\[%d\]\)" % (users_cell - 1))
        self.assertIn("tv (variable, cell[%d])" % users_cell, reply["evalue"])
        self.assertIn("twice (function, cell[%d])" % users_cell, reply["evalue"])
        # through another type: S_t names struct S
        self.ok("typedef struct S S_t;\nS_t via_alias;")
        reply = self.error_of("struct S { long a, b; };")
        self.assertIn("via_alias (variable", reply["evalue"])
        # redefining the users in the same cell is the way to change a type
        self.ok("typedef double T1;\nT1 tv = 2.5;\nint twice(T1 x) { return (int)(2 * x); }")
        self.assertEqual(self.value("tv"), "2.5")
        self.assertEqual(self.value("twice(tv)"), "5")

    def test_enum_and_macro_redefinition_refused_clearly(self):
        # an enum whose values move under a function compiled with them
        self.ok("enum color { RED, GREEN };")
        reply, _, _, _ = self.run_cell("int green(void) { return GREEN; }")
        users_cell = reply["execution_count"]
        reply = self.error_of("enum color { GREEN, RED };")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]: 'enum color' \(defined by cell\[%d\]\)"
                         % (users_cell - 1))
        self.assertIn("green (function, cell[%d])" % users_cell, reply["evalue"])
        self.assertEqual(self.value("green()"), "1")
        # a macro behind an array size: before, "'N' undeclared" at an
        # earlier cell's line; now the macro, its cell and each user
        self.ok("#define N 4")
        self.ok("int arr[N];")
        self.ok("struct P { int c[N]; };")
        reply = self.error_of("#define N 8")
        self.assertEqual(reply["ename"], "CompileError")
        self.assertIn("the macro 'N' (defined by cell[", reply["evalue"])
        self.assertIn("arr (variable, cell[", reply["evalue"])
        self.assertIn("struct P (type, cell[", reply["evalue"])
        self.assertNotIn("undeclared", reply["evalue"])
        # a re-run of the same #define is no redefinition
        self.ok("#define N 4")
        self.assertEqual(self.value("(int)(sizeof arr + sizeof(struct P))"), "32")

    def test_top_level_pragmas(self):
        self.ok("%cflags -fopenmp")
        self.ok("#include <omp.h>\nint hits[4];\nint threads_seen;")
        # OpenMP: the pragma runs with the loop it heads
        self.ok("#pragma omp parallel for\nfor (int i = 0; i < 4; i++) hits[i] = i + 1;")
        self.assertEqual(self.value("hits[0] + hits[1] + hits[2] + hits[3]"), "10")
        self.ok("#pragma omp parallel\n{\n#pragma omp atomic\n  threads_seen++;\n}")
        self.assertEqual(self.value("threads_seen >= 1"), "1")
        # ... and never breaks a later cell
        self.assertEqual(self.value("int later = 5;\nlater * 2"), "10")
        # GCC pragmas act on their own cell; errors point at the cell
        self.ok('#pragma GCC diagnostic error "-Wpedantic"\nint q = 3;')
        self.assertEqual(self.value("q + 1"), "4")
        reply = self.error_of('#pragma GCC error "stop here"\nint never;')
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:1:\d+: error: stop here")
        self.assertNotIn("<nbfork>", "\n".join(reply["traceback"]))
        self.assertEqual(self.value("1 + 2"), "3")

    def test_error_columns_are_the_cells_characters(self):
        # a global initializer: the `;` where an operand is missing
        reply = self.error_of("int bad3 = 1 +;")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:1:15: error: expected expression")
        # a last-line expression: right after the `+`, not 12 columns on
        reply = self.error_of("int v = 3;\nv +")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:2:4: error: expected expression")
        # code in a function, after two 2-byte characters: characters, not bytes
        reply = self.error_of('int f(void) { /* \u00e9 */ return "\u00e9" + ; }')
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:1:36: error: expected expression")
        # a statement after another on its line, and a static initializer
        reply = self.error_of("int ok1 = 1; ok1 = nothing_here;")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:1:20: error: 'nothing_here' undeclared")
        reply = self.error_of("int arr[2] = {1, missing_name};")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]:1:18: error: 'missing_name' undeclared")

    def test_sizeof_without_parentheses_is_an_expression(self):
        self.assertEqual(self.value("int x = 5;\nsizeof x"), "4")
        self.assertEqual(self.value("sizeof x * 2"), "8")

    def test_is_complete_waits_for_the_body_of_if(self):
        for code, want in [("if (1)", "incomplete"), ("for (int i = 0; i < 3; i++)", "incomplete"),
                           ("while (x > 0)", "incomplete"), ("if (1) x = 2; else", "incomplete"),
                           ("if (1) x = 2;", "complete"), ("f(1)", "complete"),
                           ("do { x--; } while (x > 0);", "complete")]:
            self.assertEqual(self.shell(self.kc.is_complete(code))["status"], want, code)

    def test_link_error_names_a_variable_as_a_variable(self):
        reply = self.error_of("extern int nowhere_var;\nnowhere_var")
        self.assertEqual(reply["ename"], "LinkError")
        self.assertRegex(reply["evalue"], r"^cell\[\d+\]: undefined variable: nowhere_var$")
        self.assertIn("variable 'nowhere_var'", "\n".join(reply["traceback"]))
        self.assertNotIn("function", "\n".join(reply["traceback"]))
        self.assertEqual(self.value("1 + 1"), "2")

    def test_exit_in_a_cell_is_not_a_crash(self):
        self.ok("int kept = 11;")
        reply, outputs, _, _ = self.run_cell(
            '#include <stdio.h>\n#include <stdlib.h>\nprintf("before\\n");\nexit(0);\n'
            'printf("after\\n");')
        self.assertEqual(reply["ename"], "SystemExit")
        self.assertIn("exit(0)", reply["evalue"])
        self.assertNotIn("crash", reply["evalue"] + "\n".join(reply["traceback"]))
        self.assertEqual(stream_text(outputs), "before\n")
        # the executor lived: earlier state is there
        self.assertEqual(self.value("kept"), "11")
        reply = self.error_of("exit(3);")
        self.assertIn("exit(3)", reply["evalue"])
        # a child the cell forks still exits for real
        self.assertEqual(self.value('#include <sys/wait.h>\n#include <unistd.h>\n'
                                    'int st; pid_t pid = fork();\n'
                                    'if (pid == 0) exit(5);\nwaitpid(pid, &st, 0);\n'
                                    'WEXITSTATUS(st)'), "5")

    def test_large_function_compiles_at_lower_optimization(self):
        n = 2500
        body = "\n".join("  a[%d] = a[%d] * 3 + %d;" % (i, i - 1, i % 7) for i in range(1, n))
        code = "int a[%d];\nint big(void) {\n  a[0] = 1;\n%s\n  return a[%d];\n}" % (n, body, n - 1)
        outputs = self.ok(code, timeout=240)
        note = stream_text(outputs, "stderr")
        # n - 1 assignments, a[0] = 1 and the return
        self.assertIn("function 'big' has %d statements" % (n + 1), note)
        self.assertIn("compiled at -O1 instead of -O2", note)
        self.assertIn("%cflags -O2 overrides", note)
        # the user's -O wins, and nothing is said
        self.ok("%cflags -O0")
        outputs = self.ok(code.replace("big(", "big2("), timeout=240)
        self.assertEqual(stream_text(outputs, "stderr"), "")

    def maps(self):
        """Memory maps of the executor now (a cell reads /proc/self/maps)."""
        return int(self.value(
            '#include <stdio.h>\nint __maps = 0;\n'
            '{ FILE *f = fopen("/proc/self/maps", "r"); int ch;\n'
            '  while ((ch = fgetc(f)) != EOF) __maps += ch == \'\\n\'; fclose(f); }\n'
            '__maps'))

    def test_long_notebook_unloads_superseded_objects(self):
        self.ok("int x = -1;")
        self.ok("int *px = &x;")  # binds x's first object: it must stay mapped
        self.ok("int sq(int v) { return v * v; }\nint call_sq(void) { return sq(3); }")
        before = self.maps()
        cells = 150
        for i in range(cells):
            self.ok("int x = %d;" % i)  # each supersedes the one before
            self.ok("x + %d;" % i)      # defines nothing: unloaded once run
        after = self.maps()
        # every object kept would cost about 5 maps: 2 * 150 cells kept
        # would add over 1,000
        self.assertLess(after - before, 60, (before, after))
        self.assertEqual(self.value("x"), str(cells - 1))
        # references through symbols keep what they refer to
        self.assertEqual(self.value("*px"), "-1")
        self.ok("int sq(int v) { return v + 1; }")
        self.assertEqual(self.value("call_sq()"), "9")
        self.assertEqual(self.value("sq(3)"), "4")

    def test_inspect_table_symbol_under_cursor(self):
        self.ok("/* A 2-D point. */\ntypedef struct { int x, y; } point_t;\n"
                "/* Squares v. */\nint sq(int v) { return v * v; }\nint count = 3;")
        # (code, cursor, substring the answer must hold, substring it must not)
        table = [
            ("sq", 2, "int sq(int v)", None),
            ("sq(count", 8, "int count", "int sq"),        # the argument, not the callee
            ("sq(3", 4, "int sq(int v)", None),            # inside the call: the callee
            ("point_t p;", 3, "A 2-D point.", None),
            ("printf", 3, "printf (stdio.h)", "acc_print"),  # libc's, not the runtime's
            ("printf", 3, "int printf (const char", None),
            ("memcpy", 2, "memcpy (string.h)", None),
            ("acc_print", 5, "acc_print (nbfork.h)", None),  # the runtime's own
            ("f(n", 3, None, None),                        # a parameter name in a header is no declaration
        ]
        for code, cursor, want, unwanted in table:
            reply = self.shell(self.kc.inspect(code, cursor))
            self.assertEqual(reply["status"], "ok", code)
            if want is None:
                self.assertFalse(reply["found"], (code, reply.get("data")))
                continue
            self.assertTrue(reply["found"], code)
            text = reply["data"]["text/plain"]
            self.assertIn(want, text, code)
            if unwanted:
                self.assertNotIn(unwanted, text, code)
        # the user's own definition wins over libc's
        self.ok("/* Mine. */\nint abs(int v) { return v < 0 ? -v : v; }")
        text = self.shell(self.kc.inspect("abs", 2))["data"]["text/plain"]
        self.assertIn("Mine.", text)

    def test_complete_magics_and_headers(self):
        reply = self.shell(self.kc.complete("%cf", 3))
        self.assertEqual(reply["matches"], ["%cflags"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (0, 3))
        reply = self.shell(self.kc.complete("int a;\n%", 8))
        for m in ["%launch", "%time", "%timeit", "%who", "%%cuda", "%%timeit", "%%writefile",
                  "%%file", "%ranks", "%%ranks", "%autoranks"]:
            self.assertIn(m, reply["matches"])
        self.assertEqual(reply["cursor_start"], 7)
        reply = self.shell(self.kc.complete("#include <stdi", 14))
        self.assertIn("stdio.h", reply["matches"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (10, 14))
        reply = self.shell(self.kc.complete("#include <sys/wa", 16))
        self.assertIn("sys/wait.h", reply["matches"])
        reply = self.shell(self.kc.complete("#include <nbf", 13))
        self.assertIn("nbfork.h", reply["matches"])
        # a `%` inside C is the modulo operator: C names complete
        self.ok("int my_mod = 7;")
        reply = self.shell(self.kc.complete("10 % my_m", 9))
        self.assertEqual(reply["matches"], ["my_mod"])


if __name__ == "__main__":
    unittest.main()
