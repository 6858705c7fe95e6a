"""JupyterLab 4 in headless Chromium (nbf_browser.py): what a user does with
nbfork in Lab, through Lab's own UI. Started with scripts/lab.sh, so the
script is tested too. Each test method is its own ctest test
(e2e.lab.METHOD). Screenshots: build/lab_*.png; build/lab_fashion_mnist.png
is the README's (docs/screenshot.png)."""
import re
import unittest

from nbf_browser import WAIT_S, BrowserCase, By, Keys, ActionChains

# Records, on every DOM change, what the launch cell (the last code cell)
# shows: the progress bars and the charts it holds at that moment. An
# observer sees each render, which polling from Python would miss.
WATCH_LAUNCH_CELL = """
window.__nbf = {started: false, bars: [], maxBars: 0, charts: [], maxCharts: 0};
const nb = document.querySelector('.jp-Notebook');
new MutationObserver(() => {
  const cells = nb.querySelectorAll('.jp-CodeCell');
  const cell = cells[cells.length - 1];
  const outs = [...cell.querySelectorAll('.jp-OutputArea-output')];
  const bars = outs.filter(o => /\\d+\\/\\d+ \\[/.test(o.innerText)).map(o => o.innerText);
  const charts = [...cell.querySelectorAll('.jp-OutputArea-output.jp-RenderedSVG')];
  const w = window.__nbf;
  for (const p of nb.querySelectorAll('.jp-InputPrompt')) if (p.innerText.includes('*')) w.started = true;
  w.maxBars = Math.max(w.maxBars, bars.length);
  w.maxCharts = Math.max(w.maxCharts, charts.length);
  for (const b of bars) if (!w.bars.includes(b)) w.bars.push(b);
  for (const c of charts) if (!w.charts.includes(c.innerHTML)) w.charts.push(c.innerHTML);
}).observe(nb, {subtree: true, childList: true, characterData: true});
"""


class LabTest(BrowserCase):
    front_end = "lab"
    # 1 epoch of 30000 images: ~190 steps a rank, enough for the loss chart
    # (a point every 50 steps) to be seen changing
    env_extra = {"FMNIST_EPOCHS": "1", "FMNIST_LIMIT": "30000"}

    def new_notebook_from_launcher(self):
        """Lab's Launcher, the "C (nbfork)" card of its Notebook section."""
        self.open_page("lab")
        card = self.wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, ".jp-LauncherCard[data-category='Notebook'][title='C (nbfork)']"))
        card.click()
        self.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .cm-content"))
        self.wait_kernel_ready()

    def test_launcher_card_runs_cells_with_state(self):
        self.new_notebook_from_launcher()
        self.assertEqual(self.run_last_cell("#include <stdio.h>\nint j = 5;"), "")
        self.assertEqual(self.run_last_cell('printf("j=%d\\n", j * 2);'), "j=10")
        self.assertEqual(self.run_last_cell("j += 1;\n6 * 7"), "42")
        self.assertEqual(self.run_last_cell("j"), "6")
        self.assertEqual(self.prompts()[:4], ["[1]:", "[2]:", "[3]:", "[4]:"])
        self.screenshot("lab_cells")

    def test_tab_completion_and_shift_tab_inspect(self):
        self.new_notebook_from_launcher()
        ed = self.type_in_last_cell("acc_all_r")
        ed.send_keys(Keys.TAB)
        items = self.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Completer-item"))
        self.assertIn("acc_all_reduce", [i.get_attribute("data-value") for i in items])
        ed.send_keys(Keys.ENTER)  # take the completion
        self.wait.until(lambda d: ed.text == "acc_all_reduce")
        ed.send_keys("(")
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(
            Keys.SHIFT).perform()
        tip = self.wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".jp-Tooltip")).text
        self.screenshot("lab_inspect")
        self.assertIn("acc_result_t acc_all_reduce(acc_t *acc, void *buf, size_t count", tip)
        self.assertIn("In-place all-reduce of `count` elements", tip)  # the doc comment

    def test_compile_error_is_one_error_output_with_cell_lines(self):
        self.new_notebook_from_launcher()
        self.run_last_cell("int a = 1;\nint b = a +;")
        outs = self.outputs(0)
        self.assertEqual(len(outs), 1, [o.text for o in outs])
        self.assertIn("jp-RenderedText", outs[0].get_attribute("class"))
        self.assertEqual(outs[0].get_attribute("data-mime-type"),
                         "application/vnd.jupyter.stderr")
        self.assertRegex(outs[0].text, r"cell\[1\]:2:\d+: error: expected expression")
        self.assertEqual(self.run_last_cell("6 * 7"), "42")  # the kernel goes on

    def test_interrupt_button_and_restart_button(self):
        self.new_notebook_from_launcher()
        self.run_last_cell("int kept = 7;")
        n = len(self.cells())
        self.type_in_last_cell("while (1) {}")
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(
            Keys.SHIFT).perform()
        self.wait.until(lambda d: self.kernel_status() == "busy")
        self.click_toolbar("notebook:interrupt-kernel")
        self.wait.until(lambda d: re.match(r"\[\d+\]:", self.prompts()[n - 1]))
        self.assertIn("the cell was interrupted", self.output_text(n - 1))
        self.assertEqual(self.run_last_cell("kept * 6"), "42")  # state survived
        self.click_toolbar("notebook:restart-kernel")
        self.wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept")).click()  # "Restart"
        self.wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, ".jp-Dialog"))
        self.wait_kernel_ready()
        self.assertEqual(self.run_last_cell("6 * 7"), "42")
        self.assertEqual(self.prompts()[-2], "[1]:")  # a new kernel counts from 1
        self.screenshot("lab_interrupt_restart")

    def test_fashion_mnist_run_all(self):
        self.open_notebook("fashion_mnist.ipynb")
        self.driver.execute_script(WATCH_LAUNCH_CELL)
        self.menu("Run", "Run All Cells")
        # done: the cells ran ([*]: seen) and every prompt has its count
        self.wait.until(lambda d: d.execute_script("return window.__nbf.started"))
        self.wait_all_done(timeout=max(WAIT_S, 600))
        self.check_fashion_mnist_outputs()
        w = self.driver.execute_script("return window.__nbf")
        # in place: one bar per epoch (1 epoch), one chart, each seen in
        # several states
        self.assertEqual(w["maxBars"], int(self.env["FMNIST_EPOCHS"]), w["bars"])
        self.assertGreaterEqual(len(w["bars"]), 2, w["bars"])
        self.assertRegex(w["bars"][-1], r"^epoch \d+ .*\b(\d+)/\1 \[")  # at its end
        self.assertEqual(w["maxCharts"], 1)
        self.assertGreaterEqual(len(w["charts"]), 2)
        self.driver.execute_script(
            "const c = document.querySelectorAll('.jp-Notebook .jp-CodeCell');"
            "c[c.length - 1].scrollIntoView({block: 'end'})")
        self.screenshot("lab_fashion_mnist")


