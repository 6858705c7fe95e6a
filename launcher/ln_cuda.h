/*
 * ln_cuda — what the launcher needs to know about GPUs, asked without
 * initializing CUDA in the executor.
 *
 * Counting: NVML (libnvidia-ml.so.1, dlopen'ed), which does not create a
 * CUDA context, honouring CUDA_VISIBLE_DEVICES — as Accelerate does since
 * its PR #1833 (cudaGetDeviceCount would initialize CUDA and poison every
 * forked worker).
 *
 * Initialization: CUDA is initialized in this process when libcuda.so.1 is
 * already loaded (dlopen RTLD_NOLOAD loads nothing) and cuDeviceGetCount
 * succeeds; before cuInit it answers CUDA_ERROR_NOT_INITIALIZED (3).
 */
#ifndef LN_CUDA_H
#define LN_CUDA_H

/* Number of GPUs the workers may use: NVML's count, limited by
 * CUDA_VISIBLE_DEVICES. 0 without a driver. Never initializes CUDA. */
int ln_cuda_visible_gpus(void);

/* 1 when the CUDA driver has been initialized in this process, else 0. */
int ln_cuda_initialized(void);

#endif
