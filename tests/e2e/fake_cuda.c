/*
 * A test double of the CUDA *driver* (libcuda.so.1) and of NVML
 * (libnvidia-ml.so.1), loaded through LD_LIBRARY_PATH, so the launcher's
 * fork/initialization logic is tested on machines without a GPU.
 *
 * It reproduces the behaviour that matters (see DESIGN.md, "CUDA and
 * fork"): before cuInit, cuDeviceGetCount answers
 * CUDA_ERROR_NOT_INITIALIZED (3); after cuInit it succeeds in that
 * process; in a child forked after its parent called cuInit, every call,
 * cuInit included, answers 3 ("initialization error").
 *
 * FAKE_CUDA_DEVICES (default 2): devices NVML and the driver report.
 * FAKE_CUDA_FAIL_RANK=R: cuInit fails with 999 (CUDA_ERROR_UNKNOWN) in the
 * process whose RANK is R (a worker-side fault for debug mode to find).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pid_t init_pid; /* process that called cuInit; copied by fork */

static int devices(void) {
  const char *v = getenv("FAKE_CUDA_DEVICES");
  return v ? atoi(v) : 2;
}

int cuInit(unsigned flags) {
  (void)flags;
  if (init_pid && init_pid != getpid())
    return 3; /* initialized in the parent before fork */
  const char *fail = getenv("FAKE_CUDA_FAIL_RANK"), *rank = getenv("RANK");
  if (fail && rank && !strcmp(fail, rank))
    return 999;
  init_pid = getpid();
  return 0;
}

static int ready(void) { return init_pid && init_pid == getpid(); }

int cuDeviceGetCount(int *n) {
  if (!ready())
    return 3;
  *n = devices();
  return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
  if (!ready())
    return 3;
  if (ordinal < 0 || ordinal >= devices())
    return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}

int cuGetErrorName(int code, const char **s) {
  switch (code) {
  case 0: *s = "CUDA_SUCCESS"; break;
  case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
  case 101: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
  default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return 0;
}

/* NVML: counts without initializing CUDA. */
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) {
  *n = (unsigned)devices();
  return 0;
}
