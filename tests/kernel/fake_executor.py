#!/usr/bin/python3
"""A stand-in for nbfork-executor that speaks nbf_wire.h, for the kernel's
end-to-end tests (NBFORK_EXECUTOR points here).

fd 0 stdin pipe, fd 1/2 stdout/stderr pipes, fd 3 requests (JSON lines),
fd 4 events (JSON lines). A cell is a list of commands, one per line:

  print TEXT        write TEXT + newline to stdout
  eprint TEXT       write TEXT + newline to stderr
  splitutf8         write "h\xc3" then, 50 ms later, "\xa9llo\n" (é split)
  big N             write N bytes of 'x' + newline to stdout in one go
  result TEXT       execute_result with text/plain TEXT
  display TEXT      display_data text/plain TEXT, display_id "d1"
  update TEXT       update_display_data for "d1"
  clear             clear_output wait=false
  raise NAME MSG    error reply
  input PROMPT      input_request; print "got: LINE" (or "EOF")
  loop              spin until SIGINT -> KeyboardInterrupt reply
  hang              ignore SIGINT and spin forever
  segv              die of SIGSEGV
  exit N            _exit(N)
  sleep S           sleep S seconds
  waitfile PATH     wait until PATH exists (60 s at most): an event the test sends
  state             print how many execute requests this process saw
  pid               print this process's pid
  env               print NBFORK_DISPLAY_FD, OPENBLAS_NUM_THREADS, own-pgrp
"""
import json
import os
import signal
import sys
import time

WORDS = ["printf", "print", "puts", "putchar", "malloc"]
executes = 0


def out(fd, data):
    if isinstance(data, str):
        data = data.encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def event(obj):
    out(4, json.dumps(obj) + "\n")


def reply(**kw):
    event(dict(msg="reply", **kw))


def run_cell(req):
    global executes
    executes += 1
    for line in req["code"].splitlines():
        cmd, _, arg = line.lstrip().partition(" ")
        if not cmd:
            continue
        if cmd == "print":
            out(1, arg + "\n")
        elif cmd == "eprint":
            out(2, arg + "\n")
        elif cmd == "splitutf8":
            out(1, b"h\xc3")
            time.sleep(0.05)
            out(1, b"\xa9llo\n")
        elif cmd == "big":
            out(1, b"x" * int(arg) + b"\n")
        elif cmd == "result":
            event({"msg": "execute_result", "data": {"text/plain": arg}, "metadata": {}})
        elif cmd in ("display", "update"):
            event({"msg": "display_data" if cmd == "display" else "update_display_data",
                   "data": {"text/plain": arg}, "metadata": {},
                   "transient": {"display_id": "d1"}})
        elif cmd == "clear":
            event({"msg": "clear_output", "wait": False})
        elif cmd == "raise":
            name, _, msg = arg.partition(" ")
            return reply(status="error", ename=name, evalue=msg,
                         traceback=[f"{name}: {msg}"])
        elif cmd == "input":
            if not req.get("allow_stdin"):
                out(1, "EOF\n")  # nbf_wire.h: stdin is at EOF when not allowed
                continue
            event({"msg": "input_request", "prompt": arg, "password": False})
            got = b""
            while not got.endswith(b"\n"):
                c = os.read(0, 1)
                if not c:
                    break
                got += c
            out(1, ("got: " + got.decode().rstrip("\n") + "\n") if got else "EOF\n")
        elif cmd == "loop":
            while True:
                pass
        elif cmd == "hang":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            while True:
                time.sleep(0.01)
        elif cmd == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(5)
        elif cmd == "exit":
            os._exit(int(arg))
        elif cmd == "sleep":
            time.sleep(float(arg))
        elif cmd == "waitfile":
            for _ in range(6000):
                if os.path.exists(arg):
                    break
                time.sleep(0.01)
        elif cmd == "state":
            out(1, f"executes={executes}\n")
        elif cmd == "pid":
            out(1, f"pid={os.getpid()}\n")
        elif cmd == "env":
            out(1, "display_fd={} openblas={} own_pgrp={}\n".format(
                os.environ.get("NBFORK_DISPLAY_FD"), os.environ.get("OPENBLAS_NUM_THREADS"),
                os.getpgid(0) == os.getpid()))
        else:
            return reply(status="error", ename="UnknownCommand", evalue=cmd, traceback=[cmd])
    reply(status="ok")


def word_at(code, pos):
    start = pos
    while start > 0 and (code[start - 1].isalnum() or code[start - 1] == "_"):
        start -= 1
    return start


def handle(req):
    kind = req["msg"]
    if kind == "execute":
        try:
            run_cell(req)
        except KeyboardInterrupt:
            reply(status="error", ename="KeyboardInterrupt", evalue="interrupted",
                  traceback=["KeyboardInterrupt"])
    elif kind == "complete":
        code = req["code"].encode()
        pos = req["cursor_pos"]  # bytes
        start = word_at(code.decode("latin-1"), pos)
        prefix = code[start:pos].decode()
        reply(status="ok", matches=[w for w in WORDS if w.startswith(prefix)],
              cursor_start=start, cursor_end=pos, metadata={})
    elif kind == "inspect":
        code = req["code"].encode()
        pos = req["cursor_pos"]
        start = word_at(code.decode("latin-1"), pos)
        end = pos
        while end < len(code) and chr(code[end]).isalnum():
            end += 1
        word = code[start:end].decode()
        if word in WORDS:
            reply(status="ok", found=True, data={"text/plain": f"{word}: a C function"},
                  metadata={})
        else:
            reply(status="ok", found=False, data={}, metadata={})
    elif kind == "is_complete":
        code = req["code"]
        if code == "is_complete_error":
            reply(status="error", ename="Oops", evalue="", traceback=[])
        elif code.count("{") > code.count("}"):
            reply(status="incomplete", indent="    ")
        elif code.count("}") > code.count("{"):
            reply(status="invalid")
        else:
            reply(status="complete")
    else:
        reply(status="error", ename="UnknownRequest", evalue=kind, traceback=[])


def main():
    requests = os.fdopen(3, "rb", buffering=0)
    buf = b""
    while True:
        try:
            while b"\n" not in buf:
                chunk = requests.read(65536)
                if not chunk:
                    return 0  # EOF on fd 3: shut down (nbf_wire.h)
                buf += chunk
            line, _, buf = buf.partition(b"\n")
            handle(json.loads(line))
        except KeyboardInterrupt:
            continue  # a late SIGINT while idle


if __name__ == "__main__":
    sys.exit(main())
