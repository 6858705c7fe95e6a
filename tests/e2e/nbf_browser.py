"""A real front end in a real browser, for the browser tests (test_lab.py,
test_notebook7.py): a Jupyter server of the project's virtual environment
(JupyterLab 4 through scripts/lab.sh, or Notebook 7) on loopback with the
build's kernelspec, and Debian's Chromium, headless, driven by Selenium
through chromium-driver.

Both front ends are built from JupyterLab's components, so one set of
helpers serves both: cells are `.jp-CodeCell`, editors CodeMirror 6
(`.cm-content`), prompts `[n]:` / `[*]:`, menus Lumino's.

Waiting: only for DOM conditions (WebDriverWait), with generous bounds
(WAIT_S) for a loaded 2-core machine; no fixed sleeps.
Screenshots: BUILD_DIR/<name>.png.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request
from importlib import metadata

import nbf_harness as h

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover
    webdriver = None

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Flags the closed network needs (its background connections are refused).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic",
                  "--no-first-run", "--window-size=1400,1100"]
WAIT_S = 120  # s: page load, kernel start, a cell: generous for a loaded machine
VENV_BIN = os.path.dirname(sys.executable)
TOKEN = "nbforktest"
PROMPT_DONE = re.compile(r"^\[\d+\]:$")


def package_major(name):
    """Major version of the installed package NAME, 0 when absent."""
    try:
        return int(metadata.version(name).split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


def notebook_file(name):
    return os.path.join(h.REPO, "notebooks", name)


class BrowserCase(unittest.TestCase):
    """One Jupyter server and one Chromium per test. `front_end`: "lab"
    (scripts/lab.sh) or "notebook" (Notebook 7's jupyter-notebook)."""
    front_end = "lab"
    # Fashion-MNIST shortened by the notebook's knobs: 1 epoch of 12000 images
    env_extra = {"FMNIST_EPOCHS": "1", "FMNIST_LIMIT": "12000"}

    def setUp(self):
        server = os.path.join(VENV_BIN, "jupyter-lab" if self.front_end == "lab"
                              else "jupyter-notebook")
        # JupyterLab 4 / Notebook 7 beside this Python (Debian's classic
        # Notebook 6 in /usr/bin is another front end)
        pkg, major = ("jupyterlab", 4) if self.front_end == "lab" else ("notebook", 7)
        if webdriver is None or not os.path.exists(server) or package_major(pkg) < major \
                or not os.path.exists(CHROMIUM) or not os.path.exists(CHROMEDRIVER):
            raise unittest.SkipTest(
                "needs %s >= %d and selenium in this Python's environment (%s; scripts/deps.sh "
                "makes .venv/), Debian's chromium and chromium-driver" % (pkg, major, sys.prefix))
        self.tmp = tempfile.mkdtemp(prefix="nbfork-browser-")
        self.root = os.path.join(self.tmp, "root")
        os.makedirs(self.root)
        self.ks = h.make_kernelspec_dir()
        self.driver = self.server = None
        self.addCleanup(self.cleanup)  # runs even when setUp fails half-way
        self.env = {k: os.environ.get(k, v) for k, v in self.env_extra.items()}
        env = dict(os.environ, JUPYTER_PATH=self.ks, **self.env)
        env.update(JUPYTER_CONFIG_DIR=os.path.join(self.tmp, "cfg"),
                   JUPYTER_RUNTIME_DIR=os.path.join(self.tmp, "rt"),
                   JUPYTER_DATA_DIR=os.path.join(self.tmp, "data"))
        # No "get notified about Jupyter news?" toast over the screenshots
        settings = os.path.join(self.tmp, "settings", "@jupyterlab", "apputils-extension")
        os.makedirs(settings)
        with open(os.path.join(settings, "notification.jupyterlab-settings"), "w") as f:
            f.write('{"fetchNews": "false"}')
        env["JUPYTERLAB_SETTINGS_DIR"] = os.path.join(self.tmp, "settings")
        port = h.free_port()
        args = ["--port=%d" % port, "--ServerApp.port_retries=0",
                "--IdentityProvider.token=" + TOKEN, "--ServerApp.root_dir=" + self.root]
        if self.front_end == "lab":
            cmd = ["bash", os.path.join(h.REPO, "scripts", "lab.sh")] + args
        else:
            cmd = [server, "--no-browser", "--ip=127.0.0.1", "--allow-root"] + args
        self.log = open(os.path.join(self.tmp, "server.log"), "w")
        self.server = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.base = "http://127.0.0.1:%d" % port
        h.wait_until(lambda: self.server.poll() is not None or self.server_answers(),
                     timeout=WAIT_S)
        self.assertIsNone(self.server.poll(), "the Jupyter server exited:\n" + self.server_log())
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in CHROMIUM_FLAGS + ["--user-data-dir=" + os.path.join(self.tmp, "chrome")]:
            opts.add_argument(a)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.wait = WebDriverWait(self.driver, WAIT_S)

    def server_log(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def server_answers(self):
        try:
            urllib.request.urlopen(self.base + "/api/status?token=" + TOKEN, timeout=2)
            return True
        except OSError:
            return False

    def cleanup(self):
        try:
            if self.driver:
                self.driver.quit()
        finally:
            if self.server and self.server.poll() is None:
                # the server shuts its kernels down on SIGTERM
                self.server.terminate()
                try:
                    self.server.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.server.pid, 9)
                    self.server.wait()
            self.log.close()
            shutil.rmtree(self.ks, ignore_errors=True)
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- pages --------------------------------------------------------------

    def open_page(self, path):
        self.driver.get("%s/%s?token=%s" % (self.base, path, TOKEN))

    def open_notebook(self, name):
        """Copy notebooks/NAME into the server's folder and open it."""
        shutil.copy(notebook_file(name), self.root)
        self.open_page(("lab/tree/" if self.front_end == "lab" else "notebooks/") + name)
        self.wait_kernel_ready()

    def screenshot(self, name):
        self.driver.save_screenshot(os.path.join(h.BUILD_DIR, name + ".png"))

    # -- the kernel ---------------------------------------------------------

    def kernel_status(self):
        """The notebook's kernel status as the toolbar's execution indicator
        shows it (idle, busy, ...), None before it is there."""
        s = self.driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator")
        try:
            return s[0].get_attribute("data-status") if s else None
        except StaleElementReferenceException:
            return None

    def wait_kernel_ready(self):
        """The notebook is connected to an nbfork kernel, idle: the toolbar
        names the kernel (before, the indicator can say idle with "No
        Kernel", and a Run then does nothing)."""
        self.wait.until(lambda d: "C (nbfork)" in [
            e.text for e in d.find_elements(By.CSS_SELECTOR, ".jp-KernelName")])
        self.wait_kernel_idle()

    def wait_kernel_idle(self, timeout=WAIT_S):
        WebDriverWait(self.driver, timeout).until(lambda d: self.kernel_status() == "idle")

    def click_toolbar(self, command):
        self.wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, "jp-button[data-command='%s'], button[data-command='%s']"
            % (command, command))).click()

    def menu(self, menu, item):
        """Menu bar MENU, then its item labelled ITEM (a user's clicks)."""
        def find(selector, text):
            return lambda d: ([e for e in d.find_elements(By.CSS_SELECTOR, selector)
                               if e.text.split("\n")[0].strip() == text] or [None])[0]
        self.wait.until(find(".lm-MenuBar-itemLabel", menu)).click()
        self.wait.until(find(".lm-Menu-item .lm-Menu-itemLabel", item)).click()

    # -- cells --------------------------------------------------------------

    def cells(self):
        return self.driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")

    def prompts(self):
        return [p.text.strip() for p in self.driver.find_elements(
            By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell .jp-InputPrompt")]

    def type_in_last_cell(self, text):
        """Click the last cell's editor and type TEXT with the keyboard
        ("\\n" is Enter: CodeMirror indents; C does not mind)."""
        ed = self.cells()[-1].find_element(By.CSS_SELECTOR, ".cm-content")
        ed.click()
        ed.send_keys(text)
        return ed

    def run_last_cell(self, text, timeout=WAIT_S):
        """Type TEXT into the last cell, Shift+Enter, wait until its prompt
        shows an execution count; return that cell's output text."""
        n = len(self.cells())
        self.type_in_last_cell(text)
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(
            Keys.SHIFT).perform()
        # Shift+Enter on the last cell adds a new one below
        WebDriverWait(self.driver, timeout).until(
            lambda d: len(self.cells()) > n and PROMPT_DONE.match(self.prompts()[n - 1] or ""))
        return self.output_text(n - 1)

    def output_text(self, i):
        return "\n".join(o.text for o in self.cells()[i].find_elements(
            By.CSS_SELECTOR, ".jp-OutputArea-output"))

    def outputs(self, i):
        return self.cells()[i].find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")

    def wait_all_done(self, timeout):
        WebDriverWait(self.driver, timeout).until(
            lambda d: self.prompts() and all(PROMPT_DONE.match(p) for p in self.prompts()) and
            self.kernel_status() == "idle")

    def check_fashion_mnist_outputs(self):
        """What notebooks/fashion_mnist.ipynb shows when it ran well: the
        data, the launch line, an accuracy per epoch above chance and
        then some; returns the page's output text."""
        page = "\n".join(self.output_text(i) for i in range(len(self.cells())))
        self.assertIn("%s images of 28x28, 10 classes" % self.env["FMNIST_LIMIT"], page)
        self.assertRegex(page, r"Launching training on 2 (CPU processes|GPUs)\.")
        accs = re.findall(r"epoch \d+: (\d+\.\d\d)", page)
        self.assertEqual(len(accs), int(self.env["FMNIST_EPOCHS"]), page)
        self.assertGreater(float(accs[-1]), 65.0)
        # Lab renders an error (and stderr) with this MIME type: none here
        self.assertFalse(self.driver.find_elements(
            By.CSS_SELECTOR, ".jp-OutputArea-output[data-mime-type="
            "'application/vnd.jupyter.stderr']"), page)
        return page
