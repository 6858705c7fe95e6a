"""Shared helpers for nbfork's end-to-end tests: start the real kernel from
the build tree through jupyter_client (a private kernelspec in a temporary
JUPYTER_PATH, so the tests never depend on what is installed), run cells and
collect their iopub messages.

Environment: NBFORK_BUILD_DIR (set by ctest) points at the build tree.
"""
import json
import os
import queue
import shutil
import sys
import tempfile
import time

from jupyter_client import KernelManager

BUILD_DIR = os.environ.get("NBFORK_BUILD_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
KERNEL = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork-kernel"))
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def make_kernelspec_dir():
    """A JUPYTER_PATH directory holding a kernelspec `nbfork` for the build."""
    d = tempfile.mkdtemp(prefix="nbfork-test-ks-")
    ks = os.path.join(d, "kernels", "nbfork")
    os.makedirs(ks)
    with open(os.path.join(ks, "kernel.json"), "w") as f:
        json.dump({"argv": [KERNEL, "-f", "{connection_file}"], "display_name": "C (nbfork)",
                   "language": "c", "interrupt_mode": "signal"}, f)
    return d


class Kernel:
    """A started nbfork kernel with a blocking client."""

    def __init__(self, env=None):
        self.ks_dir = make_kernelspec_dir()
        os.environ["JUPYTER_PATH"] = self.ks_dir
        self.km = KernelManager(kernel_name="nbfork")
        kenv = dict(os.environ)
        kenv.update(env or {})
        self.km.start_kernel(env=kenv)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=30)

    def execute(self, code, timeout=120, allow_stdin=False, interrupt_after=None):
        """Run `code`; return (reply content, list of iopub messages).
        With interrupt_after=S, interrupt the kernel S seconds after sending."""
        msg_id = self.kc.execute(code, allow_stdin=allow_stdin)
        outputs, deadline = [], time.time() + timeout
        interrupted = interrupt_after is None
        sent = time.time()
        idle = False
        while not idle:
            if not interrupted and time.time() - sent >= interrupt_after:
                self.km.interrupt_kernel()
                interrupted = True
            if time.time() > deadline:
                raise TimeoutError("no idle within %ss for %r" % (timeout, code[:80]))
            try:
                m = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                continue
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            outputs.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        reply = self.kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=timeout)
        return reply["content"], outputs

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=False)
        finally:
            shutil.rmtree(self.ks_dir, ignore_errors=True)


def stream_text(outputs, name="stdout"):
    return "".join(m["content"]["text"] for m in outputs
                   if m["msg_type"] == "stream" and m["content"]["name"] == name)


def errors(outputs):
    return [m["content"] for m in outputs if m["msg_type"] == "error"]


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
