"""End-to-end tests of the `nbfork` command line (build/bin/nbfork):
launch of a program (output, failures, restarts, Ctrl-C, bad input),
the config file, env, test, a notebook run headless, and a program
started by hand with Slurm's environment (what bare `srun prog` sets).

Each test method is its own ctest entry, e2e.cli.METHOD. Waits are for
events (process exit) with generous bounds; nothing asserts a duration.
"""
import json
import os
import pty
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from nbf_harness import BUILD_DIR

NBFORK = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork"))
PROG = os.path.abspath(os.path.join(BUILD_DIR, "bin", "nbfork-allreduce"))
TIMEOUT = 120  # s: upper bound of any one command


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machines_launch(*args):
    """A free port, and `launch ARGS --main_process_port PORT`: the words
    every machine of one multi-machine launch shares."""
    port = str(free_port())
    return port, ["launch", *args, "--main_process_port", port]


class CliCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="nbf-cli-")
        # a private config path: the machine's ~/.cache config never applies
        self.config = os.path.join(self.tmp.name, "default_config.yaml")
        self.env = dict(os.environ, NBFORK_CONFIG_FILE=self.config)
        for k in list(self.env):
            if k.startswith(("SLURM_", "OMPI_", "PMI_")) or k in ("RANK", "WORLD_SIZE"):
                del self.env[k]

    def tearDown(self):
        self.tmp.cleanup()

    def nbfork(self, *args, env=None, stdin=None):
        return subprocess.run([NBFORK, *args], capture_output=True, text=True, env=env or self.env,
                              timeout=TIMEOUT, input=stdin)

    def start(self, *args):
        """`nbfork ARGS` started, not waited for (another machine of a
        launch); its stdout and stderr are pipes."""
        return subprocess.Popen([NBFORK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)

    def path_with_scontrol(self, script):
        """A PATH whose `scontrol` is the shell script `script` (Slurm's
        answer, faked), before the machine's own PATH."""
        bindir = os.path.join(self.tmp.name, "bin")
        os.makedirs(bindir, exist_ok=True)
        with open(os.path.join(bindir, "scontrol"), "w") as f:
            f.write("#!/bin/sh\n" + script)
        os.chmod(os.path.join(bindir, "scontrol"), 0o755)
        return bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")

    def assert_usage_error(self, r, *words):
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)  # one line
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(r.stdout, "")  # nothing started: no banner


