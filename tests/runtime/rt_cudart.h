/*
 * rt_cudart.h — the three CUDA runtime calls the GPU tests need
 * (cudaMalloc, cudaMemcpy, cudaFree), found with dlopen so that the tests
 * link no CUDA: a machine without libcudart SKIPs (exit 77).
 */
#ifndef RT_CUDART_H
#define RT_CUDART_H

#include <dlfcn.h>
#include <stddef.h>

#include "rt_test.h"

typedef int (*malloc_fn)(void **, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int); /* kind 1 H2D, 2 D2H */
typedef int (*free_fn)(void *);

static malloc_fn p_malloc;
static memcpy_fn p_memcpy;
static free_fn p_free;

/* Load libcudart and set p_malloc/p_memcpy/p_free, or SKIP. */
static inline void rt_cudart_load(void) {
  void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
  if (!rt)
    rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (!rt)
    NBF_TEST_SKIP("no CUDA runtime library");
  p_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
  p_memcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
  p_free = (free_fn)dlsym(rt, "cudaFree");
}

#endif /* RT_CUDART_H */
