"""Notebook 7 in headless Chromium (nbf_browser.py): notebooks/fashion_mnist.ipynb
opened in Notebook 7's page, run end to end with Run ▸ Run All Cells.
Screenshot: build/notebook7_fashion_mnist.png."""
import unittest

from nbf_browser import WAIT_S, BrowserCase, By


class Notebook7Test(BrowserCase):
    front_end = "notebook"

    def test_fashion_mnist_run_all(self):
        self.open_notebook("fashion_mnist.ipynb")
        self.assertIn("/notebooks/fashion_mnist.ipynb", self.driver.current_url)
        self.menu("Run", "Run All Cells")
        # every code cell gets its count, in order, the launch cell's last
        self.wait.until(lambda d: "[*]:" in self.prompts() or self.done())
        self.wait_all_done(timeout=max(WAIT_S, 600))
        self.assertEqual(self.prompts(), ["[%d]:" % (i + 1) for i in range(len(self.cells()))])
        self.check_fashion_mnist_outputs()
        launch = self.cells()[-1]
        self.assertEqual(len(launch.find_elements(By.CSS_SELECTOR, ".jp-RenderedSVG")), 1)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'end'})", launch)
        self.screenshot("notebook7_fashion_mnist")

    def done(self):
        p = self.prompts()
        return p and p[-1] != "[ ]:"


if __name__ == "__main__":
    unittest.main()