class Launch(CliCase):
    def launch_sleepers(self):
        """`nbfork launch` of two workers that sleep once their all-reduce
        printed; returns the Popen once both printed."""
        p = subprocess.Popen([NBFORK, "launch", "--num_processes", "2", "--main_process_port",
                              "0", PROG, "sleep"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env)
        seen = ""
        while seen.count("sum 3 ok") < 2:
            line = p.stdout.readline()
            self.assertTrue(line, "nbfork ended before the workers printed")
            seen += line
        return p

    def test_launch_program_sets_the_world_and_forwards_output(self):
        r = self.nbfork("launch", "--num_processes", "3", "--main_process_port", "0",
                        "--log_line_prefix_template", "[{rank}] ", PROG)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Launching training on 3 CPU processes.", r.stdout)
        for rank in range(3):
            self.assertIn(f"[{rank}] rank {rank} of 3 (local rank {rank} of 3): sum 6 ok", r.stdout)

    def test_launch_two_machines_on_one_host(self):
        port, common = machines_launch("--num_processes", "4", "--num_machines", "2")
        node1 = self.start(*common, "--machine_rank", "1", PROG)
        r0 = self.nbfork(*common, "--machine_rank", "0", PROG)
        out1, err1 = node1.communicate(timeout=TIMEOUT)
        self.assertEqual(r0.returncode, 0, r0.stderr)
        self.assertEqual(node1.returncode, 0, err1)
        self.assertIn("rank 0 of 4 (local rank 0 of 2): sum 10 ok", r0.stdout)
        self.assertIn("rank 3 of 4 (local rank 1 of 2): sum 10 ok", out1)

    def test_machines_that_differ_are_named_in_the_commands_words(self):
        # issue 21 item 6: `--num_processes 4 on machine 0, 2 on machine 1`,
        # not %launch's `num_processes: node 0 has 2` and "launch cells"
        port, common = machines_launch("--num_machines", "2")
        node1 = self.start(*common, "--num_processes", "2", "--machine_rank", "1", PROG)
        r0 = self.nbfork(*common, "--num_processes", "4", "--machine_rank", "0", PROG)
        node1.communicate(timeout=TIMEOUT)
        self.assertEqual(r0.returncode, 1, r0.stderr)
        self.assertIn("--num_processes 4 on machine 0, 2 on machine 1", r0.stderr)
        self.assertIn("`nbfork launch` needs the same --num_machines, --num_processes", r0.stderr)
        self.assertNotIn("launch cell", r0.stderr)
        self.assertNotIn("node 0 has", r0.stderr)

    def test_rendezvous_secret_mismatch_in_the_commands_words(self):
        # issue 21 item 6: the rendezvous' messages name --rdzv_conf and
        # machines, not %launch's rdzv_conf=secret= and "launch cells"
        port, common = machines_launch("--num_processes", "2", "--num_machines", "2")
        node1 = self.start(*common, "--machine_rank", "1", "--rdzv_conf", "join_timeout=3", PROG)
        r0 = self.nbfork(*common, "--machine_rank", "0", "--rdzv_conf",
                         "secret=alpha,join_timeout=3", PROG)
        _, err1 = node1.communicate(timeout=TIMEOUT)
        self.assertEqual(r0.returncode, 1, r0.stderr)
        self.assertEqual(node1.returncode, 1, err1)
        self.assertIn("machine 1 of --num_machines 2 did not join within 3 s", r0.stderr)
        self.assertIn("while this machine has one (--rdzv_conf secret=...): the machines' "
                      "secrets differ", r0.stderr)
        self.assertIn("requires a rendezvous secret and this machine has none", err1)
        for err in (r0.stderr, err1):
            self.assertIn("Give every machine the same rendezvous secret (--rdzv_conf secret=... "
                          "in each `nbfork launch`", err)
            self.assertNotIn("launch cell", err)
            self.assertNotIn("rdzv_conf=secret", err)

    def test_absent_machine_0_in_the_commands_words(self):
        # no machine 0 at all: its store never answers
        port = free_port()
        r = self.nbfork("launch", "--num_processes", "2", "--num_machines", "2",
                        "--machine_rank", "1", "--main_process_port", str(port),
                        "--rdzv_conf", "join_timeout=1", PROG)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"machine 0's store at --main_process_ip 127.0.0.1 --main_process_port "
                      f"{port} did not answer within 1 s (--rdzv_conf join_timeout). Start "
                      "`nbfork launch --machine_rank 0`", r.stderr)
        self.assertNotIn("launch cell", r.stderr)

    def test_machine_0_without_verdict_in_the_commands_words(self):
        # machine 0 waits for a third machine longer than machine 1 waits
        # for its verdict
        port, common = machines_launch("--num_processes", "3", "--num_machines", "3")
        node0 = self.start(*common, "--machine_rank", "0", "--rdzv_conf", "join_timeout=60", PROG)
        try:
            r1 = self.nbfork(*common, "--machine_rank", "1", "--rdzv_conf", "join_timeout=1",
                             PROG)
        finally:
            node0.terminate()
            node0.communicate(timeout=TIMEOUT)
        self.assertEqual(r1.returncode, 1, r1.stderr)
        self.assertIn("machine 0 (store at 127.0.0.1:%s) gave no verdict within 1 s" % port,
                      r1.stderr)
        self.assertIn("Run `nbfork launch` on every machine again.", r1.stderr)
        self.assertNotIn("launch cell", r1.stderr)

    def test_failed_worker_stops_the_others_and_exits_1(self):
        r = self.nbfork("launch", "--num_processes", "2", "--main_process_port", "0", PROG,
                        "fail", "1")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("nbfork launch: WorkerFailed: rank 1", r.stderr)
        self.assertIn("exited with code 3", r.stderr)
        self.assertIn("rank 1 fails on purpose", r.stderr)  # its stderr tail

    def test_sigterm_is_reported_as_terminated(self):
        # issue 21 item 6: a kill or a scheduler's SIGTERM is no KeyboardInterrupt
        p = self.launch_sleepers()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 143, err)
        self.assertIn("nbfork launch: terminated by SIGTERM: every worker was stopped", err)
        self.assertNotIn("KeyboardInterrupt", err)

    def test_non_executable_program_is_told_from_a_missing_one(self):
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write("print('hi')\n")
        r = self.nbfork("launch", "--num_processes", "2", script)
        self.assert_usage_error(r, "program '%s' exists but is not executable" % script,
                                "chmod +x")
        r = self.nbfork("launch", "--num_processes", "2", script + ".missing")
        self.assert_usage_error(r, "not found")

    def test_max_restarts_runs_the_group_again(self):
        r = self.nbfork("launch", "--num_processes", "2", "--main_process_port", "0",
                        "--max_restarts", "1", PROG, "fail", "0")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("restart 1/1: starting the worker group again", r.stdout)
        self.assertEqual(r.stdout.count("\nrank 0 of 2 (local"), 2, r.stdout)

    def test_ctrl_c_stops_every_worker_and_leaves_none(self):
        p = self.launch_sleepers()
        workers = [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)],
                                                  capture_output=True, text=True).stdout.split()]
        self.assertEqual(len(workers), 2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("KeyboardInterrupt", err)
        for pid in workers:  # reaped by nbfork: gone, not zombies
            self.assertFalse(os.path.exists(f"/proc/{pid}"), pid)

    def test_debug_cpu_and_gpu_ids_reach_the_workers(self):
        show = "echo cvd=[$CUDA_VISIBLE_DEVICES] cpu=$ACCELERATE_USE_CPU omp=$OMP_NUM_THREADS"
        r = self.nbfork("launch", "--debug", "--num_processes", "2", "--main_process_port", "0",
                        "--gpu_ids", "1,0", "sh", "-c", show)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ACCELERATE_DEBUG_MODE: test launch passed.", r.stdout)
        self.assertEqual(r.stdout.count("cvd=[1,0] cpu= omp=1"), 2)
        r = self.nbfork("launch", "--cpu", "--num_processes", "2", "--main_process_port", "0",
                        "sh", "-c", show)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("cvd=[] cpu=true omp=1"), 2)

    def test_quiet_prints_no_banner(self):
        r = self.nbfork("launch", "-q", "--num_processes", "2", "--main_process_port", "0", PROG)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("Launching training", r.stdout)
        self.assertIn("sum 3 ok", r.stdout)


