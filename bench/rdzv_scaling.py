#!/usr/bin/python3
"""bench/rdzv_scaling: launch to the first collective, N local ranks, by
node (shared memory, the default) and through Gloo's full mesh
(NBFORK_SHM_COLLECTIVES=0), interleaved, with the load average; then the
model of the store's messages and rank 0's connections up to 4,096 ranks.

bench/rdzv_scaling.c (compiled here against the build tree's libnbfork)
forks the ranks; each creates the Accelerator and all-reduces one float;
the time is from the first fork to the slowest rank's all-reduce.

Usage: bench/rdzv_scaling.py [--build DIR] [--ranks 8,16,32,64,128]
                             [--gloo-max 32] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess

import nbf_cbench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)





def run(exe, n, shm):
    env = dict(os.environ, NBFORK_SHM_COLLECTIVES="1" if shm else "0", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([exe, str(n)], env=env, check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def model(n, nodes=1):
    """Messages through the store and connections, in closed form.

    By node (N ranks, M nodes of L = N/M): every rank but 0 sets its card
    (32 bytes) and rank 0 reads it (2(N-1)); rank 0 sets the layout (4
    bytes per rank) and each node's cards (1 + M), every other rank reads
    the layout and its node's cards (2(N-1)); the ok flags go to rank 0
    and the verdict back (2(N-1) + 1 + (N-1)); then Gloo's full mesh
    between the M leaders only (M sets, M(M-1) gets, M(M-1)/2
    connections, twice: the runtime's second, synchronous mesh). Bytes
    read by the ranks: 4N(N+1) for the layout, 32NL for the node cards.
    Gloo's full mesh of every rank: N sets, N(N-1) gets each carrying the
    N addresses of the rank read (gloo::rendezvous::Context::
    connectFullMesh, extractAddress), N(N-1)/2 connections, twice."""
    m = nodes
    l = n // m
    by_node_msgs = 7 * (n - 1) + 2 + m + (m + m * (m - 1) if m > 1 else 0)
    by_node_table_bytes = 4 * n * (n + 1) + 32 * n * l
    gloo_msgs = n + n * (n - 1)
    # rank 0's connections to its peers (the store's host, the launcher of
    # node 0 or rank 0, also keeps one client connection per rank: N, on
    # both paths)
    return {
        "by_node": {"store_messages": by_node_msgs, "table_bytes": by_node_table_bytes,
                    "rank0_connections": 2 * (m - 1)},  # the shim connects two meshes
        "gloo": {"store_messages": gloo_msgs, "rank0_connections": 2 * (n - 1)},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", default="8,16,32,64,128")
    ap.add_argument("--gloo-max", type=int, default=32,
                    help="largest N run through Gloo's full mesh (it grows as N^2)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    exe = nbf_cbench.build(args.build, "rdzv_scaling")
    ranks = [int(x) for x in args.ranks.split(",")]
    res = {}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for n in ranks:
            for shm in (True, False):
                if not shm and n > args.gloo_max:
                    continue
                print("round %d/%d: %d ranks, %s..." % (r + 1, args.rounds, n,
                                                        "by node" if shm else "gloo"), flush=True)
                res.setdefault((n, shm), []).append(run(exe, n, shm)["first_collective_s"])
                load.append(os.getloadavg()[0])
    print()
    print("launch to the first all-reduce, N local ranks (medians of %d rounds); load average "
          "(1 min) %s on %d CPUs" % (args.rounds, " ".join("%.1f" % x for x in load),
                                     os.cpu_count()))
    print("%6s %14s %14s %16s" % ("ranks", "by node", "gloo mesh", "by node / rank"))
    for n in ranks:
        a = statistics.median(res[(n, True)])
        g = res.get((n, False))
        print("%6d %12.3f s %14s %13.2f ms" % (n, a, "%.3f s" % statistics.median(g) if g else "-",
                                              1e3 * a / n))
    print()
    print("model (closed form, see model()): messages through the store, bytes of the tables "
          "read, rank 0's connections to peers (the store's host has N client connections on "
          "both paths)")
    print("%6s %6s %16s %14s %12s %16s %14s" % ("ranks", "nodes", "by node: msgs", "table bytes",
                                                "rank 0 peers", "gloo mesh: msgs", "rank 0 peers"))
    for n, m in ((64, 1), (128, 1), (512, 64), (4096, 512), (4096, 4096)):
        d = model(n, m)
        print("%6d %6d %16d %14d %12d %16d %14d" % (
            n, m, d["by_node"]["store_messages"], d["by_node"]["table_bytes"],
            d["by_node"]["rank0_connections"], d["gloo"]["store_messages"],
            d["gloo"]["rank0_connections"]))


if __name__ == "__main__":
    main()
