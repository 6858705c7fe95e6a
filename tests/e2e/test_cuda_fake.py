"""CUDA-initialization detection and debug mode, with a fake CUDA driver
(tests/e2e/fake_cuda.c, a test double of libcuda.so.1 and NVML loaded
through LD_LIBRARY_PATH; no GPU is needed). With the fake, the launcher
sees 2 GPUs."""
import os
import unittest

import nbf_harness as h

INIT_CUDA = r"""
#include <dlfcn.h>
void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
cu_init(0)
"""
WORK = "int work(void) { return 0; }"


def fake_env(**extra):
    env = {"LD_LIBRARY_PATH": os.environ["NBFORK_FAKE_CUDA_DIR"]}
    env.update(extra)
    return env


class CudaInitTests(unittest.TestCase):
    def test_cell_that_initialized_cuda_is_named(self):
        k = h.Kernel(env=fake_env())
        try:
            self.assertEqual(k.execute(WORK)[0]["status"], "ok")
            reply, out = k.execute("int before = 1;")  # cell [2]: no CUDA yet
            reply, out = k.execute(INIT_CUDA)          # cell [3]
            self.assertEqual(reply["status"], "ok", h.errors(out))
            self.assertIn("cell [3]) initialized CUDA", h.stream_text(out, "stderr"))
            reply, out = k.execute_with_port("%%launch work() num_processes=2 use_port=%d")
            errs = h.errors(out)
            self.assertEqual(errs[0]["ename"], "LaunchError")
            self.assertIn("initialized in the kernel process by cell [3]", errs[0]["evalue"])
            self.assertIn("restart the kernel", "\n".join(errs[0]["traceback"]))
        finally:
            k.close()

    def test_too_many_processes_for_gpus(self):
        k = h.Kernel(env=fake_env())
        try:
            k.execute(WORK)
            reply, out = k.execute("%launch work() num_processes=3")
            self.assertIn("only 2 GPUs are visible", h.errors(out)[0]["evalue"])
        finally:
            k.close()

    def test_debug_mode_names_failing_rank_and_step(self):
        k = h.Kernel(env=fake_env(ACCELERATE_DEBUG_MODE="Yes", FAKE_CUDA_FAIL_RANK="1"))
        try:
            k.execute(WORK)
            reply, out = k.execute_with_port("%%launch work() num_processes=2 use_port=%d")
            errs = h.errors(out)
            self.assertEqual(errs[0]["ename"], "LaunchError")
            self.assertIn("ACCELERATE_DEBUG_MODE", errs[0]["evalue"])
            self.assertIn("rank 1, step cuInit: CUDA_ERROR_UNKNOWN", "\n".join(errs[0]["traceback"]))
            self.assertNotIn("Launching training", h.stream_text(out))
        finally:
            k.close()


if __name__ == "__main__":
    unittest.main()
