"""Two machines with real separate addresses (e2e.netns.*): two network
namespaces joined by a veth pair, node 0 at 10.77.N.1 and node 1 at
10.77.N.2, each running `nbfork launch --num_machines 2`. One test runs
a job across them; the other cuts the link mid-run: every worker must
fail within NBFORK_TIMEOUT_S with an error naming the lost node's
address, both launchers exit 1, nothing hangs. Namespaces and links are
deleted at the end.

Skipped with the reason when network namespaces cannot be created here
(needs root and `ip` from iproute2).
"""
import os
import re
import shutil
import subprocess
import time
import unittest

from test_cli import NBFORK, PROG, TIMEOUT

IP = shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
TIMEOUT_S = 8  # NBFORK_TIMEOUT_S of the workers: the bound on noticing the cut


def ip(*args):
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)


def can_make_namespaces():
    if not IP or os.geteuid() != 0:
        return False
    name = f"nbfprobe{os.getpid()}"
    if ip("netns", "add", name).returncode != 0:
        return False
    ip("netns", "del", name)
    return True


@unittest.skipUnless(can_make_namespaces(),
                     "network namespaces cannot be created here (needs root and iproute2)")
class TwoNamespaces(unittest.TestCase):
    def setUp(self):
        tag = os.getpid() % 200 + 20
        self.ns = [f"nbf{tag}a", f"nbf{tag}b"]
        self.dev = [f"nbfv{tag}a", f"nbfv{tag}b"]
        self.addr = [f"10.77.{tag}.1", f"10.77.{tag}.2"]
        for ns in self.ns:
            ip("netns", "del", ns)  # a leftover of a killed run
            self.assertEqual(ip("netns", "add", ns).returncode, 0)
        self.addCleanup(lambda: [ip("netns", "del", ns) for ns in self.ns])
        r = ip("link", "add", self.dev[0], "type", "veth", "peer", "name", self.dev[1])
        self.assertEqual(r.returncode, 0, r.stderr)
        for ns, dev, addr in zip(self.ns, self.dev, self.addr):
            for cmd in (["link", "set", dev, "netns", ns],
                        ["-n", ns, "addr", "add", addr + "/24", "dev", dev],
                        ["-n", ns, "link", "set", dev, "up"],
                        ["-n", ns, "link", "set", "lo", "up"]):
                r = ip(*cmd)
                self.assertEqual(r.returncode, 0, r.stderr)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
                    and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        self.env.update(NBFORK_CONFIG_FILE="/nonexistent/nbfork-test.yaml",
                        NBFORK_TIMEOUT_S=str(TIMEOUT_S))

    def launch(self, node, *prog):
        return subprocess.Popen([IP, "netns", "exec", self.ns[node], NBFORK, "launch",
                                 "--num_processes", "4", "--num_machines", "2", "--machine_rank",
                                 str(node), "--main_process_ip", self.addr[0], PROG, *prog],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)

    def test_job_across_two_addresses(self):
        nodes = [self.launch(1), self.launch(0)]
        outs = [p.communicate(timeout=TIMEOUT) for p in nodes]
        for p, (out, err) in zip(nodes, outs):
            self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("rank 0 of 4 (local rank 0 of 2): sum 10 ok", outs[1][0])
        self.assertIn("rank 3 of 4 (local rank 1 of 2): sum 10 ok", outs[0][0])

    def test_cut_link_fails_every_node_within_the_timeout(self):
        node1 = self.launch(1, "loop", "600")
        nodes = [self.launch(0, "loop", "600"), node1]  # index = machine_rank
        line = nodes[0].stdout.readline()  # the banner, then rank lines
        while "sum 10 ok" not in line:
            self.assertTrue(line, "node 0 ended before its workers ran")
            line = nodes[0].stdout.readline()
        time.sleep(0.5)  # collectives under way on both nodes
        r = ip("-n", self.ns[0], "link", "set", self.dev[0], "down")
        self.assertEqual(r.returncode, 0, r.stderr)
        cut = time.monotonic()
        outs = [p.communicate(timeout=TIMEOUT) for p in nodes]
        elapsed = time.monotonic() - cut
        self.assertLess(elapsed, 4 * TIMEOUT_S)  # a bound against a hang, not a speed check
        for node, (p, (out, err)) in enumerate(zip(nodes, outs)):
            self.assertEqual(p.returncode, 1, out + err)
            self.assertIn("nbfork launch: WorkerFailed", err)
            lost = self.addr[1 - node]
            # the launcher names the node it can no longer reach, first,
            # whatever the ranks' own timeouts named (ln_probe.h)
            self.assertIn(f"[{lost}]", err)
            self.assertIn("does not answer this node", err)
            # each node shows the positions of the ranks it can see (its
            # own records), after the probe's verdict on the other node
            self.assertIn("Where each rank was when the group failed", err)
            self.assertLess(err.index("does not answer this node"),
                            err.index("Where each rank was when the group failed"), err)
            shown = sorted(set(int(k) for k in re.findall(r"^  rank (\d): ", err, re.M)))
            self.assertEqual(shown, [2 * node, 2 * node + 1], err)
            self.assertIn("  ranks of the other 1 node: their records are on those nodes (see "
                          "their reports); the probe: a node does not answer (first line)", err)
            if node == 0:
                print(err[err.index("nbfork launch: WorkerFailed"):])


if __name__ == "__main__":
    unittest.main()
