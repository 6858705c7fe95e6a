"""CUDA-initialization detection and debug mode, with a fake CUDA driver
(tests/e2e/fake_cuda.c, a test double of libcuda.so.1 and NVML loaded
through LD_LIBRARY_PATH; no GPU is needed). With the fake, the launcher
sees 2 GPUs."""
import os
import subprocess
import tempfile
import unittest

import nbf_harness as h

INIT_CUDA = r"""
#include <dlfcn.h>
void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
cu_init(0)
"""
WORK = "int work(void) { return 0; }"

# A small library that initializes CUDA two calls deep, as a user's
# GPU helper library would: gpu_setup -> gpu_init_device -> cuInit.
GPUINIT_C = r"""
int cuInit(unsigned flags);
int gpu_init_device(void) { return cuInit(0); }
int gpu_setup(void) { return gpu_init_device() == 0 ? 0 : -1; }
"""
# The cell that calls it: its call stands on line 3 (line 1 declares it).
CALL_GPUINIT = "int gpu_setup(void);\nint before = 2;\nint rc = gpu_setup();\nrc"


def build_gpuinit(tmp, driver_dir=None):
    """libgpuinit.so in tmp, linked with libcuda.so.1 (the fake's in
    driver_dir, else the system's)."""
    src = os.path.join(tmp, "gpuinit.c")
    with open(src, "w") as f:
        f.write(GPUINIT_C)
    lib = os.path.join(tmp, "libgpuinit.so")
    cmd = ["cc", "-shared", "-fPIC", "-O0", "-o", lib, src]
    if driver_dir:
        cmd += ["-L" + driver_dir]
    subprocess.run(cmd + ["-l:libcuda.so.1"], check=True)
    return lib


def assert_cuda_caller_named(test, k, tmp, nproc):
    """Run the library's call in cell [3] of kernel k; %launch must name
    the cell, the line, the library and its functions."""
    test.assertEqual(k.execute(WORK)[0]["status"], "ok")
    reply, out = k.execute("%%ldflags -L%s -lgpuinit -Wl,-rpath,%s" % (tmp, tmp))  # cell [2]
    test.assertEqual(reply["status"], "ok", h.errors(out))
    reply, out = k.execute(CALL_GPUINIT)  # cell [3]
    test.assertEqual(reply["status"], "ok", h.errors(out))
    want = ("cell [3], line 3: it called gpu_setup() of libgpuinit.so, whose gpu_init_device() "
            "called cuInit")
    test.assertIn(want, h.stream_text(out, "stderr"))
    reply, out = k.execute_with_port("%%%%launch work() num_processes=%d use_port=%%d" % nproc)
    errs = h.errors(out)
    test.assertEqual(errs[0]["ename"], "LaunchError")
    test.assertIn("initialized in the kernel process by " + want, errs[0]["evalue"])


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

    def test_library_that_initialized_cuda_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            build_gpuinit(tmp, os.environ["NBFORK_FAKE_CUDA_DIR"])
            k = h.Kernel(env=fake_env())
            try:
                assert_cuda_caller_named(self, k, tmp, 2)
            finally:
                k.close()

    def test_cell_calling_cuinit_itself_is_named_with_its_line(self):
        # the cell declares the driver's entry and calls it: no -lcuda needed,
        # it binds to the executor's cuInit, which loads the driver
        k = h.Kernel(env=fake_env())
        try:
            self.assertEqual(k.execute(WORK)[0]["status"], "ok")
            reply, out = k.execute("int cuInit(unsigned flags);\nint r = 1;\nr = cuInit(0);\nr")
            self.assertEqual(reply["status"], "ok", h.errors(out))
            reply, out = k.execute_with_port("%%launch work() num_processes=2 use_port=%d")
            errs = h.errors(out)
            self.assertEqual(errs[0]["ename"], "LaunchError")
            self.assertIn("by cell [2], line 3, which called cuInit;", errs[0]["evalue"])
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
