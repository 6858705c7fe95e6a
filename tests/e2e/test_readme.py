"""The README's shell snippets that can run here, run as written, so the
README cannot drift from the tools (issue 27): the command-line block of
"From notebook to cluster" (PATH and PKG_CONFIG_PATH of the build tree,
`nbfork config default`, a program built with pkg-config and launched,
the Fashion-MNIST notebook headless, `nbfork env`, `nbfork test`), and the
install step it names (`cmake --install build --prefix DIR`).

What the test changes, and only that: `build/` means the build tree under
test (NBFORK_BUILD_DIR), `nbfork launch` gets `--main_process_port 0` (a
free port: other tests run beside it), the notebook runs 1 epoch on 2000
images (FMNIST_EPOCHS, FMNIST_LIMIT) and the config file is a private one.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from nbf_harness import BUILD_DIR, REPO

TIMEOUT = 600
BUILD = os.path.abspath(BUILD_DIR)


def readme_block(after):
    """The first ```sh block after the line that starts with `after`."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    at = text.index(after)
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, at)
    return m.group(1)


class ReadmeTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="nbf-readme-")
        self.env = dict(os.environ, NBFORK_CONFIG_FILE=os.path.join(self.tmp, "config.yaml"),
                        FMNIST_EPOCHS="1", FMNIST_LIMIT="2000")
        for k in ("RANK", "WORLD_SIZE", "PKG_CONFIG_PATH"):
            self.env.pop(k, None)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, script):
        script = script.replace("$PWD/build/", BUILD + "/").replace(" build/", " " + BUILD + "/")
        script = script.replace("nbfork launch ", "nbfork launch --main_process_port 0 ")
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, env=self.env,
                              capture_output=True, text=True, timeout=TIMEOUT)

    def test_command_line_block(self):
        if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
            raise unittest.SkipTest("dataset-fashion-mnist is not installed")
        block = readme_block("After `scripts/build.sh`, from the checkout")
        self.assertIn("export PKG_CONFIG_PATH=", block)
        r = self.run_script(block)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rank 1 of 2 (local rank 1 of 2): sum 3 ok", r.stdout)
        # the config file says 1 process, the notebook's cell 2: the cell wins, and says so
        self.assertIn("Launching training on 2 CPU processes.", r.stdout)
        self.assertIn("the cell's num_processes=2 is used, not num_processes=1 from the config "
                      "file", r.stderr)
        # CALL with --num_processes 1
        self.assertIn("Launching training on 1 CPU process.", r.stdout)
        self.assertIn("epoch 0: ", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("Test is a success!"), r.stdout)

    def test_install_step(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.run_script(
            'export PATH="%s/bin:$PATH"\nexport PKG_CONFIG_PATH="%s/lib/pkgconfig"\n'
            "cc examples/cli/allreduce.c $(pkg-config --cflags --libs nbfork) -o %s/allreduce\n"
            "command -v nbfork\n"
            "nbfork launch --num_processes 2 %s/allreduce\n" % (prefix, prefix, self.tmp, self.tmp))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[0], os.path.join(prefix, "bin", "nbfork"))
        self.assertIn("rank 1 of 2 (local rank 1 of 2): sum 3 ok", r.stdout)


# Calls that communicate (or drive calls that do): their result says whether a peer failed
COLLECTIVE = re.compile(r"^\s*(acc_(all_reduce|backward|broadcast|all_gather|reduce_scatter|"
                        r"wait_for_everyone|save_state|load_state|trainer_train|"
                        r"gather_for_metrics)\()")


def shipped_code():
    """(where, source) of every notebook code cell, example program and C
    block of the README."""
    import glob
    import json
    for path in sorted(glob.glob(os.path.join(REPO, "notebooks", "*.ipynb"))):
        with open(path) as f:
            for i, c in enumerate(json.load(f)["cells"]):
                if c["cell_type"] == "code":
                    yield "%s cell %d" % (os.path.basename(path), i), "".join(c["source"])
    for path in sorted(glob.glob(os.path.join(REPO, "examples", "**", "*.c"), recursive=True)):
        with open(path) as f:
            yield os.path.relpath(path, REPO), f.read()
    with open(os.path.join(REPO, "README.md")) as f:
        for i, block in enumerate(re.findall(r"```c\n(.*?)```", f.read(), re.S)):
            yield "README C block %d" % i, block


class ShippedCodeTests(unittest.TestCase):
    def test_shipped_code_checks_what_communicates(self):
        # issue 27: fashion_mnist's loop ignored acc_backward's result, so a rank
        # whose peer had left trained on alone; a statement that drops the result fails
        bare = ["%s: %s" % (where, line.strip()) for where, src in shipped_code()
                for line in src.splitlines() if COLLECTIVE.match(line)]
        self.assertEqual(bare, [])


if __name__ == "__main__":
    unittest.main()
