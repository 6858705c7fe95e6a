"""Who initialized CUDA, with the real driver: the same library and cell
as test_cuda_fake's, linked with the system's libcuda.so.1. Skipped
(exit 77) where no GPU is visible."""
import os
import subprocess
import tempfile
import unittest

import nbf_harness as h
from test_cuda_fake import assert_cuda_caller_named, build_gpuinit


def gpu_visible():
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and "GPU " in r.stdout


class RealDriverTests(unittest.TestCase):
    @unittest.skipUnless(gpu_visible(), "no GPU visible (nvidia-smi -L)")
    def test_library_that_initialized_cuda_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            build_gpuinit(tmp)
            k = h.Kernel(env={"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")})
            try:
                assert_cuda_caller_named(self, k, tmp, 1)
            finally:
                k.close()


if __name__ == "__main__":
    unittest.main()
