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

typedef enum {
  ACC_NCCL_ALL_REDUCE,
  ACC_NCCL_BROADCAST,
  ACC_NCCL_ALL_GATHER,
  ACC_NCCL_REDUCE_SCATTER,
} acc_nccl_coll_t;

/* One collective on device buffers, with the semantics, counts and
 * errors of the public acc_* call of the same name: `send`/`recv` are the
 * same pointer for the in-place all-reduce and broadcast; `op` is used by
 * the reducing ones, `root` by broadcast. Blocks until the result is in
 * `recv` or the timeout. Without CUDA: ACC_ERR_UNSUPPORTED. */
acc_result_t acc_nccl_collective(acc_t *acc, acc_nccl_coll_t coll, const void *send, void *recv,
                                 size_t count, acc_dtype_t dtype, acc_op_t op, int root);

/* The communicators: the world's, and HYBRID_SHARD's (nbf_shard.h) split
 * from it with ncclCommSplit (NCCL >= 2.18; Debian's CUDA 13 ships 2.28):
 * the ranks of this rank's node, and its replicas (the ranks with its
 * member index on every node). */
typedef enum { ACC_NCCL_WORLD, ACC_NCCL_NODE, ACC_NCCL_REPLICA } acc_nccl_group_t;

/* Split NODE and REPLICA from the world's communicator, once (later
 * calls return ACC_OK): `node` this rank's node, `me` its member index
 * there, as the caller's node layout has them (acc_collective.c, from the
 * host's node groups). Collective: every rank of the world makes the
 * first call. Errors: BACKEND, TIMEOUT (NCCL's); without CUDA,
 * UNSUPPORTED. */
acc_result_t acc_nccl_split(acc_t *acc, int node, int me);

/* acc_nccl_collective over `group` (count: per rank of that group);
 * NODE and REPLICA after acc_nccl_split (else INVALID_ARGUMENT). */
acc_result_t acc_nccl_group_collective(acc_t *acc, acc_nccl_group_t group, acc_nccl_coll_t coll,
                                       const void *send, void *recv, size_t count,
                                       acc_dtype_t dtype, acc_op_t op, int root);

/* Abort (on error) or destroy (clean exit) the communicators. */
void acc_nccl_destroy(acc_t *acc);

#endif /* ACC_NCCL_H */
