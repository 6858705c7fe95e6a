/*
 * ln_debug.c — the test launch of ACCELERATE_DEBUG_MODE (see ln_debug.h).
 *
 * Each test worker reports its first failing step on stderr as
 * "rank R, step S: reason" and exits 1; the group machinery collects the
 * stderr tails, which become the diagnosis.
 */
#define _GNU_SOURCE
#include "ln_debug.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ln_group.h"
#include "nbfork.h"
#include "nbf_param.h"

/* Shared with the forked test workers (copied by fork). */
static int g_use_gpu;
static int g_cuda_cell;

static const char *cuda_error_name(void *h, int code) {
  typedef int (*name_fn)(int, const char **);
  name_fn f = (name_fn)dlsym(h, "cuGetErrorName");
  const char *s = NULL;
  if (f && f(code, &s) == 0 && s)
    return s;
  return "unknown CUDA error";
}

static int debug_worker(void) {
  long r = 0, lr = 0; /* the launcher set both: they parse */
  nbf_param_RANK(&r);
  nbf_param_LOCAL_RANK(&lr);
  int rank = (int)r, local_rank = (int)lr;
  if (g_use_gpu) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      fprintf(stderr, "rank %d, step load libcuda.so.1: %s\n", rank, dlerror());
      return 1;
    }
    typedef int (*init_fn)(unsigned);
    typedef int (*get_fn)(int *, int);
    init_fn cu_init = (init_fn)dlsym(h, "cuInit");
    get_fn cu_get = (get_fn)dlsym(h, "cuDeviceGet");
    int r = cu_init ? cu_init(0) : -1;
    if (r != 0) {
      fprintf(stderr, "rank %d, step cuInit: %s (%d)%s", rank, cuda_error_name(h, r), r,
              r == 3 ? ": initialization error" : "");
      if (r == 3 && g_cuda_cell)
        fprintf(stderr, ": CUDA was initialized in the kernel process by cell [%d] before the fork",
                g_cuda_cell);
      else if (r == 3)
        fprintf(stderr, ": CUDA was initialized in the kernel process before the fork");
      fprintf(stderr, "\n");
      return 1;
    }
    int dev = 0;
    r = cu_get ? cu_get(&dev, local_rank) : -1;
    if (r != 0) {
      fprintf(stderr, "rank %d, step cuDeviceGet(%d): %s (%d)\n", rank, local_rank,
              cuda_error_name(h, r), r);
      return 1;
    }
  }
  acc_t *acc = acc_new(NULL);
  if (!acc) {
    fprintf(stderr, "rank %d, step join the process group: see the lines above\n", rank);
    return 1;
  }
  float one = 1.0f;
  acc_result_t ar = acc_all_reduce(acc, &one, 1, ACC_F32, ACC_SUM);
  if (ar != ACC_OK) {
    fprintf(stderr, "rank %d, step all-reduce: %s: %s\n", rank, acc_strerror(ar),
            acc_last_error(acc));
    acc_destroy(&acc);
    return 1;
  }
  if (one != (float)acc_world_size(acc)) {
    fprintf(stderr, "rank %d, step all-reduce: sum of ones is %g, expected %d\n", rank,
            (double)one, acc_world_size(acc));
    acc_destroy(&acc);
    return 1;
  }
  acc_destroy(&acc);
  return 0;
}

int ln_debug_check(const ln_options_t *o, ln_context_t *ctx, int use_gpu, char **diag) {
  g_use_gpu = use_gpu;
  g_cuda_cell = ctx->cuda_initialized_by_cell;
  printf("ACCELERATE_DEBUG_MODE: test launch of %d worker%s (%s, one all-reduce)...\n",
         o->num_processes, o->num_processes == 1 ? "" : "s",
         use_gpu ? "CUDA init, device selection" : "CPU");
  fflush(stdout);
  ln_options_t t = *o;
  t.max_restarts = 0;
  char *failures = NULL, *setup_error = NULL;
  ln_run_result_t r = ln_run_group(&t, debug_worker, ctx, 0, use_gpu, &failures, &setup_error);
  if (r == LN_RUN_OK) {
    printf("ACCELERATE_DEBUG_MODE: test launch passed.\n");
    fflush(stdout);
    *diag = NULL;
    return 0;
  }
  if (r == LN_RUN_FAILED)
    *diag = failures;
  else if (r == LN_RUN_SETUP_FAILED)
    *diag = setup_error;
  else
    *diag = strdup("the test launch was interrupted");
  if (r != LN_RUN_FAILED)
    free(failures);
  if (r != LN_RUN_SETUP_FAILED)
    free(setup_error);
  return -1;
}
