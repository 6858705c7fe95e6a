"""Slurm end to end (e2e.slurm.*): a real Slurm cluster on this machine,
started by the test (munged on a private socket, slurmctld, and two
slurmd with their own NodeName and port: Debian's Slurm is built with
multiple-slurmd support), running a 2-node job through `srun nbfork
launch` (one task per node: the launchers take num_machines, machine_rank
and main_process_ip from Slurm; node names that do not resolve are looked
up with `scontrol show node`) and through bare `srun` (each task takes
its place from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and
its port from SLURM_JOB_ID). Every daemon runs in the foreground as a
child of the test and is stopped and reaped at the end.

Skipped with the reason when Slurm or munge is missing (scripts/deps.sh
installs slurm-wlm and munge) or the daemons cannot start here (not root).
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from test_cli import NBFORK, PROG, TIMEOUT, free_port

TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MISSING = [t for t in TOOLS if not shutil.which(t, path=os.environ.get("PATH", "") +
                                                ":/usr/sbin:/sbin")]
NODES = ("nbfnode1", "nbfnode2")  # names that do not resolve: NodeAddr is used

CONF = """ClusterName=nbftest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
NodeName={n1} NodeAddr=127.0.0.1 NodeHostname={host} Port={p1} CPUs=2 State=UNKNOWN
NodeName={n2} NodeAddr=127.0.0.1 NodeHostname={host} Port={p2} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def sbin(tool):
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


@unittest.skipIf(MISSING, f"Slurm/munge not installed ({', '.join(MISSING)} missing; "
                          "apt-get install slurm-wlm munge)")
@unittest.skipUnless(os.geteuid() == 0, "the test cluster's daemons run as root")
class SlurmCluster(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="nbf-slurm-")
        d = self.tmp.name
        os.chmod(d, 0o755)
        os.mkdir(os.path.join(d, "state"))
        self.daemons = []
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.start(sbin("munged"), "-F", "--force", f"--key-file={key}",
                   f"--socket={d}/munge.sock", f"--pid-file={d}/munged.pid",
                   f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed")
        self.wait_for(lambda: os.path.exists(f"{d}/munge.sock"), "munged's socket")
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write(CONF.format(host=socket.gethostname(), d=d, ctld_port=free_port(),
                                n1=NODES[0], n2=NODES[1], p1=free_port(), p2=free_port()))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
                    and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        self.env.update(SLURM_CONF=conf, NBFORK_CONFIG_FILE="/nonexistent/nbfork-test.yaml")
        self.start(sbin("slurmctld"), "-D", "-c", "-f", conf)
        for n in NODES:
            self.start(sbin("slurmd"), "-D", "-c", "-N", n, "-f", conf)
        self.wait_for(self.nodes_idle, "both slurmd idle in sinfo")

    def start(self, *argv):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=getattr(self, "env", None))
        self.daemons.append(p)
        time.sleep(0.2)
        if p.poll() is not None:
            self.skipTest(f"{os.path.basename(argv[0])} could not start here (exit {p.returncode})")

    def wait_for(self, cond, what, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.2)
        self.fail(f"timed out waiting for {what}")

    def nodes_idle(self):
        r = subprocess.run([sbin("sinfo"), "-h", "-o", "%t %D"], capture_output=True, text=True,
                           env=self.env)
        return r.stdout.split() == ["idle", "2"]

    def tearDown(self):
        for p in reversed(self.daemons):  # slurmd, slurmctld, then munged
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.tmp.cleanup()

    def srun(self, *args, env=None):
        return subprocess.run([sbin("srun"), *args], capture_output=True, text=True,
                              env=env or self.env, timeout=TIMEOUT)

    def test_srun_nbfork_launch_two_nodes(self):
        r = self.srun("-N2", "--ntasks-per-node=1", NBFORK, "launch", "--num_processes", "4",
                      "--main_process_port", str(free_port()),
                      "--log_line_prefix_template", "node{node_rank}: ", PROG)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("Launching training on 2 CPU processes."), 2)
        for rank in range(4):
            self.assertIn(f"node{rank // 2}: rank {rank} of 4 (local rank {rank % 2} of 2): "
                          "sum 10 ok", r.stdout)

    def test_bare_srun_two_nodes(self):
        # nbfnode1 does not resolve on this machine (a real cluster's node
        # names do): the rendezvous address is given, the rest is Slurm's
        env = dict(self.env, MASTER_ADDR="127.0.0.1")
        r = self.srun("-N2", "-n4", PROG, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for rank in range(4):
            self.assertIn(f"rank {rank} of 4 (local rank {rank % 2} of 2): sum 10 ok", r.stdout)

    def test_bare_srun_two_nodes_without_master_addr(self):
        # issue 21 item 6: no MASTER_ADDR, node names that do not resolve:
        # the ranks take node nbfnode1's NodeAddr, as `srun nbfork launch` does
        env = {k: v for k, v in self.env.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
        r = self.srun("-N2", "-n4", PROG, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for rank in range(4):
            self.assertIn(f"rank {rank} of 4 (local rank {rank % 2} of 2): sum 10 ok", r.stdout)

    def sbatch(self, script, env=None):
        """Run one of examples/slurm/ through sbatch --wait; its output."""
        out = os.path.join(self.tmp.name, "job.out")
        r = subprocess.run([sbin("sbatch"), "--wait", f"--output={out}", "--chdir", REPO,
                            os.path.join(REPO, "examples", "slurm", script), PROG],
                           capture_output=True, text=True, env=env or self.env, timeout=TIMEOUT)
        with open(out) as f:
            text = f.read()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + text)
        return text

    def test_example_one_node_job(self):
        text = self.sbatch("one_node.sbatch", dict(self.env, NBFORK=NBFORK))
        self.assertIn("rank 1 of 2 (local rank 1 of 2): sum 3 ok", text)

    def test_example_multi_node_job(self):
        text = self.sbatch("multi_node.sbatch", dict(self.env, NBFORK=NBFORK))
        self.assertIn("rank 3 of 4 (local rank 1 of 2): sum 10 ok", text)

    def test_example_bare_srun_job(self):
        text = self.sbatch("bare_srun.sbatch", dict(self.env, MASTER_ADDR="127.0.0.1"))
        self.assertIn("rank 3 of 4 (local rank 1 of 2): sum 10 ok", text)


if __name__ == "__main__":
    unittest.main()
