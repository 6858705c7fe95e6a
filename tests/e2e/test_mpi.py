"""Open MPI end to end (e2e.mpi.*): programs started by a real `mpirun`
take their place from OMPI_COMM_WORLD_* (the runtime, acc_core.c), and
`nbfork launch --mpirun_hostfile` builds the mpirun command as Accelerate
does. Skipped with the reason when Open MPI is not installed
(scripts/deps.sh installs openmpi-bin)."""
import os
import shutil
import subprocess
import tempfile
import unittest

from test_cli import NBFORK, PROG, TIMEOUT, free_port

MPIRUN = shutil.which("mpirun")


@unittest.skipUnless(MPIRUN, "Open MPI's mpirun is not installed (apt-get install openmpi-bin)")
class OpenMPI(unittest.TestCase):
    def setUp(self):
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
                    and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
        self.env["MASTER_PORT"] = str(free_port())
        self.env["NBFORK_CONFIG_FILE"] = "/nonexistent/nbfork-test.yaml"

    def mpirun(self, n, *args):
        return subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                               PROG, *args], capture_output=True, text=True, env=self.env,
                              timeout=TIMEOUT)

    def check(self, r, n):
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for rank in range(n):
            total = n * (n + 1) // 2
            self.assertIn(f"rank {rank} of {n} (local rank {rank} of {n}): sum {total} ok",
                          r.stdout)

    def test_mpirun_np_2(self):
        self.check(self.mpirun(2), 2)

    def test_mpirun_np_3(self):
        self.check(self.mpirun(3), 3)

    def test_failing_rank_ends_the_job(self):
        r = self.mpirun(2, "fail", "1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("rank 1 fails on purpose", r.stderr)

    def test_nbfork_launch_mpirun_hostfile(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as hosts:
            hosts.write("localhost slots=2\n")
            hosts.flush()
            r = subprocess.run([NBFORK, "launch", "--mpirun_hostfile", hosts.name,
                                "--num_processes", "2", "--main_process_port",
                                self.env["MASTER_PORT"], "--mixed_precision", "bf16", "sh", "-c",
                                f"echo precision=$ACCELERATE_MIXED_PRECISION && exec {PROG}"],
                               capture_output=True, text=True, env=self.env, timeout=TIMEOUT)
        self.check(r, 2)
        self.assertEqual(r.stdout.count("precision=bf16"), 2)

    def test_example_scripts(self):
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        env = dict(self.env, NBFORK=NBFORK)
        r = subprocess.run([os.path.join(repo, "examples", "mpi", "run.sh"), "3", PROG],
                           capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=repo)
        self.check(r, 3)
        env["MASTER_PORT"] = str(free_port())
        r = subprocess.run([os.path.join(repo, "examples", "mpi", "hostfile_launch.sh"),
                            os.path.join(repo, "examples", "mpi", "hostfile"), PROG],
                           capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=repo)
        self.check(r, 2)


if __name__ == "__main__":
    unittest.main()
