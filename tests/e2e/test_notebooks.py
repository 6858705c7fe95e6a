"""The walk-through notebooks, executed by nbclient against the build's
kernel: the gradient-accumulation example must print 2.04000 with and
without accumulation, and a 1-epoch, reduced-size Fashion-MNIST run must
train on 2 processes past an accuracy an untrained model cannot reach."""
import os
import re
import unittest

import nbformat
from nbclient import NotebookClient

import nbf_harness as h

# Ten classes: an untrained model scores about 10%. One epoch on 16000
# training images (a 20000-image limit) reaches about 79% here.
ACCURACY_FLOOR = 65.0


def run_notebook(name, env=None, patch=None):
    with h.kernelspec_env(env):
        nb = nbformat.read(os.path.join(h.REPO, "notebooks", name), as_version=4)
        if patch:
            patch(nb)
        NotebookClient(nb, kernel_name="nbfork", timeout=600,
                       resources={"metadata": {"path": h.REPO}}).execute()
        return nb


def cell_text(cell):
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif "data" in o and "text/plain" in o.data:
            out.append(o.data["text/plain"])
    return "\n".join(out)


class NotebookTests(unittest.TestCase):
    def test_interactive_ranks(self):
        """notebooks/interactive_ranks.ipynb (issue 22): two persistent ranks
        train two epochs over two %%ranks cells (the model stays), rank 1's
        loss is shown, the parameters are pulled and score in the kernel."""
        nb = run_notebook("interactive_ranks.ipynb", env={"FMNIST_LIMIT": "8000"})
        code = [c for c in nb.cells if c.cell_type == "code"]
        text = "\n".join(cell_text(c) for c in code)
        for rank in (0, 1):
            for epoch in (0, 1):
                self.assertRegex(text, r"\[rank %d\] epoch %d: loss \d+\.\d+, grad norm" % (rank, epoch))
        self.assertIn("lr 0.05", text)
        self.assertRegex(text, r"\[rank 1\] \d+\.\d+")  # one rank's mean loss
        self.assertRegex(text, r"pulled trained \(\d+ bytes\) from rank 0")
        acc = float(re.search(r"test accuracy: (\d+\.\d\d)%", text).group(1))
        self.assertGreaterEqual(acc, ACCURACY_FLOOR, text)
        self.assertIn("Stopped 2 rank workers", text)

    def test_gradient_accumulation(self):
        nb = run_notebook("gradient_accumulation.ipynb")
        launches = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%launch")]
        self.assertEqual(len(launches), 2)
        one, two = (cell_text(c) for c in launches)
        self.assertIn("Launching training on 1 ", one)
        self.assertIn("final weight: 2.04000", one)
        self.assertIn("Launching training on 2 ", two)
        # printed once, by the main process only
        self.assertEqual(two.count("final weight: 2.04000"), 1, two)

    def test_fashion_mnist_reduced(self):
        nb = run_notebook("fashion_mnist.ipynb",
                          env={"FMNIST_EPOCHS": "1", "FMNIST_LIMIT": "20000"})
        launch = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%launch")][0]
        text = cell_text(launch)
        self.assertRegex(text, r"Launching training on 2 (CPU processes|GPUs)\.")
        accs = [float(a) for a in re.findall(r"^epoch 0: (\d+\.\d\d)$", text, re.M)]
        self.assertEqual(len(accs), 1, text)
        self.assertGreaterEqual(accs[0], ACCURACY_FLOOR, text)
        mimes = {m for o in launch.outputs if "data" in o for m in o.data}
        self.assertIn("image/svg+xml", mimes, "the live loss chart is missing")
        bars = [o for o in launch.outputs if "data" in o and "text/plain" in o.data
                and "it/s" in o.data["text/plain"]]
        self.assertTrue(bars, "the progress bar is missing")
        # the bar ends full: "N/N"
        self.assertRegex(bars[-1].data["text/plain"], r"\b(\d+)/\1\b")

    def test_your_own_model(self):
        # issue 27: a CNN of the notebook's own, by hand and through the Trainer
        nb = run_notebook("your_own_model.ipynb", env={"OWN_MODEL_LIMIT": "6000"})
        text = "\n".join(cell_text(c) for c in nb.cells if c.cell_type == "code")
        err = float(re.search(r"largest relative error (\d+\.\d+)", text).group(1))
        self.assertLess(err, 0.05, text)
        acc = float(re.search(r"by hand, epoch 0: accuracy (\d+\.\d+)%", text).group(1))
        self.assertGreaterEqual(acc, ACCURACY_FLOOR, text)
        # ranks seeded differently: the Trainer broadcast rank 0's weights
        self.assertIn("every rank starts from rank 0's weights: yes", text)
        evals = [float(a) for a in re.findall(r"'eval_accuracy': (\d\.\d+)", text)]
        self.assertTrue(evals and evals[-1] * 100 >= ACCURACY_FLOOR, text)
        self.assertIn("removed /tmp/nbfork-own-model-", text)


if __name__ == "__main__":
    unittest.main()
