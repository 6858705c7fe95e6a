"""check_estimate.py — `nbfork estimate-memory` against measured memory.

Runs the sharding memory test (test_shard memory STAGE NP: a 784-512-512-10
MLP trained 3 steps at ZeRO STAGE on NP ranks, printing the measured peak
model-state bytes of rank 0: acc_shard_state_bytes) and `nbfork
estimate-memory mnist_mlp --num_processes NP --dtypes float32`, and checks
that the table's "ZeRO stage STAGE/rank" cell is within 10% of the measured
peak (issue 23 item 5).

usage: check_estimate.py NBFORK TEST_SHARD STAGE NP
"""
import re
import subprocess
import sys

UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def main():
    nbfork, test_shard, stage, np_ = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    run = subprocess.run([test_shard, "memory", str(stage), np_], capture_output=True,
                         text=True, timeout=100)
    print(run.stdout, run.stderr)
    if run.returncode == 77:
        sys.exit(77)
    assert run.returncode == 0, "the memory test failed"
    measured = float(re.search(r"measured peak (\d+) bytes", run.stdout).group(1))
    table = subprocess.run([nbfork, "estimate-memory", "mnist_mlp", "--num_processes", np_,
                            "--dtypes", "float32"], capture_output=True, text=True, timeout=30,
                           check=True).stdout
    print(table)
    header = next(l for l in table.splitlines() if l.startswith("| dtype"))
    row = next(l for l in table.splitlines() if l.startswith("| float32"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    cell = cells[cols.index("ZeRO stage %d/rank" % stage)]
    value, unit = cell.split()
    printed = float(value) * UNITS[unit]
    diff = (measured - printed) / printed
    print("stage %d np %s: measured %.0f bytes, estimate-memory prints %s (%.0f bytes): %+.1f%%"
          % (stage, np_, measured, cell, printed, 100 * diff))
    assert abs(diff) <= 0.10, "measured peak differs from estimate-memory by more than 10%"


if __name__ == "__main__":
    main()
