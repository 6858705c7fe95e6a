"""notebooks/trainer.ipynb through the real kernel (nbclient): the Trainer
under %launch on 2 processes evaluates and saves a checkpoint each epoch,
prints Transformers' log lines once (main process), and a second launch
resumes from the latest checkpoint and runs only the remaining epoch."""
import os
import re
import shutil
import unittest

import nbformat
from nbclient.exceptions import CellExecutionError

import nbf_harness as h
from test_notebooks import cell_text, run_notebook

# An untrained model scores about 10% on ten classes.
ACCURACY_FLOOR = 0.6


class TrainerNotebookTests(unittest.TestCase):
    def test_trainer_notebook(self):
        # a free port, not the default 29500 other notebook tests launch on
        # (ctest -j runs them side by side); retried if it was taken meanwhile
        for _ in range(3):
            port = h.free_port()

            def patch(nb, port=port):
                for c in nb.cells:
                    if c.cell_type == "code" and c.source.startswith("%launch"):
                        c.source += " use_port=%d" % port
                # before the last cell removes output_dir: which checkpoints it holds
                nb.cells.insert(len(nb.cells) - 1, nbformat.v4.new_code_cell(
                    'char ck[200];\nfor (int s = 94; s <= 141; s += 47) {\n'
                    '    snprintf(ck, sizeof ck, "%s/checkpoint-%d/trainer_state.json", output_dir, s);\n'
                    '    printf("checkpoint-%d: %s\\n", s, access(ck, F_OK) == 0 ? "saved" : "missing");\n}'))
            try:
                nb = run_notebook("trainer.ipynb", env={"TRAINER_LIMIT": "6000"}, patch=patch)
                break
            except CellExecutionError as e:
                if "Another process holds port" not in str(e):
                    raise
        else:
            self.fail("three free ports were taken before the launch could use them")
        setup = cell_text(nb.cells[1])
        out_dir = re.search(r"checkpoints in (\S+)", setup).group(1)
        self.addCleanup(shutil.rmtree, out_dir, True)
        launches = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%launch")]
        self.assertEqual(len(launches), 2)
        first, second = (cell_text(c) for c in launches)
        self.assertRegex(first, r"Launching training on 2 (CPU processes|GPUs)\.")
        evals = re.findall(r"^\{'eval_loss': .*'eval_accuracy': ([0-9.]+).*'epoch': ([0-9.]+)\}$",
                           first, re.M)
        # one evaluation per epoch, printed by the main process only
        self.assertEqual([e[1] for e in evals], ["1.0", "2.0"], first)
        self.assertGreaterEqual(float(evals[-1][0]), ACCURACY_FLOOR, first)
        self.assertRegex(first, r"\{'loss': [0-9.]+, 'grad_norm': [0-9.e-]+, "
                                r"'learning_rate': [0-9.e-]+, 'epoch': [0-9.]+\}")
        self.assertEqual(first.count("'train_runtime'"), 1, first)
        # 6000 images, 2 processes of batch 64: 47 steps per epoch
        checks = cell_text(nb.cells[-2])
        self.assertIn("checkpoint-94: saved", checks)
        # resumed: only the third epoch is evaluated
        evals2 = re.findall(r"^\{'eval_loss': .*'epoch': ([0-9.]+)\}$", second, re.M)
        self.assertEqual(evals2, ["3.0"], second)
        self.assertIn("best checkpoint: " + out_dir + "/checkpoint-", second)
        self.assertIn("checkpoint-141: saved", checks)
        # the notebook's last cell removes its output folder (issue 27)
        self.assertIn("removed " + out_dir, cell_text(nb.cells[-1]))
        self.assertFalse(os.path.exists(out_dir))


if __name__ == "__main__":
    unittest.main()