class BadInput(CliCase):
    def test_unknown_option(self):
        self.assert_usage_error(self.nbfork("launch", "--num_procs", "2", PROG),
                                "unknown option '--num_procs'", "num_processes")

    def test_missing_program(self):
        self.assert_usage_error(self.nbfork("launch", "--num_processes", "2", "./no-such-prog"),
                                "program './no-such-prog' not found")
        self.assert_usage_error(self.nbfork("launch", "--num_processes", "2"), "no PROGRAM")

    def test_num_processes_not_divisible_by_num_machines(self):
        self.assert_usage_error(self.nbfork("launch", "--num_processes", "3", "--num_machines",
                                            "2", PROG), "not divisible by num_machines=2")

    def test_unresolvable_main_process_ip_is_named(self):
        self.assert_usage_error(
            self.nbfork("launch", "--num_processes", "2", "--main_process_ip",
                        "nbf-no-such-host.invalid", PROG),
            "nbfork launch: error: --main_process_ip nbf-no-such-host.invalid does not resolve: ")

    def test_srun_launch_with_unresolvable_first_node_asks_for_main_process_ip(self):
        # `srun nbfork launch` whose first node neither resolves nor is known
        # to scontrol: a usage error, not every machine on its own loopback
        env = dict(self.env, SLURM_STEP_ID="0", SLURM_NNODES="2", SLURM_NODEID="1",
                   SLURM_JOB_NODELIST="nbf-no-such-node[1-2]",
                   PATH=self.path_with_scontrol("exit 1\n"))
        self.assert_usage_error(
            self.nbfork("launch", "--num_processes", "2", "--main_process_port", "29999", PROG,
                        env=env),
            "Slurm's first node nbf-no-such-node1 does not resolve here",
            "give --main_process_ip")

    def test_port_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            self.assert_usage_error(self.nbfork("launch", "--num_processes", "2",
                                                "--main_process_port", str(port), PROG),
                                    f"main_process_port {port}", "already in use")

    def test_invalid_yaml_names_line_and_column(self):
        with open(self.config, "w") as f:
            f.write("num_processes: 2\nmixed_precision: [fp16\n")
        self.assert_usage_error(self.nbfork("launch", PROG), self.config + ":3:1: not valid YAML")

    def test_unknown_config_key_and_lacking_feature(self):
        with open(self.config, "w") as f:
            f.write("num_processes: 2\nnum_gpus: 2\n")
        self.assert_usage_error(self.nbfork("launch", PROG), ":2:1: unknown config key 'num_gpus'")
        # FSDP and DeepSpeed are supported since issue 23; what is not is named
        with open(self.config, "w") as f:
            f.write("distributed_type: MEGATRON_LM\n")
        self.assert_usage_error(self.nbfork("launch", PROG),
                                "distributed_type: MEGATRON_LM is not supported by nbfork")
        with open(self.config, "w") as f:
            f.write("distributed_type: FSDP\nfsdp_config:\n  fsdp_activation_checkpointing: true\n")
        self.assert_usage_error(self.nbfork("launch", PROG),
                                ":3:3: fsdp_activation_checkpointing: activation checkpointing is "
                                "not supported by nbfork")

    def test_unknown_command(self):
        self.assert_usage_error(self.nbfork("lunch"), "unknown command 'lunch'")


