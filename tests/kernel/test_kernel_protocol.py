#!/usr/bin/python3
"""End-to-end tests of nbfork-kernel through jupyter_client.

The kernel is the build's binary (NBFORK_KERNEL_BIN), installed as a
kernelspec into a temporary prefix with its own `install` subcommand; its
executor is fake_executor.py (NBFORK_EXECUTOR), which speaks nbf_wire.h.

Run one test:  NBFORK_KERNEL_BIN=build/bin/nbfork-kernel \\
    /usr/bin/python3 -m unittest test_kernel_protocol.KernelProtocolTest.test_kernel_info
(ctest runs each test method as its own test.)
"""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import nbf_harness as h

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_EXECUTOR = os.path.join(HERE, "fake_executor.py")
KERNEL_BIN = os.environ.get("NBFORK_KERNEL_BIN", "")
TIMEOUT = 30  # s: an upper bound against hangs, not a speed requirement


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at /proc
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class KernelProtocolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not KERNEL_BIN or not os.access(KERNEL_BIN, os.X_OK):
            raise unittest.SkipTest("NBFORK_KERNEL_BIN does not name the built nbfork-kernel")
        cls.tmp = tempfile.mkdtemp(prefix="nbfork-kernel-test-")
        subprocess.run([KERNEL_BIN, "install", "--prefix", cls.tmp, "--name", "nbfork-test"],
                       check=True, stdout=subprocess.DEVNULL)
        os.environ["JUPYTER_PATH"] = os.path.join(cls.tmp, "share", "jupyter")
        os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(cls.tmp, "runtime")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def setUp(self):
        self.stderr_path = os.path.join(self.tmp, f"{self._testMethodName}.stderr")
        self.stderr = open(self.stderr_path, "w")
        self.km, self.kc = h.start_kernel(
            "nbfork-test", env={"NBFORK_EXECUTOR": FAKE_EXECUTOR, "OPENBLAS_NUM_THREADS": None},
            stderr=self.stderr, ready_timeout=TIMEOUT)
        h.drain_iopub(self.kc)

    def tearDown(self):
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=False)
        self.stderr.close()

    def kernel_stderr(self):
        self.stderr.flush()
        with open(self.stderr_path) as f:
            return f.read()

    def collect(self, msg_id, timeout=TIMEOUT):
        """iopub messages whose parent is msg_id, up to its status idle."""
        return h.collect(self.kc, msg_id, timeout)

    def shell_reply(self, msg_id, timeout=TIMEOUT):
        return h.shell_reply(self.kc, msg_id, timeout)

    def run_cell(self, code, timeout=TIMEOUT, **kw):
        msg_id = self.kc.execute(code, **kw)
        reply = self.shell_reply(msg_id, timeout)
        return reply, self.collect(msg_id, timeout)

    stream_text = staticmethod(h.stream_text)

    def cell_output(self, code, **kw):
        reply, msgs = self.run_cell(code, **kw)
        self.assertEqual(reply["content"]["status"], "ok", reply["content"])
        return self.stream_text(msgs)

    def start_cell(self, code):
        """Send an execute and wait until its execute_input is published."""
        msg_id = self.kc.execute(code)
        seen = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") == msg_id:
                seen.append(msg)
                if msg["msg_type"] == "stream":  # the cell printed: it is running
                    return msg_id, seen

    # -------------------------------------------------------------- tests

    def test_kernel_info(self):
        msg_id = self.kc.kernel_info()
        reply = self.shell_reply(msg_id)
        c = reply["content"]
        self.assertEqual(reply["msg_type"], "kernel_info_reply")
        self.assertEqual(c["status"], "ok")
        self.assertEqual(c["protocol_version"], "5.3")
        self.assertEqual(c["implementation"], "nbfork")
        self.assertTrue(c["implementation_version"])
        self.assertTrue(c["banner"])
        self.assertIsInstance(c["help_links"], list)
        self.assertEqual(c["language_info"], {
            "name": "c", "version": "11", "mimetype": "text/x-csrc", "file_extension": ".c",
            "pygments_lexer": "c", "codemirror_mode": "text/x-csrc"})
        h = reply["header"]
        self.assertEqual(h["version"], "5.3")
        self.assertEqual(len(h["msg_id"]), 36)
        self.assertTrue(h["session"] and h["username"])
        date = h["date"]
        if isinstance(date, str):
            date = datetime.datetime.fromisoformat(date.replace("Z", "+00:00"))
        self.assertIsNotNone(date.tzinfo)
        self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
        states = [m["content"]["execution_state"] for m in self.collect(msg_id)]
        self.assertEqual(states, ["busy", "idle"])

    def test_execute_round_trip(self):
        reply, msgs = self.run_cell("print hello\nresult 42")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(reply["content"]["execution_count"], 1)
        self.assertEqual(reply["content"]["user_expressions"], {})
        self.assertEqual([m["msg_type"] for m in msgs],
                         ["status", "execute_input", "stream", "execute_result", "status"])
        self.assertEqual(msgs[0]["content"]["execution_state"], "busy")
        self.assertEqual(msgs[1]["content"], {"code": "print hello\nresult 42",
                                              "execution_count": 1})
        self.assertEqual(msgs[2]["content"], {"name": "stdout", "text": "hello\n"})
        self.assertEqual(msgs[3]["content"]["data"], {"text/plain": "42"})
        self.assertEqual(msgs[3]["content"]["execution_count"], 1)
        self.assertEqual(msgs[4]["content"]["execution_state"], "idle")
        reply, _ = self.run_cell("print again")
        self.assertEqual(reply["content"]["execution_count"], 2)

    def test_error_reply(self):
        reply, msgs = self.run_cell("print before\nraise ValueError bad value")
        c = reply["content"]
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "ValueError")
        self.assertEqual(c["evalue"], "bad value")
        self.assertIsInstance(c["traceback"], list)
        self.assertEqual(c["execution_count"], 1)
        types = [m["msg_type"] for m in msgs]
        self.assertEqual(types.count("error"), 1)
        self.assertLess(types.index("stream"), types.index("error"))
        err = msgs[types.index("error")]["content"]
        self.assertEqual((err["ename"], err["evalue"]), ("ValueError", "bad value"))

    def test_silent(self):
        reply, msgs = self.run_cell("print x\nresult 1\nraise E e", silent=True)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["execution_count"], 0)
        self.assertEqual([m["msg_type"] for m in msgs], ["status", "status"])
        reply, _ = self.run_cell("print y")
        self.assertEqual(reply["content"]["execution_count"], 1)

    def test_execution_count_and_store_history(self):
        reply, msgs = self.run_cell("print a", store_history=False)
        self.assertEqual(reply["content"]["execution_count"], 0)
        self.assertEqual(self.stream_text(msgs), "a\n")
        self.run_cell("print b")
        hist = self.kc.history(hist_access_type="tail", n=10, reply=True)["content"]["history"]
        self.assertEqual([h[2] for h in hist], ["print b"])

    def test_display_and_clear(self):
        reply, msgs = self.run_cell("display a\nupdate b\nclear")
        types = [m["msg_type"] for m in msgs]
        self.assertEqual(types[2:5], ["display_data", "update_display_data", "clear_output"])
        self.assertEqual(msgs[2]["content"]["transient"], {"display_id": "d1"})
        self.assertEqual(msgs[3]["content"]["data"], {"text/plain": "b"})
        self.assertEqual(msgs[4]["content"], {"wait": False})

    def test_stdout_stderr_utf8_split(self):
        reply, msgs = self.run_cell("splitutf8\neprint err")
        self.assertEqual(self.stream_text(msgs), "h\u00e9llo\n")
        self.assertEqual(self.stream_text(msgs, "stderr"), "err\n")
        for m in msgs:
            if m["msg_type"] == "stream":
                self.assertNotIn("\ufffd", m["content"]["text"])

    def test_big_output(self):
        # 4 MB in one write: more than a pipe holds; the kernel must keep reading.
        reply, msgs = self.run_cell("big 4000000\nprint done", timeout=30)
        self.assertEqual(reply["content"]["status"], "ok")
        out = self.stream_text(msgs)
        self.assertEqual(len(out), 4000001 + 5)
        self.assertTrue(out.endswith("x\ndone\n"))

    def _raw_shell_send(self, key):
        import zmq
        from jupyter_client.session import Session

        ci = self.km.get_connection_info()
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(f"tcp://{ci['ip']}:{ci['shell_port']}")
        session = Session(key=key)
        session.send(sock, "kernel_info_request", {})
        got = sock.poll(1000)
        sock.close()
        return got

    def test_bad_signature_dropped(self):
        self.assertEqual(self._raw_shell_send(b"not-the-key"), 0, "kernel answered a forged message")
        self.assertIn("invalid signature", self.kernel_stderr())
        reply = self.kc.kernel_info(reply=True, timeout=TIMEOUT)
        self.assertEqual(reply["content"]["status"], "ok")

    def test_unsigned_message_dropped(self):
        self.assertEqual(self._raw_shell_send(b""), 0, "kernel answered an unsigned message")
        self.assertIn("missing signature", self.kernel_stderr())
        self.assertEqual(self.cell_output("print still here"), "still here\n")

    def test_history(self):
        for code in ["print one", "print two", "print one", "result 3"]:
            self.run_cell(code)
        h = self.kc.history(hist_access_type="tail", n=2, reply=True)["content"]
        self.assertEqual(h["status"], "ok")
        self.assertEqual([tuple(e) for e in h["history"]], [(1, 3, "print one"), (1, 4, "result 3")])
        h = self.kc.history(hist_access_type="range", session=0, start=2, stop=4,
                            reply=True)["content"]["history"]
        self.assertEqual([e[1] for e in h], [2, 3])
        h = self.kc.history(hist_access_type="search", pattern="print o*", unique=True,
                            reply=True)["content"]["history"]
        self.assertEqual([e[1] for e in h], [3])
        h = self.kc.history(hist_access_type="tail", n=1, output=True,
                            reply=True)["content"]["history"]
        self.assertEqual(h[0][2], ["result 3", "3"])

    def test_is_complete(self):
        def ask(code):
            return self.shell_reply(self.kc.is_complete(code))["content"]

        self.assertEqual(ask("int main() {"), {"status": "incomplete", "indent": "    "})
        self.assertEqual(ask("x;")["status"], "complete")
        self.assertEqual(ask("}")["status"], "invalid")
        self.assertEqual(ask("is_complete_error")["status"], "unknown")

    def test_complete_and_inspect(self):
        # "é pu": code points 0..3, the cursor (4) after "pu"; bytes differ (é is 2 bytes)
        c = self.kc.complete("\u00e9 pu", 4, reply=True, timeout=TIMEOUT)["content"]
        self.assertEqual(c["status"], "ok")
        self.assertEqual(sorted(c["matches"]), ["putchar", "puts"])
        self.assertEqual((c["cursor_start"], c["cursor_end"]), (2, 4))
        c = self.kc.inspect("\u00e9printf(", 3, reply=True, timeout=TIMEOUT)["content"]
        self.assertEqual(c["status"], "ok")
        self.assertTrue(c["found"])
        self.assertIn("printf", c["data"]["text/plain"])
        c = self.kc.inspect("nothing", 2, reply=True, timeout=TIMEOUT)["content"]
        self.assertFalse(c["found"])

    def test_stdin_allowed(self):
        msg_id = self.kc.execute("input Name: ", allow_stdin=True)
        req = self.kc.get_stdin_msg(timeout=TIMEOUT)
        self.assertEqual(req["msg_type"], "input_request")
        self.assertEqual(req["content"], {"prompt": "Name: ", "password": False})
        self.assertEqual(req["parent_header"]["msg_id"], msg_id)
        self.kc.input("Bob")
        reply = self.shell_reply(msg_id)
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(self.stream_text(self.collect(msg_id)), "got: Bob\n")

    def test_stdin_not_allowed(self):
        self.assertEqual(self.cell_output("input Name: ", allow_stdin=False), "EOF\n")

    def _interrupted(self, send_interrupt):
        msg_id, _ = self.start_cell("state\nloop")
        send_interrupt()
        reply = self.shell_reply(msg_id)
        self.assertEqual(reply["content"]["status"], "error")
        self.assertEqual(reply["content"]["ename"], "KeyboardInterrupt")
        self.collect(msg_id)
        # the executor survived: its state (request count) is kept
        self.assertEqual(self.cell_output("state"), "executes=2\n")

    def test_interrupt_signal_mode(self):
        self._interrupted(self.km.interrupt_kernel)  # kernelspec: interrupt_mode "signal"

    def test_interrupt_message_mode(self):
        import zmq

        def send():
            ci = self.km.get_connection_info()
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(f"tcp://{ci['ip']}:{ci['control_port']}")
            msg = self.kc.session.send(sock, "interrupt_request", {})
            self.assertTrue(sock.poll(TIMEOUT * 1000))
            _, rep = self.kc.session.recv(sock)
            sock.close()
            self.assertEqual(rep["msg_type"], "interrupt_reply")
            self.assertEqual(rep["parent_header"]["msg_id"], msg["header"]["msg_id"])
            self.assertEqual(rep["content"]["status"], "ok")
        self._interrupted(send)

    def test_interrupt_kills_stuck_executor(self):
        msg_id, seen = self.start_cell("pid\nhang")
        pid = int(self.stream_text(seen).strip().split("=")[1])
        t0 = time.monotonic()
        self.km.interrupt_kernel()
        reply = self.shell_reply(msg_id)
        elapsed = time.monotonic() - t0
        c = reply["content"]
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "KeyboardInterrupt")
        self.assertIn("lost", c["evalue"])
        # the kill came from the interrupt deadline (the event), after the
        # 2 s grace (a lower bound: load only makes it later) ...
        self.assertIn("did not stop within 2000 ms of the interrupt", c["evalue"])
        self.assertGreater(elapsed, 1.8)
        # ... and did come: a generous bound, only against a hang
        self.assertLess(elapsed, TIMEOUT)
        self.assertFalse(pid_alive(pid))
        self.collect(msg_id)
        self.assertEqual(self.cell_output("state"), "executes=1\n")  # a fresh executor

    def test_executor_crash(self):
        reply, msgs = self.run_cell("print before\nsegv")
        c = reply["content"]
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "Segmentation fault (SIGSEGV)")
        self.assertIn("crashed", c["evalue"])
        self.assertIn("re-run the cells", c["evalue"])
        self.assertEqual(self.stream_text(msgs), "before\n")
        errors = [m for m in msgs if m["msg_type"] == "error"]
        self.assertEqual(len(errors), 1)
        self.assertEqual(errors[0]["content"]["ename"], "Segmentation fault (SIGSEGV)")
        # the kernel keeps serving, with a fresh executor
        self.assertEqual(self.cell_output("state"), "executes=1\n")
        reply, _ = self.run_cell("print ok")
        self.assertEqual(reply["content"]["execution_count"], 3)

    def test_executor_exit(self):
        reply, _ = self.run_cell("exit 3")
        self.assertEqual(reply["content"]["ename"], "ExecutorExited")
        self.assertIn("exited with status 3", reply["content"]["evalue"])
        self.assertEqual(self.cell_output("print alive"), "alive\n")

    def sent_then_fail(self, name):
        """A cell that raises only after the test released it (a file,
        release(name)) and 0.3 s more: requests sent before the release
        are queued in the kernel by then, however slow the client is."""
        return "waitfile %s\nsleep 0.3\nraise RuntimeError boom" % os.path.join(self.tmp, name)

    def release(self, name):
        open(os.path.join(self.tmp, name), "w").close()

    def test_stop_on_error(self):
        ids = [self.kc.execute(self.sent_then_fail("first")),
               self.kc.execute("print a"),
               self.kc.execute("print b", stop_on_error=False)]
        self.release("first")
        statuses = [self.shell_reply(i)["content"]["status"] for i in ids]
        self.assertEqual(statuses, ["error", "aborted", "aborted"])
        for i in ids:
            self.collect(i)
        self.assertEqual(self.cell_output("print c"), "c\n")
        # stop_on_error=False: the next request still runs
        ids = [self.kc.execute(self.sent_then_fail("second"), stop_on_error=False),
               self.kc.execute("print d")]
        self.release("second")
        self.assertEqual([self.shell_reply(i)["content"]["status"] for i in ids], ["error", "ok"])

    def test_executor_environment(self):
        self.assertEqual(self.cell_output("env"), "display_fd=4 openblas=1 own_pgrp=True\n")

    def test_comm_info_and_comm_open(self):
        c = self.kc.comm_info(reply=True, timeout=TIMEOUT)["content"]
        self.assertEqual(c, {"status": "ok", "comms": {}})
        msg = self.kc.session.msg("comm_open", {"comm_id": "c-1", "target_name": "nope",
                                                "data": {}})
        self.kc.shell_channel.send(msg)
        closes = [m for m in self.collect(msg["header"]["msg_id"]) if m["msg_type"] == "comm_close"]
        self.assertEqual(closes[0]["content"]["comm_id"], "c-1")

    def test_comm_msg_and_comm_close_for_unknown_comms(self):
        # Messaging spec, "Custom Messages": a kernel without the target closes
        # the comm; messages to a comm it does not have are ignored. Each is
        # still wrapped in busy/idle, so a front end waiting on idle goes on.
        for msg_type, content in [
                ("comm_msg", {"comm_id": "never-opened", "data": {"x": 1}}),
                ("comm_close", {"comm_id": "never-opened", "data": {}})]:
            msg = self.kc.session.msg(msg_type, content)
            self.kc.shell_channel.send(msg)
            msgs = self.collect(msg["header"]["msg_id"])
            self.assertEqual([m["msg_type"] for m in msgs], ["status", "status"], msgs)
            self.assertEqual([m["content"]["execution_state"] for m in msgs], ["busy", "idle"])
        # no reply of theirs is waiting on shell: the next reply is kernel_info's
        msg_id = self.kc.kernel_info()
        self.assertEqual(self.shell_reply(msg_id)["msg_type"], "kernel_info_reply")
        self.assertNotIn("unknown message type", self.kernel_stderr())

    def test_comm_open_unknown_target_closed_then_messages_ignored(self):
        msg = self.kc.session.msg("comm_open", {"comm_id": "w-1", "target_name":
                                                "jupyter.widget", "data": {}})
        self.kc.shell_channel.send(msg)
        msgs = self.collect(msg["header"]["msg_id"])
        self.assertEqual([m["msg_type"] for m in msgs], ["status", "comm_close", "status"])
        self.assertEqual(msgs[1]["content"], {"comm_id": "w-1", "data": {}})
        after = self.kc.session.msg("comm_msg", {"comm_id": "w-1", "data": {}})
        self.kc.shell_channel.send(after)
        self.assertEqual([m["msg_type"] for m in self.collect(after["header"]["msg_id"])],
                         ["status", "status"])
        self.assertEqual(self.kc.comm_info(reply=True, timeout=TIMEOUT)["content"]["comms"], {})

    def test_control_channel_requests_publish_status(self):
        # JupyterLab waits for status messages of control requests too
        # (protocol 5.3: busy/idle for every request, whichever channel)
        msg = self.kc.session.msg("kernel_info_request", {})
        self.kc.control_channel.send(msg)
        reply = self.kc.control_channel.get_msg(timeout=TIMEOUT)
        self.assertEqual(reply["msg_type"], "kernel_info_reply")
        self.assertEqual(reply["parent_header"]["msg_id"], msg["header"]["msg_id"])
        states = [m["content"]["execution_state"] for m in self.collect(msg["header"]["msg_id"])]
        self.assertEqual(states, ["busy", "idle"])

    def test_kernel_info_for_jupyterlab(self):
        c = self.shell_reply(self.kc.kernel_info())["content"]
        # JSON false, not absent: Lab shows no debugger button
        self.assertIs(c["debugger"], False)
        li = c["language_info"]
        # Lab's CodeMirror 6 finds its C mode from the MIME type (text/x-csrc)
        self.assertEqual((li["mimetype"], li["codemirror_mode"], li["pygments_lexer"]),
                         ("text/x-csrc", "text/x-csrc", "c"))
        # the C standard cells are compiled with (ex_compile.c: -std=gnu11)
        with open(os.path.join(HERE, "..", "..", "kernel", "exec", "ex_compile.c")) as f:
            std = re.search(r'"-std=gnu(\d+)"', f.read()).group(1)
        self.assertEqual(li["version"], std)
        self.assertTrue(c["help_links"])
        for link in c["help_links"]:
            self.assertEqual(sorted(link), ["text", "url"])
            self.assertTrue(link["url"].startswith("https://"), link)

    def test_shutdown_stops_executor(self):
        pid = int(self.cell_output("pid").strip().split("=")[1])
        self.assertTrue(pid_alive(pid))
        proc = self.km.provisioner.process
        self.km.shutdown_kernel(now=False)
        self.assertEqual(proc.wait(timeout=TIMEOUT), 0)
        h.wait_until(lambda: not pid_alive(pid), timeout=TIMEOUT)
        self.assertFalse(pid_alive(pid))
        self.assertIn("shutdown requested", self.kernel_stderr())

    def test_restart(self):
        self.run_cell("print before")
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=TIMEOUT)
        reply, _ = self.run_cell("state")
        self.assertEqual(reply["content"]["execution_count"], 1)

    def test_connection_file_errors(self):
        good = {"shell_port": 50001, "control_port": 50002, "stdin_port": 50003,
                "iopub_port": 50004, "hb_port": 50005, "ip": "127.0.0.1", "key": "k",
                "transport": "tcp", "signature_scheme": "hmac-sha256"}
        cases = [("{not json", "(json)"),
                 (json.dumps({k: v for k, v in good.items() if k != "key"}), "key"),
                 (json.dumps(dict(good, hb_port="x")), "hb_port"),
                 (json.dumps(dict(good, signature_scheme="hmac-md5")), "signature_scheme"),
                 (json.dumps(dict(good, transport="udp")), "transport")]
        for text, field in cases:
            path = os.path.join(self.tmp, "bad-connection.json")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run([KERNEL_BIN, "-f", path], capture_output=True, text=True,
                               timeout=TIMEOUT)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(path, p.stderr)
            self.assertIn(f"field '{field}'", p.stderr)
        p = subprocess.run([KERNEL_BIN, "-f", "/nonexistent/c.json"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 2)
        self.assertIn("/nonexistent/c.json", p.stderr)

    def test_install_and_kernelspec_list(self):
        prefix = os.path.join(self.tmp, "prefix")
        p = subprocess.run([KERNEL_BIN, "install", "--prefix", prefix, "--name", "nbfork-xyz"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        d = os.path.join(prefix, "share", "jupyter", "kernels", "nbfork-xyz")
        with open(os.path.join(d, "kernel.json")) as f:
            spec = json.load(f)
        self.assertEqual(spec, {"argv": [os.path.realpath(KERNEL_BIN), "-f", "{connection_file}"],
                                "display_name": "C (nbfork)", "language": "c",
                                "interrupt_mode": "signal", "metadata": {}})
        self.assertTrue(os.path.exists(os.path.join(d, "logo-64x64.png")))
        env = dict(os.environ, JUPYTER_PATH=os.path.join(prefix, "share", "jupyter"))
        # `jupyter kernelspec list` of this Python's environment (the venv);
        # Debian's python3-jupyter-client has no script: the same application
        # runs as a module.
        script = os.path.join(os.path.dirname(sys.executable), "jupyter-kernelspec")
        cmd = ([script, "list"] if os.access(script, os.X_OK)
               else [sys.executable, "-m", "jupyter_client.kernelspecapp", "list"])
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("nbfork-xyz", p.stdout)
        # --user honours the Jupyter data dir of jupyter_core
        home = os.path.join(self.tmp, "home")
        env = {k: v for k, v in os.environ.items()
               if k not in ("JUPYTER_DATA_DIR", "XDG_DATA_HOME")}
        env["HOME"] = home
        p = subprocess.run([KERNEL_BIN, "install", "--user"], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(
            os.path.join(home, ".local/share/jupyter/kernels/nbfork/kernel.json")))
        p = subprocess.run([KERNEL_BIN, "install", "--name", "bad/name", "--prefix", prefix],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 2)

    def _own_kernel(self, executor, **km_kw):
        """A second kernel with its own settings (stopped by the caller)."""
        return h.start_kernel("nbfork-test", env={"NBFORK_EXECUTOR": executor},
                              stderr=subprocess.DEVNULL, ready_timeout=TIMEOUT, **km_kw)

    def test_executor_missing(self):
        km, kc = self._own_kernel("/nonexistent/nbfork-executor")
        try:
            reply = kc.execute("print x", reply=True, timeout=TIMEOUT)["content"]
            self.assertEqual(reply["status"], "error")
            self.assertEqual(reply["ename"], "ExecutorUnavailable")
            self.assertIn("/nonexistent/nbfork-executor", reply["evalue"])
            msg_id = kc.is_complete("int x;")
            while True:
                rep = kc.get_shell_msg(timeout=TIMEOUT)
                if rep["parent_header"]["msg_id"] == msg_id:
                    break
            self.assertEqual(rep["content"]["status"], "unknown")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=False)

    def test_ipc_transport(self):
        km, kc = self._own_kernel(FAKE_EXECUTOR, transport="ipc",
                                  ip=os.path.join(self.tmp, "kernel-ipc"))
        try:
            reply = kc.execute("print over ipc", reply=True, timeout=TIMEOUT)["content"]
            self.assertEqual(reply["status"], "ok")
            self.assertEqual(kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]["status"], "ok")
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=False)

    def test_version_and_help(self):
        p = subprocess.run([KERNEL_BIN, "--version"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("nbfork-kernel", p.stdout)
        p = subprocess.run([KERNEL_BIN, "--help"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("install", p.stdout)
        p = subprocess.run([KERNEL_BIN], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
