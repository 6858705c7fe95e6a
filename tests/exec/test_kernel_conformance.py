#!/usr/bin/python3
"""The real nbfork kernel against jupyter_kernel_test (the Jupyter project's
kernel conformance suite, requirements.txt): each KernelTests method whose
sample is given below is its own ctest test, exec.e2e.conformance.NAME
(tests/exec/CMakeLists.txt lists them). Without jupyter_kernel_test in the
Python that runs it, every method SKIPs (exit 77), never passes.

By hand:
  NBFORK_BUILD_DIR=build PYTHONPATH=tests/e2e:tests/exec \\
    .venv/bin/python -m unittest test_kernel_conformance.NbforkConformanceTest.test_pager
"""
import os
import shutil
import unittest

import nbf_harness

try:
    import jupyter_kernel_test
    _Base = jupyter_kernel_test.KernelTests
except ImportError:  # the suite is not installed: skip, do not pass
    jupyter_kernel_test = None
    _Base = unittest.TestCase


class NbforkConformanceTest(_Base):
    kernel_name = "nbfork"
    language_name = "c"
    file_extension = ".c"

    code_hello_world = '#include <stdio.h>\nprintf("hello, world\\n");'
    code_stderr = '#include <stdio.h>\nfprintf(stderr, "oops\\n");'
    # IPython's help syntax: the pager payload (source "page")
    code_page_something = "printf?"
    code_generate_error = "int broken = ;"
    code_execute_result = [{"code": "6 * 7", "result": "42"}]
    completion_samples = [{"text": "%cfl", "matches": {"%cflags"}}]
    complete_code_samples = ["int a = 1;"]
    incomplete_code_samples = ["int f(void) {"]
    code_inspect_sample = "printf"

    @classmethod
    def setUpClass(cls):
        if jupyter_kernel_test is None:
            raise unittest.SkipTest("jupyter_kernel_test is not installed (requirements.txt)")
        if not os.access(nbf_harness.KERNEL, os.X_OK):
            raise unittest.SkipTest("no built nbfork-kernel at %s" % nbf_harness.KERNEL)
        cls.ks_dir = nbf_harness.make_kernelspec_dir()
        cls.old_path = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = cls.ks_dir
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        if jupyter_kernel_test is None or not hasattr(cls, "ks_dir"):
            return
        super().tearDownClass()
        if cls.old_path is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = cls.old_path
        shutil.rmtree(cls.ks_dir, ignore_errors=True)

    if jupyter_kernel_test is None:
        def test_pager(self):
            self.skipTest("jupyter_kernel_test is not installed")


del _Base  # not a test class of this module

if __name__ == "__main__":
    unittest.main()
