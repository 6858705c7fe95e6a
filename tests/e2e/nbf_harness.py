"""The one Python test harness of nbfork: every end-to-end test and benchmark
that drives a kernel uses it (tests/e2e, tests/exec, tests/kernel, bench).

It starts a kernel through jupyter_client (for the real kernel, a private
kernelspec in a temporary JUPYTER_PATH, so nothing depends on what is
installed), runs cells, answers stdin, interrupts, and collects the iopub
messages of a request up to its status idle.

Waiting: every wait is for an event (a message, a file, a process exit)
with a generous upper bound that only exists so a hang fails instead of
blocking ctest; no result depends on how fast a loaded machine is.

Ports: jupyter_client picks the kernel's ports by binding port 0 and
closing the socket, so another process can take one before the kernel
binds it; start_kernel then retries with fresh ports. Tests that hand a
port to a %launch cell use execute_with_port, which retries the same way.

Environment: NBFORK_BUILD_DIR (set by ctest) points at the build tree.
"""
import concurrent.futures
import contextlib
import json
import os
import queue
import shutil
import socket
import sys
import tempfile
import time
import unittest

from jupyter_client import KernelManager

BUILD_DIR = os.environ.get("NBFORK_BUILD_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
KERNEL = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork-kernel"))
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

READY_TIMEOUT = 60  # s: kernel start to kernel_info_reply, at most
PORT_IN_USE = "already in use"  # what a bind failure says (kernel, store)


# A launched function the tests share: each rank all-reduces a one and
# prints "rank R of W sum W" (needs <stdio.h>; nbfork.h is implicit).
REDUCE_ONES_C = r"""
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


def make_kernelspec_dir(kernel=None, name="nbfork", prefix="nbfork-test-ks-"):
    """A new JUPYTER_PATH directory holding a kernelspec `name` that runs
    `kernel` (default: the build tree's nbfork-kernel). Caller removes it."""
    d = tempfile.mkdtemp(prefix=prefix)
    ks = os.path.join(d, "kernels", name)
    os.makedirs(ks)
    with open(os.path.join(ks, "kernel.json"), "w") as f:
        json.dump({"argv": [kernel or KERNEL, "-f", "{connection_file}"],
                   "display_name": "C (nbfork)", "language": "c",
                   "interrupt_mode": "signal"}, f)
    return d


def install_bench_kernelspec(build_dir, bench):
    """For a benchmark: the build tree's nbfork-kernel as kernelspec
    "nbfork-bench" in a private folder put first on JUPYTER_PATH; returns
    the folder (the caller removes it). Exits naming the binary when it is
    not built."""
    kernel = os.path.join(os.path.abspath(build_dir), "bin", "nbfork-kernel")
    if not os.access(kernel, os.X_OK):
        sys.exit("%s: %s not found; build first (scripts/build.sh)" % (bench, kernel))
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    ks_dir = make_kernelspec_dir(kernel, name="nbfork-bench", prefix="nbfork-bench-ks-")
    os.environ["JUPYTER_PATH"] = ks_dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    return ks_dir


@contextlib.contextmanager
def kernelspec_env(env=None):
    """For the with block: os.environ has JUPYTER_PATH set to a new
    kernelspec directory (make_kernelspec_dir) and is updated by `env`
    (for clients such as nbclient that start kernels themselves); then
    both are restored and the directory removed. Yields the directory."""
    ks = make_kernelspec_dir()
    env = dict(env or {}, JUPYTER_PATH=ks)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield ks
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(ks, ignore_errors=True)


def start_kernel(kernel_name, env=None, stderr=None, tries=3, ready_timeout=READY_TIMEOUT,
                 **km_kw):
    """Start kernel `kernel_name` with os.environ updated by `env` (a None
    value removes the variable); return
    (KernelManager, started blocking client) once it answered kernel_info.
    A kernel that dies before that (a port taken between jupyter_client
    choosing it and the kernel binding it) is started again with new ports,
    `tries` times in all."""
    kenv = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            kenv.pop(k, None)
        else:
            kenv[k] = v
    for attempt in range(tries):
        km = KernelManager(kernel_name=kernel_name, **km_kw)
        km.start_kernel(env=kenv, stderr=stderr)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=ready_timeout)
            return km, kc
        except RuntimeError:
            kc.stop_channels()
            alive = km.is_alive()
            try:
                km.shutdown_kernel(now=True)
            except Exception:  # it is dead already; its files may be gone
                pass
            if alive or attempt == tries - 1:
                raise


def drain_iopub(kc, quiet=0.2):
    """Discard iopub messages until none arrives for `quiet` seconds."""
    while True:
        try:
            kc.get_iopub_msg(timeout=quiet)
        except queue.Empty:
            return


def shell_reply(kc, msg_id, timeout=60):
    """The shell reply (whole message) to request msg_id; other replies are
    skipped. queue.Empty when none comes within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        m = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def is_idle(m):
    return m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"


def collect(kc, msg_id, timeout=60, on_poll=None):
    """iopub messages whose parent is msg_id, up to and with its status
    idle. on_poll(outputs), when given, is called about every 20 ms while
    waiting (to answer stdin, or interrupt once something happened).
    TimeoutError when idle does not come within `timeout` seconds."""
    outputs, deadline = [], time.monotonic() + timeout
    while True:
        if on_poll:
            on_poll(outputs)
        if time.monotonic() > deadline:
            raise TimeoutError("no status idle within %ss" % timeout)
        try:
            m = kc.get_iopub_msg(timeout=0.02)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        outputs.append(m)
        if is_idle(m):
            return outputs


class Kernel:
    """A started kernel (default: the build's nbfork-kernel through a private
    kernelspec) with a blocking client: .km, .kc."""

    def __init__(self, env=None, kernel_name=None, stderr=None):
        self.ks_dir = None
        if kernel_name is None:
            self.ks_dir = make_kernelspec_dir()
            os.environ["JUPYTER_PATH"] = self.ks_dir
        try:
            self.km, self.kc = start_kernel(kernel_name or "nbfork", env=env, stderr=stderr)
        except BaseException:
            if self.ks_dir:
                shutil.rmtree(self.ks_dir, ignore_errors=True)
            raise

    def run(self, code, timeout=120, allow_stdin=False, answers=None, interrupt_after=None,
            interrupt_when=None, **kw):
        """Run `code`; return (reply content, iopub messages, stdin requests,
        times). input_requests are answered from `answers` (then ""). The
        kernel is interrupted once: interrupt_when(outputs) returned true
        (an event: the cell printed, a file appeared) or, with
        interrupt_after=S, S seconds after sending. times has 'sent',
        'interrupt' and 'idle' (time.monotonic()). TimeoutError on no idle."""
        answers = list(answers or [])
        msg_id = self.kc.execute(code, allow_stdin=allow_stdin, **kw)
        times, stdin_reqs = {"sent": time.monotonic()}, []

        def poll(outputs):
            try:
                stdin_reqs.append(self.kc.get_stdin_msg(timeout=0))
                self.kc.input(answers.pop(0) if answers else "")
            except queue.Empty:
                pass
            if "interrupt" in times:
                return
            due = interrupt_when(outputs) if interrupt_when else (
                interrupt_after is not None and
                time.monotonic() - times["sent"] >= interrupt_after)
            if due:
                self.km.interrupt_kernel()
                times["interrupt"] = time.monotonic()

        try:
            outputs = collect(self.kc, msg_id, timeout, poll)
        except TimeoutError:
            raise TimeoutError("no idle within %ss for %r" % (timeout, code[:80]))
        times["idle"] = time.monotonic()
        reply = shell_reply(self.kc, msg_id, timeout)
        return reply["content"], outputs, stdin_reqs, times

    def execute(self, code, timeout=120, allow_stdin=False, interrupt_after=None, **kw):
        """Run `code`; return (reply content, list of iopub messages).
        With interrupt_after=S, interrupt the kernel S seconds after sending."""
        reply, outputs, _, _ = self.run(code, timeout, allow_stdin,
                                        interrupt_after=interrupt_after, **kw)
        return reply, outputs

    def execute_with_port(self, fmt, tries=3, **kw):
        """execute(fmt % free_port()), again with a new port (`tries` in
        all) when the cell failed because another process took the port
        between free_port() and the bind."""
        for attempt in range(tries):
            reply, outputs = self.execute(fmt % free_port(), **kw)
            text = "\n".join(e["evalue"] + "\n".join(e.get("traceback", []))
                             for e in errors(outputs))
            if PORT_IN_USE not in text or attempt == tries - 1:
                return reply, outputs

    def close(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=False)
        finally:
            if self.ks_dir:
                shutil.rmtree(self.ks_dir, ignore_errors=True)


class KernelTestCase(unittest.TestCase):
    """A test with one real kernel of its own: setUp starts it (skipping
    where none is built) with kernel_environ(workdir) in a fresh temporary
    self.workdir; tearDown closes the kernel and removes the workdir. The
    e2e suites of cells, %launch cells and ranks derive from it."""
    workdir_prefix = "nbfork-e2e-"
    cell_timeout = 60  # s: a bound that only turns a hang into a failure

    def kernel_environ(self, workdir):
        """The kernel's extra environment (a dict of strings)."""
        return {}

    def setUp(self):
        if not os.access(KERNEL, os.X_OK):
            self.skipTest("no built nbfork-kernel at %s" % KERNEL)
        self.workdir = tempfile.mkdtemp(prefix=self.workdir_prefix)
        self.k = Kernel(env=self.kernel_environ(self.workdir))
        self.kc = self.k.kc

    def tearDown(self):
        self.k.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run_cell(self, code, timeout=None, **kw):
        """Execute `code` (Kernel.run: answers, interrupt_after,
        interrupt_when). Returns (reply content, iopub messages, stdin
        requests, times); a timeout fails the test."""
        try:
            return self.k.run(code, timeout=timeout or self.cell_timeout, **kw)
        except TimeoutError as e:
            self.fail(str(e))

    def run_ok(self, code, **kw):
        """run_cell for a cell that must succeed (its reply status ok)."""
        reply, outputs, stdin_reqs, times = self.run_cell(code, **kw)
        self.assertEqual(reply["status"], "ok",
                         "cell failed: %r\n%s" % (code, reply.get("traceback")))
        return reply, outputs, stdin_reqs, times


def stream_text(outputs, name="stdout"):
    return "".join(m["content"]["text"] for m in outputs
                   if m["msg_type"] == "stream" and m["content"]["name"] == name)


def errors(outputs):
    return [m["content"] for m in outputs if m["msg_type"] == "error"]


def results(outputs):
    """text/plain of every execute_result."""
    return [m["content"]["data"]["text/plain"] for m in outputs
            if m["msg_type"] == "execute_result"]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago. Another process
    may take it before it is bound: callers retry (execute_with_port)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def at_once(*calls):
    """Every call of `calls` at once, each in its own thread (the nodes of
    a multi-node launch: each blocks until the others joined); their
    results in order. A call that raised raises here."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def wait_until(predicate, timeout=30, interval=0.05):
    """Poll predicate() until it is true (returns True) or `timeout`
    seconds passed (returns its last value)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(interval)
    return True
