#!/usr/bin/env python3
"""Run a notebook's code cells in nbfork's executor, without Jupyter.

Usage: exec_notebook.py NOTEBOOK.ipynb [--out OUT.ipynb] [--executor PATH]
           [--replace OLD=>NEW ...] [--skip N ...] [--expect-error N:TEXT]
           [--timeout S]

For machines without jupyter_client/nbclient (the GPU machines): the
Python standard library only. It starts build/bin/nbfork-executor with the
pipes the kernel gives it (common/nbf_wire.h: fd 0 stdin, fd 1/2 output,
fd 3 requests, fd 4 events, one JSON object per line; its own process
group; NBFORK_DISPLAY_FD=4) and sends each code cell as an "execute"
request, printing the cell's output as it comes. N counts code cells from
1 (their execution_count, which %launch names in its errors).

--replace OLD=>NEW  substitute text in every cell first (e.g. the launch
                    cell's num_processes on a one-GPU machine)
--skip N            do not run code cell N
--expect-error N:TEXT  code cell N must fail with TEXT in its ename, evalue
                    or traceback (it then counts as passed; the run stops
                    there, as a front end's "run all" does)
--out OUT.ipynb     save the notebook with the outputs it produced

Exit status: 0 when every cell ran as expected, 1 when one did not (or timed
out: the executor's process group is killed, nothing is left behind), 2 on
bad usage.
"""
import argparse
import json
import os
import selectors
import signal
import subprocess
import sys
import time


def start_executor(path):
    fds = [os.pipe() for _ in range(5)]  # stdin, stdout, stderr, requests, events
    child = {0: fds[0][0], 1: fds[1][1], 2: fds[2][1], 3: fds[3][0], 4: fds[4][1]}

    def setup():
        os.setpgrp()
        for target, fd in child.items():
            os.dup2(fd, target)

    env = dict(os.environ, NBFORK_DISPLAY_FD="4")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    proc = subprocess.Popen([path], preexec_fn=setup, pass_fds=(3, 4), env=env)
    for fd in child.values():
        os.close(fd)
    return proc, {"stdin": fds[0][1], "stdout": fds[1][0], "stderr": fds[2][0],
                  "requests": fds[3][1], "events": fds[4][0]}


def run_cell(proc, pipes, code, count, timeout):
    """Execute one cell; returns (reply, outputs)."""
    req = {"msg": "execute", "code": code, "execution_count": count, "silent": False,
           "allow_stdin": False}
    os.write(pipes["requests"], (json.dumps(req) + "\n").encode())
    sel = selectors.DefaultSelector()
    for name in ("stdout", "stderr", "events"):
        sel.register(pipes[name], selectors.EVENT_READ, name)
    partial = {"stdout": b"", "stderr": b"", "events": b""}
    outputs, reply, deadline = [], None, time.monotonic() + timeout
    while reply is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("cell %d ran longer than %d s" % (count, timeout))
        ready = sel.select(min(left, 1.0))
        if not ready and proc.poll() is not None:
            raise RuntimeError("the executor died (status %s) in cell %d" % (proc.returncode, count))
        for key, _ in ready:
            data = os.read(key.fileobj, 65536)
            if not data:
                sel.unregister(key.fileobj)
                if key.data == "events":
                    raise RuntimeError("the executor closed its event pipe in cell %d" % count)
                continue
            if key.data != "events":
                (sys.stdout if key.data == "stdout" else sys.stderr).write(data.decode(errors="replace"))
                sys.stdout.flush()
                outputs.append({"output_type": "stream", "name": key.data,
                                "text": data.decode(errors="replace")})
                continue
            partial["events"] += data
            *lines, partial["events"] = partial["events"].split(b"\n")
            for line in lines:
                ev = json.loads(line)
                if ev.get("msg") == "reply":
                    reply = ev
                elif ev.get("msg") in ("display_data", "execute_result"):
                    text = ev.get("data", {}).get("text/plain")
                    if text:
                        print(text)
                    outputs.append({"output_type": "display_data", "data": ev.get("data", {}),
                                    "metadata": {}})
    # output written before the reply is already in the pipes: drain it
    for name in ("stdout", "stderr"):
        os.set_blocking(pipes[name], False)
        try:
            while data := os.read(pipes[name], 65536):
                (sys.stdout if name == "stdout" else sys.stderr).write(data.decode(errors="replace"))
                outputs.append({"output_type": "stream", "name": name, "text": data.decode(errors="replace")})
        except BlockingIOError:
            pass
        os.set_blocking(pipes[name], True)
    if reply.get("status") == "error":
        outputs.append({"output_type": "error", "ename": reply.get("ename", ""),
                        "evalue": reply.get("evalue", ""), "traceback": reply.get("traceback", [])})
    return reply, outputs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook")
    ap.add_argument("--out")
    ap.add_argument("--executor", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", "build", "bin", "nbfork-executor"))
    ap.add_argument("--replace", action="append", default=[])
    ap.add_argument("--skip", action="append", type=int, default=[])
    ap.add_argument("--expect-error")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    a = ap.parse_args()
    if not os.access(a.executor, os.X_OK):
        print("exec_notebook: no executor at %s: build nbfork first (or --executor)" % a.executor,
              file=sys.stderr)
        return 2
    expect_n, expect_text = None, None
    if a.expect_error:
        n, _, expect_text = a.expect_error.partition(":")
        expect_n = int(n)
    with open(a.notebook) as f:
        nb = json.load(f)
    proc, pipes = start_executor(a.executor)
    status, count = 0, 0
    try:
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            count += 1
            code = "".join(cell["source"])
            for r in a.replace:
                old, _, new = r.partition("=>")
                code = code.replace(old, new)
            if count in a.skip or not code.strip():
                continue
            print("--- cell [%d]" % count, flush=True)
            reply, outs = run_cell(proc, pipes, code, count, a.timeout)
            cell["outputs"], cell["execution_count"] = outs, count
            if reply.get("status") != "error":
                if count == expect_n:
                    print("exec_notebook: cell [%d] was expected to fail" % count, file=sys.stderr)
                    status = 1
                    break
                continue
            text = "\n".join([reply.get("ename", ""), reply.get("evalue", "")] + reply.get("traceback", []))
            print("%s: %s" % (reply.get("ename"), reply.get("evalue")), file=sys.stderr)
            if count == expect_n and expect_text in text:
                print("exec_notebook: cell [%d] failed as expected" % count)
            else:
                status = 1
            break
        else:
            if expect_n is not None:
                print("exec_notebook: cell [%d] did not run into its expected error" % expect_n, file=sys.stderr)
                status = 1
    except (TimeoutError, RuntimeError) as e:
        print("exec_notebook: %s" % e, file=sys.stderr)
        status = 1
    finally:
        os.close(pipes["requests"])  # EOF on fd 3: the executor exits
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(nb, f, indent=1)
                f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
