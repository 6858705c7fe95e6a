#!/usr/bin/env python3
"""Execute a notebook headless with nbclient, printing each cell's output
to the terminal as it arrives, and save the executed notebook.

Usage: run_notebook.py IN.ipynb OUT.ipynb [--kernel NAME] [--timeout S]

Exit status: 0 when every cell ran, 1 when a cell failed (its error is
printed), 2 on bad usage. Rich outputs (progress bars, charts) are shown
by their text/plain form, updated in place on a terminal.
"""
import argparse
import re
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


class LiveClient(NotebookClient):
    """NotebookClient that echoes every output message as it is received."""

    def output(self, outs, msg, display_id, cell_index):
        show(msg)
        return super().output(outs, msg, display_id, cell_index)

    def process_message(self, msg, cell, cell_index):
        if msg["msg_type"] == "update_display_data":
            show(msg)
        return super().process_message(msg, cell, cell_index)


_last_was_update = False
_shown = {}  # display_id -> (text, time) of what was last printed for it


def _worth_printing(msg, text):
    """On a terminal every update redraws the line; in a log, print an
    update of a display only when it changed and is complete ("N/N") or
    2 s passed since its last line, so a progress bar does not flood it."""
    did = msg["content"].get("transient", {}).get("display_id")
    last_text, last_t = _shown.get(did, (None, 0.0))
    if text == last_text:
        return False
    now = time.time()
    if msg["msg_type"] == "update_display_data" and not sys.stdout.isatty():
        if not re.search(r"\b(\d+)/\1\b", text) and now - last_t < 2.0:
            return False
    _shown[did] = (text, now)
    return True


def show(msg):
    """Print one iopub output message in a terminal-friendly way."""
    global _last_was_update
    kind, c = msg["msg_type"], msg["content"]
    if kind == "stream":
        text = c["text"]
    elif kind in ("display_data", "update_display_data", "execute_result"):
        data = c.get("data", {})
        if "text/plain" not in data:
            return  # a chart: nothing to print on a terminal
        text = data["text/plain"]
        if kind != "execute_result" and not _worth_printing(msg, text):
            return
        if kind == "update_display_data" and sys.stdout.isatty():
            sys.stdout.write("\r\x1b[K" + text)
            sys.stdout.flush()
            _last_was_update = True
            return
        text += "\n"
    elif kind == "error":
        text = "%s: %s\n%s\n" % (c["ename"], c["evalue"], "\n".join(c.get("traceback", [])))
    else:
        return
    if _last_was_update:
        sys.stdout.write("\n")
        _last_was_update = False
    target = sys.stderr if kind == "stream" and c.get("name") == "stderr" else sys.stdout
    target.write(text)
    target.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook")
    ap.add_argument("output")
    ap.add_argument("--kernel", default="nbfork")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = ap.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    client = LiveClient(nb, kernel_name=args.kernel, timeout=args.timeout,
                        resources={"metadata": {"path": "."}})
    status = 0
    try:
        client.execute()
    except CellExecutionError as e:
        print("\nA cell failed; see its error above. (%s)" % str(e).splitlines()[-1:], file=sys.stderr)
        status = 1
    finally:
        nbformat.write(nb, args.output)
        print("executed notebook saved to %s" % args.output)
    return status


if __name__ == "__main__":
    sys.exit(main())
