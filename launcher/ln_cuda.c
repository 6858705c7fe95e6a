#include "ln_cuda.h"
#include "nbf_param.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Count the entries of CUDA_VISIBLE_DEVICES ("" hides all; a negative
 * entry ends the list, as in the CUDA runtime). -1 when unset. */
static int visible_from_env(void) {
  const char *v = nbf_param_exact(NBF_P_CUDA_VISIBLE_DEVICES);
  if (!v)
    return -1;
  int n = 0;
  const char *p = v;
  while (*p) {
    while (*p == ' ' || *p == ',')
      p++;
    if (!*p || *p == '-')
      break;
    n++;
    while (*p && *p != ',')
      p++;
  }
  return n;
}

int ln_cuda_visible_gpus(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return 0;
  typedef int (*init_fn)(void);
  typedef int (*count_fn)(unsigned int *);
  init_fn init = (init_fn)dlsym(h, "nvmlInit_v2");
  count_fn count = (count_fn)dlsym(h, "nvmlDeviceGetCount_v2");
  init_fn shutdown = (init_fn)dlsym(h, "nvmlShutdown");
  unsigned int n = 0;
  if (!init || !count || init() != 0 || count(&n) != 0)
    n = 0;
  if (init && shutdown)
    shutdown();
  /* NVML's library stays loaded: unloading it is not safe across all
   * driver versions, and it holds no CUDA state. */
  int env = visible_from_env();
  if (env >= 0 && (unsigned)env < n)
    n = (unsigned)env;
  return (int)n;
}

int ln_cuda_initialized(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return 0;
  typedef int (*count_fn)(int *);
  count_fn count = (count_fn)dlsym(h, "cuDeviceGetCount");
  int n = 0;
  int r = count ? count(&n) : 3;
  dlclose(h); /* drops only the reference NOLOAD added */
  return r == 0;
}