class Commands(CliCase):
    def test_help_of_every_command(self):
        for cmd, word in (("launch", "--num_processes"), ("config", "default"),
                          ("env", "NVML"), ("test", "Test is a success!"),
                          ("merge-weights", "SHARDED_STATE_DICT"),
                          ("estimate-memory", "--num_processes")):
            r = self.nbfork(cmd, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(word, r.stdout)

    def test_estimate_memory_table_and_errors(self):
        r = self.nbfork("estimate-memory", "--layers", "784,512,512,10", "--dtypes", "float32",
                        "int8")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("669706 parameters, largest layer 401920", r.stdout)
        self.assertRegex(r.stdout, r"\| float32 +\| +1\.53 MB \| +2\.55 MB \| +10\.22 MB \|")
        self.assertRegex(r.stdout, r"\| int8 +\| .*N/A")
        self.assert_usage_error(self.nbfork("estimate-memory", "no_such_model"),
                                "unknown model 'no_such_model'")
        self.assert_usage_error(self.nbfork("estimate-memory", "--layers", "784"),
                                "--layers 784: expected at least two")
        self.assert_usage_error(self.nbfork("merge-weights", "only-one"), "usage")

    def test_config_default_then_launch_reads_it(self):
        r = self.nbfork("config", "default", "--mixed_precision", "bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config) as f:
            text = f.read()
        self.assertIn("mixed_precision: 'bf16'", text)
        self.assertIn("compute_environment: LOCAL_MACHINE", text)
        r = self.nbfork("config", "default")  # never overwrites
        self.assertIn("already exists", r.stdout)
        r = self.nbfork("launch", "--num_processes", "2", "--main_process_port", "0", "sh", "-c",
                        "echo precision=$ACCELERATE_MIXED_PRECISION")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("precision=bf16"), 2)

    def test_config_questions_write_accelerate_keys(self):
        answers = "multi-CPU\n1\n3\nfalse\nfp16\n"
        r = self.nbfork("config", stdin=answers)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config) as f:
            text = f.read()
        for line in ("distributed_type: MULTI_CPU", "num_processes: 3", "use_cpu: true",
                     "mixed_precision: 'fp16'"):
            self.assertIn(line, text)
        r = self.nbfork("launch", "--main_process_port", "0", PROG)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("rank 2 of 3", r.stdout)

    def test_env_reports_versions(self):
        r = self.nbfork("env")
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("nbfork version", "Gloo: 0.", "NCCL:", "CUDA runtime:", "NVIDIA driver",
                     "OpenBLAS:", "CPUs:", "config:"):
            self.assertIn(word, r.stdout)

    def test_test_is_a_success(self):
        r = self.nbfork("test", "--main_process_port", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("f32 f64 f16 bf16 i32 i64 correct on 2 processes", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("Test is a success!"))

    def test_notebook_runs_headless_with_call(self):
        nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# title"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": ["#include <stdio.h>\n", "int scale = 10;\n",
                        "int training_loop(int k) {\n",
                        "  acc_t *acc = acc_new(NULL);\n",
                        "  double x = acc_rank(acc) + k;\n",
                        "  acc_all_reduce(acc, &x, 1, ACC_F64, ACC_SUM);\n",
                        "  printf(\"rank %d sum %g\\n\", acc_rank(acc), x * scale);\n",
                        "  acc_destroy(&acc);\n  return 0;\n}\n"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "%launch training_loop(100) num_processes=1"},
        ]}
        path = os.path.join(self.tmp.name, "nb.ipynb")
        with open(path, "w") as f:
            json.dump(nb, f)
        port = str(free_port())
        # the notebook's own %launch cell, with the command line's options in place of its own
        r = self.nbfork("launch", "--num_processes", "2", "--main_process_port", port, path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Launching training on 2 CPU processes.", r.stdout)
        self.assertIn("rank 1 sum 2010", r.stdout)
        # CALL: the %launch cells are skipped, CALL launched after the last cell
        r = self.nbfork("launch", "--num_processes", "3", "--main_process_port", port, path,
                        "training_loop(1)")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("Launching training"), 1)
        self.assertIn("rank 2 sum 60", r.stdout)
        # a cell that fails ends the run with its error and exit 1
        nb["cells"][1]["source"] = ["int broken( {\n"]
        with open(path, "w") as f:
            json.dump(nb, f)
        r = self.nbfork("launch", "--main_process_port", "0", path, "training_loop(1)")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("CompileError", r.stderr)

    def test_notebook_ctrl_c_stops_executor_and_workers(self):
        nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "#include <unistd.h>\nint forever(void) {\n  for (;;) sleep(1);\n}\n"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": "%launch forever() num_processes=2"}]}
        path = os.path.join(self.tmp.name, "forever.ipynb")
        with open(path, "w") as f:
            json.dump(nb, f)
        p = subprocess.Popen([NBFORK, "launch", "--main_process_port", "0", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env)
        self.assertIn("Launching training on 2 CPU processes.", p.stdout.readline())

        def tree(pid):  # every descendant of pid
            kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                  text=True).stdout.split()
            return [int(k) for k in kids] + [d for k in kids for d in tree(int(k))]
        deadline = time.monotonic() + 30
        while len(tree(p.pid)) < 3 and time.monotonic() < deadline:  # executor + 2 workers
            time.sleep(0.05)
        procs = tree(p.pid)
        self.assertGreaterEqual(len(procs), 3, procs)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        self.assertEqual(p.returncode, 130, out + err)
        self.assertIn("KeyboardInterrupt", err)
        for pid in procs:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), pid)

    def write_notebook(self, name, *sources):
        nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": src} for src in sources]}
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            json.dump(nb, f)
        return path

    def test_notebook_precedence_command_line_cell_config(self):
        # issue 27: after `nbfork config default` (num_processes: 1) the cell's
        # num_processes=2 was silently replaced by the config file's 1
        r = self.nbfork("config", "default")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config) as f:
            self.assertIn("num_processes: 1", f.read())
        path = self.write_notebook(
            "ws.ipynb",
            "#include <stdio.h>\nint ws(void) {\n  acc_t *acc = acc_new(NULL);\n"
            "  printf(\"rank %d of %d\\n\", acc_rank(acc), acc_world_size(acc));\n"
            "  acc_destroy(&acc);\n  return 0;\n}\n",
            "%launch ws() num_processes=2")
        r = self.nbfork("launch", "--main_process_port", "0", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Launching training on 2 CPU processes.", r.stdout)  # the cell's
        self.assertIn("rank 1 of 2", r.stdout)
        self.assertIn("the cell's num_processes=2 is used, not num_processes=1 from the config "
                      "file", r.stderr)
        self.assertIn("the config file is " + self.config, r.stderr)
        # an explicit flag beats the cell, and says so
        r = self.nbfork("launch", "--num_processes", "3", "--main_process_port", "0", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rank 2 of 3", r.stdout)
        self.assertIn("num_processes=3 from the command line replaces the cell's "
                      "num_processes=2", r.stderr)

    BAR_CELLS = ("#include <unistd.h>\nint bar(void) {\n  acc_t *acc = acc_new(NULL);\n"
                 "  acc_progress_t *p = acc_progress_new(acc, \"epoch 0\", 30);\n"
                 "  for (int i = 0; i < 30; i++) {\n    usleep(100000);\n"
                 "    acc_progress_update(p, 1, NULL);\n  }\n"
                 "  acc_progress_destroy(&p);\n  acc_destroy(&acc);\n  return 0;\n}\n",
                 "%launch bar() num_processes=1")

    def test_notebook_progress_bar_in_a_pipe(self):
        # issue 27: every bar stayed at 0/375; in a log: a line every 2 s and the final state
        path = self.write_notebook("bar.ipynb", *self.BAR_CELLS)
        r = self.nbfork("launch", "--main_process_port", "0", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        bars = [l for l in r.stdout.splitlines() if l.startswith("epoch 0 |")]
        self.assertIn("0/30", bars[0])
        self.assertIn("30/30", bars[-1])
        self.assertTrue(any(re.search(r" ([1-9]|[12][0-9])/30 ", l) for l in bars[1:-1]), bars)
        self.assertLessEqual(len(bars), 5, bars)  # ~3 s of updates: not one line per step

    def test_notebook_progress_bar_on_a_terminal(self):
        path = self.write_notebook("bar.ipynb", *self.BAR_CELLS)
        master, slave = pty.openpty()
        p = subprocess.Popen([NBFORK, "launch", "--main_process_port", "0", path],
                             stdout=slave, stderr=subprocess.PIPE, env=self.env)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
        p.wait(timeout=TIMEOUT)
        os.close(master)
        self.assertEqual(p.returncode, 0, out)
        text = out.decode()
        redraws = text.count("\x1b[A\r\x1b[Kepoch 0 |")
        self.assertGreaterEqual(redraws, 5, text)  # in place, ~10 per second
        self.assertIn("\x1b[A\r\x1b[Kepoch 0 |██████████| 30/30", text)

    def test_notebook_trainer_messages_that_help(self):
        # issue 27: an eval batch above max_batch said "NaN ()"; a resume with another
        # optimizer "saved with opt NULL"; overlapping tensors were accepted
        out = os.path.join(self.tmp.name, "out")
        path = self.write_notebook(
            "msgs.ipynb",
            "#include <stdio.h>\n"
            "float xs[64 * 4];\nint64_t ys[64];\n"
            "acc_dataset_t ds = {xs, ys, 64, 4};\n"
            "acc_t *acc = acc_new(NULL);\n"
            "int sizes[] = {4, 8, 3};\n"
            "acc_mlp_t *mlp = acc_mlp_new(acc, sizes, 2, 16);\n"
            "acc_model_t model;\n"
            "acc_mlp_model(mlp, &model);\n",
            "acc_trainer_t *run(const char *optim, const char *eval_bs, const char *resume) {\n"
            "  char *argv[] = {\"t\", \"--output_dir\", \"" + out + "\", \"--optim\", (char *)optim,\n"
            "    \"--per_device_train_batch_size\", \"16\", \"--per_device_eval_batch_size\",\n"
            "    (char *)eval_bs, \"--max_steps\", \"2\", \"--save_strategy\", \"steps\",\n"
            "    \"--save_steps\", \"2\", \"--resume_from_checkpoint\", (char *)resume};\n"
            "  acc_training_args_t args;\n  acc_training_args_init(&args);\n"
            "  if (acc_training_args_parse(&args, 17, argv)) return NULL;\n"
            "  return acc_trainer_new(acc, &args, &model, &ds, &ds);\n}\n",
            "acc_trainer_t *t1 = run(\"sgd\", \"32\", \"\");\n"
            "printf(\"1: %s\\n\", t1 ? \"accepted\" : acc_last_error(acc));\n",
            "acc_tensor_info_t bad[2] = {{\"a\", 0, 2, 4}, {\"b\", 4, 2, 1}};\n"
            "acc_model_t m2 = model;\n"
            "m2.tensors = bad;\nm2.num_tensors = 2;\n"
            "acc_training_args_t a2;\nacc_training_args_init(&a2);\n"
            "a2.per_device_train_batch_size = a2.per_device_eval_batch_size = 16;\n"
            "acc_trainer_t *t2 = acc_trainer_new(acc, &a2, &m2, &ds, NULL);\n"
            "printf(\"2: %s\\n\", t2 ? \"accepted\" : acc_last_error(acc));\n",
            "acc_trainer_t *t3 = run(\"lomo\", \"16\", \"\");\n"
            "acc_result_t r3 = acc_trainer_train(t3);\n"
            "acc_trainer_destroy(&t3);\n"
            "t3 = run(\"adamw\", \"16\", \"true\");\n"
            "r3 = t3 ? acc_trainer_train(t3) : ACC_ERR_INVALID_ARGUMENT;\n"
            "printf(\"3: %s\\n\", r3 == ACC_OK ? \"resumed\" : acc_last_error(acc));\n")
        r = self.nbfork("launch", "--main_process_port", "0", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("1: rank 0: acc_trainer_new: --per_device_eval_batch_size 32 is larger than the "
                      "model's max_batch 16", r.stdout)
        self.assertIn("2: rank 0: acc_trainer_new: tensor 1 'b' (elements 4..5) overlaps tensor 0 'a' "
                      "(elements 0..7)", r.stdout)
        self.assertIn("was saved with --optim lomo; this run has --optim adamw", r.stdout)

    def test_fashion_mnist_notebook_headless(self):
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        env = dict(self.env, FMNIST_EPOCHS="1", FMNIST_LIMIT="3000")
        r = self.nbfork("launch", "--num_processes", "2", "--main_process_port", "0",
                        os.path.join(repo, "notebooks", "fashion_mnist.ipynb"), env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("3000 images of 28x28, 10 classes", r.stdout)
        self.assertIn("Launching training on 2 CPU processes.", r.stdout)
        self.assertIn("epoch 0: ", r.stdout)


class ClusterEnvironment(CliCase):
    """A program started by an engine, not by nbfork: its place comes from
    the engine's variables (here set as `srun -n 2` sets them)."""

    def test_bare_srun_environment(self):
        procs = []
        for rank in range(2):
            env = dict(self.env, SLURM_PROCID=str(rank), SLURM_NTASKS="2",
                       SLURM_LOCALID=str(rank), SLURM_NODEID="0", SLURM_TASKS_PER_NODE="2",
                       SLURM_JOB_NODELIST="localhost", SLURM_JOB_ID=str(40000 + os.getpid() % 5000))
            env.pop("MASTER_ADDR", None)
            env.pop("MASTER_PORT", None)
            procs.append(subprocess.Popen([PROG], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
        for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
            self.assertEqual(p.returncode, 0, err)
            self.assertIn(f"rank {rank} of 2 (local rank {rank} of 2): sum 3 ok", out)

    def test_bare_srun_unresolvable_first_node_points_at_master_addr(self):
        # SLURM_JOB_NODELIST's first node resolves nowhere and Slurm does not
        # answer (an scontrol that fails): the store's error says where
        # MASTER_ADDR came from and what to set
        path = self.path_with_scontrol("echo 'scontrol: error: no cluster' >&2\nexit 1\n")
        procs = []
        for rank in range(2):
            env = dict(self.env, SLURM_PROCID=str(rank), SLURM_NTASKS="2",
                       SLURM_LOCALID=str(rank), SLURM_NODEID="0", SLURM_TASKS_PER_NODE="2",
                       SLURM_JOB_NODELIST="nbf-no-such-node[1-2]",
                       SLURM_JOB_ID=str(40000 + os.getpid() % 5000), NBFORK_TIMEOUT_S="3",
                       PATH=path)
            env.pop("MASTER_ADDR", None)
            env.pop("MASTER_PORT", None)
            procs.append(subprocess.Popen([PROG], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            self.assertNotEqual(p.returncode, 0, out)
            self.assertIn("MASTER_ADDR was not set: it was taken from nbf-no-such-node1, the "
                          "first node of SLURM_JOB_NODELIST, whose name does not resolve here",
                          err)
            self.assertIn("set MASTER_ADDR to an address of rank 0's node", err)

    def test_mpich_style_environment(self):
        port = str(free_port())
        procs = [subprocess.Popen([PROG], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True,
                                  env=dict(self.env, PMI_RANK=str(r), PMI_SIZE="3",
                                           MPI_LOCALRANKID=str(r), MPI_LOCALNRANKS="3",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for r in range(3)]
        for rank, p in enumerate(procs):
            out, err = p.communicate(timeout=TIMEOUT)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn(f"rank {rank} of 3 (local rank {rank} of 3): sum 6 ok", out)


if __name__ == "__main__":
    unittest.main()
