/*
 * ln_cmd_env.c — `nbfork env`: what a bug report needs (Accelerate's
 * `accelerate env`): versions of nbfork, the compilers, Gloo, NCCL, the
 * CUDA driver and runtime, OpenBLAS; CPUs; GPUs through NVML (never
 * through CUDA, which would initialize it); the config in effect.
 * Libraries that may be absent are looked up with dlopen, so the report
 * works on machines without them.
 */
#define _GNU_SOURCE
#include <assert.h> /* static_assert for gloo/config.h */
#include <dlfcn.h>
#include <gloo/config.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "ln_cmd.h"
#include "nbf_param.h"

#ifndef NBFORK_VERSION
#define NBFORK_VERSION "unknown"
#endif

static void *lib(const char *name) {
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

/* NCCL's version from libnccl (ncclGetVersion: major*10000+minor*100+patch). */
static void nccl_version(char *out, size_t n) {
  void *h = lib("libnccl.so.2");
  int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
  int v = 0;
  if (get && get(&v) == 0)
    snprintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else
    snprintf(out, n, "not found (libnccl.so.2)");
}

/* cudaRuntimeGetVersion answers without creating a context. */
static void cudart_version(char *out, size_t n) {
  void *h = lib("libcudart.so");
  if (!h)
    h = lib("libcudart.so.13");
  int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "cudaRuntimeGetVersion") : NULL;
  int v = 0;
  if (get && get(&v) == 0)
    snprintf(out, n, "%d.%d", v / 1000, v % 1000 / 10);
  else
    snprintf(out, n, "not found (libcudart)");
}

static void openblas(char *out, size_t n) {
  void *h = lib("libopenblas.so.0");
  char *(*cfg)(void) = h ? (char *(*)(void))dlsym(h, "openblas_get_config") : NULL;
  snprintf(out, n, "%s", cfg ? cfg() : "not found (libopenblas.so.0)");
}

/* Driver and GPUs through NVML: no CUDA context, nothing initialized. */
static void nvml_report(void) {
  void *h = lib("libnvidia-ml.so.1");
  typedef int (*v_fn)(void);
  typedef int (*s_fn)(char *, unsigned);
  v_fn init = h ? (v_fn)dlsym(h, "nvmlInit_v2") : NULL,
       shut = h ? (v_fn)dlsym(h, "nvmlShutdown") : NULL;
  s_fn drv = h ? (s_fn)dlsym(h, "nvmlSystemGetDriverVersion") : NULL;
  int (*cuda)(int *) = h ? (int (*)(int *))dlsym(h, "nvmlSystemGetCudaDriverVersion_v2") : NULL;
  int (*count)(unsigned *) = h ? (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2") : NULL;
  int (*handle)(unsigned, void **) =
      h ? (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
  int (*name)(void *, char *, unsigned) =
      h ? (int (*)(void *, char *, unsigned))dlsym(h, "nvmlDeviceGetName") : NULL;
  if (!init || init() != 0) {
    printf("- NVIDIA driver: not found (no libnvidia-ml.so.1 or no driver)\n- GPUs: none\n");
    return;
  }
  char v[96] = "?";
  int cv = 0;
  if (drv)
    drv(v, sizeof v);
  if (cuda)
    cuda(&cv);
  printf("- NVIDIA driver: %s (CUDA driver API %d.%d)\n", v, cv / 1000, cv % 1000 / 10);
  unsigned n = 0;
  if (count)
    count(&n);
  printf("- GPUs: %u\n", n);
  for (unsigned i = 0; i < n && handle && name; i++) {
    void *d = NULL;
    char nm[96] = "?";
    if (handle(i, &d) == 0)
      name(d, nm, sizeof nm);
    printf("  - %u: %s\n", i, nm);
  }
  const char *vis = nbf_param_raw(NBF_P_CUDA_VISIBLE_DEVICES);
  if (vis)
    printf("  - CUDA_VISIBLE_DEVICES: '%s'\n", vis);
  if (shut)
    shut();
}

static void cpu_report(void) {
  char model[256] = "?", line[512];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
      model[strcspn(model, "\n")] = 0;
      break;
    }
  if (f)
    fclose(f);
  printf("- CPUs: %ld online (%s)\n", sysconf(_SC_NPROCESSORS_ONLN), model);
}

static void compiler_report(void) {
  printf("- compiler that built nbfork: %s\n", __VERSION__);
  const char *cc = nbf_param_NBFORK_CC();
  char cmd[512], line[256] = "not found\n";
  snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", cc);
  FILE *p = strchr(cc, '\'') ? NULL : popen(cmd, "r");
  if (p) {
    if (!fgets(line, sizeof line, p))
      snprintf(line, sizeof line, "not found\n");
    pclose(p);
  }
  printf("- cell compiler (%s): %s", cc, line);
}

static void config_report(void) {
  char path[PATH_MAX];
  if (ln_cli_default_config_path(path, sizeof path) != 0 || access(path, R_OK) != 0) {
    printf("- config: none (nbfork config default writes one)\n");
    return;
  }
  printf("- config (%s):\n", path);
  FILE *f = fopen(path, "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f))
    printf("  %s%s", line, strchr(line, '\n') ? "" : "\n");
  if (f)
    fclose(f);
}

int ln_cmd_env(int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "nbfork env: error: takes no arguments\n");
    return LN_EXIT_USAGE;
  }
  struct utsname u;
  uname(&u);
  char nccl[64], cudart[64], blas[256];
  nccl_version(nccl, sizeof nccl);
  cudart_version(cudart, sizeof cudart);
  openblas(blas, sizeof blas);
  printf("Copy-and-paste the text below in your GitHub issue\n\n");
  printf("- nbfork version: %s\n- platform: %s %s %s\n", NBFORK_VERSION, u.sysname, u.release,
         u.machine);
  compiler_report();
  printf("- Gloo: %d.%d.%d\n- NCCL: %s\n- CUDA runtime: %s\n", GLOO_VERSION_MAJOR,
         GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, nccl, cudart);
  nvml_report();
  printf("- OpenBLAS: %s\n", blas);
  cpu_report();
  config_report();
  return 0;
}
