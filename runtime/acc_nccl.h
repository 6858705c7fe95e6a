/*
 * acc_nccl.h — collectives on CUDA device buffers through NCCL (built
 * when CMake finds CUDA and NCCL: NBFORK_WITH_CUDA). Without CUDA every
 * call returns ACC_ERR_UNSUPPORTED and acc_nccl_is_device_ptr returns 0.
 *
 * The communicator is created lazily, at the first collective on a device
 * buffer: rank 0 calls ncclGetUniqueId and publishes the 128 bytes in the
 * rendezvous store ("<prefix>nccl/id"), the others read it; then a
 * NON-BLOCKING ncclCommInitRankConfig is polled with the accelerator's
 * timeout. Every collective is enqueued on the communicator's stream and
 * polled (cudaStreamQuery + ncclCommGetAsyncError) until done; on error
 * or timeout the communicator is aborted (ncclCommAbort — ncclCommDestroy
 * can block forever) and the accelerator is marked broken. Internal.
 */
#ifndef ACC_NCCL_H
#define ACC_NCCL_H

#include <stddef.h>

#include "nbfork.h"

/* Number of CUDA devices (0 without CUDA or without a driver). This
 * initializes CUDA in the calling process. */
int acc_nccl_device_count(void);

/* Make `device` current for this process (cudaSetDevice). */
acc_result_t acc_nccl_set_device(acc_t *acc, int device);

/* 1 when `ptr` is device or managed memory (cudaPointerGetAttributes),
 * else 0. Only meaningful when acc_device(acc) >= 0. */
int acc_nccl_is_device_ptr(const void *ptr);

/* Collectives on device buffers (semantics as the public acc_* ones). */
acc_result_t acc_nccl_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                 acc_op_t op);
acc_result_t acc_nccl_broadcast(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, int root);
acc_result_t acc_nccl_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                                 acc_dtype_t dtype);
acc_result_t acc_nccl_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                     acc_dtype_t dtype, acc_op_t op);

/* Abort (on error) or destroy (clean exit) the communicator. */
void acc_nccl_destroy(acc_t *acc);

#endif /* ACC_NCCL_H */
