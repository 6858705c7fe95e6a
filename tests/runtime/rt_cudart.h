/*
 * rt_cudart.h — the CUDA runtime calls the GPU tests need, found with
 * dlopen so that the tests link no CUDA: a machine without libcudart
 * SKIPs (exit 77). Also: the GPU count, taken in a child so that the
 * test process itself never initializes CUDA before it forks ranks.
 */
#ifndef RT_CUDART_H
#define RT_CUDART_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_nccl.h"
#include "rt_test.h"

typedef int (*malloc_fn)(void **, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int); /* kind 1 H2D, 2 D2H */
typedef int (*free_fn)(void *);
typedef int (*memset_fn)(void *, int, size_t);
typedef int (*memset_async_fn)(void *, int, size_t, void *);
typedef int (*stream_create_fn)(void **, unsigned);
typedef int (*stream_destroy_fn)(void *);
typedef int (*sync_fn)(void);

static malloc_fn p_malloc;
static memcpy_fn p_memcpy;
static free_fn p_free;
static memset_fn p_memset;
static memset_async_fn p_memset_async;
static stream_create_fn p_stream_create; /* cudaStreamCreateWithFlags */
static stream_destroy_fn p_stream_destroy;
static sync_fn p_device_synchronize;

/* Load libcudart and set the p_* pointers, or SKIP. */
static inline void rt_cudart_load(void) {
  void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
  /* the development link is often absent on a runtime-only machine: the
   * SONAMEs of the toolkits nbfork builds with (a miss is a false SKIP,
   * which gpu_check.sh counts as a failure) */
  if (!rt)
    rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (!rt)
    rt = dlopen("libcudart.so.12", RTLD_NOW | RTLD_GLOBAL);
  if (!rt)
    NBF_TEST_SKIP("no CUDA runtime library");
  p_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
  p_memcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
  p_free = (free_fn)dlsym(rt, "cudaFree");
  p_memset = (memset_fn)dlsym(rt, "cudaMemset");
  p_memset_async = (memset_async_fn)dlsym(rt, "cudaMemsetAsync");
  p_stream_create = (stream_create_fn)dlsym(rt, "cudaStreamCreateWithFlags");
  p_stream_destroy = (stream_destroy_fn)dlsym(rt, "cudaStreamDestroy");
  p_device_synchronize = (sync_fn)dlsym(rt, "cudaDeviceSynchronize");
}

/* GPUs visible to a fresh process (0 without CUDA, a driver or a GPU),
 * counted in a child: CUDA initialized in this process would make every
 * CUDA call of the ranks it forks fail. */
static inline int rt_gpu_count(void) {
  int n = 0, fd[2];
  if (pipe(fd) != 0)
    return 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int c = acc_nccl_device_count();
    _exit(write(fd[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 1);
  }
  close(fd[1]);
  if (pid < 0 || read(fd[0], &n, sizeof n) != (ssize_t)sizeof n)
    n = 0;
  close(fd[0]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  return n;
}

/* SKIP unless a GPU is visible; then make the ranks rt_spawn forks use
 * it (not ACCELERATE_USE_CPU), sharing GPUs with a distinct NCCL_HOSTID
 * each (NBFORK_SHARE_GPU) when there are more ranks than GPUs. Returns
 * the GPU count. */
static inline int rt_gpu_ranks(int world) {
  rt_cudart_load();
  int ngpu = rt_gpu_count();
  if (ngpu <= 0)
    NBF_TEST_SKIP("no GPU visible (or nbfork built without CUDA/NCCL)");
  unsetenv("ACCELERATE_USE_CPU");
  setenv("NBFORK_TEST_GPU", "1", 1); /* rt_spawn: keep the ranks on the GPU */
  if (world > ngpu)
    setenv("NBFORK_SHARE_GPU", "1", 1);
  return ngpu;
}

/* Ranks sharing one GPU: the first visible one only (CUDA_VISIBLE_DEVICES
 * cut to its first entry), NBFORK_SHARE_GPU set. */
static inline void rt_first_gpu_only(void) {
  setenv("NBFORK_SHARE_GPU", "1", 1);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  char first[64] = "0";
  if (vis && *vis)
    snprintf(first, sizeof first, "%.*s", (int)strcspn(vis, ","), vis);
  setenv("CUDA_VISIBLE_DEVICES", first, 1);
}

#endif /* RT_CUDART_H */