# The same record for one cell by index among the code cells (window.__nbfCell),
# and every output text that cell held, in order of first sight.
WATCH_CELL = """
window.__nbf = {bars: [], maxBars: 0, texts: []};
const nb = document.querySelector('.jp-Notebook');
new MutationObserver(() => {
  const cell = nb.querySelectorAll('.jp-CodeCell')[window.__nbfCell];
  if (!cell) return;
  const outs = [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText);
  const bars = outs.filter(t => /\\d+\\/\\d+ \\[/.test(t));
  const w = window.__nbf;
  w.maxBars = Math.max(w.maxBars, bars.length);
  for (const b of bars) if (!w.bars.includes(b)) w.bars.push(b);
}).observe(nb, {subtree: true, childList: true, characterData: true});
"""


class LabRanksTest(BrowserCase):
    """notebooks/interactive_ranks.ipynb (issue 22) run in Lab: two ranks
    that stay, two epochs over two %%ranks cells."""
    front_end = "lab"
    env_extra = {"FMNIST_LIMIT": "16000"}  # 125 steps a rank an epoch: seconds, several bar states
    TRAIN_CELL = 3  # code cells: %ranks start, data, model, train epoch 0, ...

    def test_interactive_ranks_run_all(self):
        self.open_notebook("interactive_ranks.ipynb")
        self.driver.execute_script("window.__nbfCell = %d;" % self.TRAIN_CELL + WATCH_CELL)
        self.menu("Run", "Run All Cells")
        self.wait_all_done(timeout=max(WAIT_S, 300))
        train = self.output_text(self.TRAIN_CELL)
        # each rank's lines, prefixed, in the cell's outputs
        for rank in (0, 1):
            self.assertRegex(train, r"\[rank %d\] epoch 0: loss \d+\.\d+, grad norm" % rank)
        self.assertRegex(self.output_text(self.TRAIN_CELL + 1), r"^\[rank 1\] \d+\.\d+")
        again = self.output_text(self.TRAIN_CELL + 2)
        for rank in (0, 1):
            self.assertRegex(again, r"\[rank %d\] epoch 1: loss" % rank)
        # the progress bar of rank 0: one output, updated in place (seen in
        # several states, never two at once), ending full
        w = self.driver.execute_script("return window.__nbf")
        self.assertEqual(w["maxBars"], 1, w["bars"])
        self.assertGreaterEqual(len(w["bars"]), 2, w["bars"])
        self.assertRegex(w["bars"][-1], r"\b(\d+)/\1 \[")
        page = "\n".join(self.output_text(i) for i in range(len(self.cells())))
        self.assertRegex(page, r"test accuracy: \d+\.\d\d%")
        self.assertIn("Stopped 2 rank workers", page)
        self.assertFalse(self.driver.find_elements(
            By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type="
            "'application/vnd.jupyter.stderr']"), page)
        self.driver.execute_script(
            "document.querySelectorAll('.jp-Notebook .jp-CodeCell')[%d]"
            ".scrollIntoView({block: 'start'})" % self.TRAIN_CELL)
        self.screenshot("lab_interactive_ranks")


if __name__ == "__main__":
    unittest.main()
