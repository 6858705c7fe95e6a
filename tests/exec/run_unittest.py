#!/usr/bin/python3
"""Run one unittest test (e.g. test_exec_e2e.ExecutorE2ETest.test_hello_world)
and exit 0 (passed), 1 (failed) or 77 (skipped), so ctest reports a skipped
test as SKIP (SKIP_RETURN_CODE 77), never as a pass."""
import sys
import unittest

if len(sys.argv) != 2:
    sys.exit("usage: run_unittest.py MODULE.CLASS.METHOD")
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
result = unittest.TextTestRunner(verbosity=2).run(suite)
if not result.wasSuccessful():
    sys.exit(1)
if result.testsRun and len(result.skipped) == result.testsRun:
    sys.exit(77)
sys.exit(0)
