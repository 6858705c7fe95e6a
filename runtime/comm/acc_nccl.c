/*
 * acc_nccl.c — NCCL collectives on device buffers (see acc_nccl.h).
 */
#define _GNU_SOURCE
#include "acc_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acc_internal.h"
#include "nbf_util.h"

#ifdef NBFORK_WITH_CUDA

#include <cuda_runtime.h>
#include <nccl.h>

struct acc_nccl {
  ncclComm_t comm;
  /* HYBRID_SHARD's groups, split from comm at their first use
   * (ncclCommSplit, NCCL >= 2.18): this rank's node (color: the node,
   * key: the member index) and its replicas (color: the member index,
   * key: the node); NULL until then */
  ncclComm_t group[2];
  cudaStream_t stream; /* NCCL's own, non-blocking: never the caller's */
  cudaEvent_t ready;   /* recorded on the caller's stream before each collective */
};

acc_result_t acc_set_stream(acc_t *acc, void *stream) {
  if (!acc)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_set_stream: acc is NULL");
  acc->stream = stream;
  return ACC_OK;
}

void *acc_get_stream(const acc_t *acc) {
  return acc ? acc->stream : NULL;
}

int acc_nccl_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky "no device" error */
    return 0;
  }
  return n;
}

acc_result_t acc_nccl_set_device(acc_t *acc, int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return acc__set_error(acc, ACC_ERR_BACKEND, "cudaSetDevice(%d) failed: %s", device,
                          cudaGetErrorString(e));
  return ACC_OK;
}

int acc_nccl_is_device_ptr(const void *ptr) {
  struct cudaPointerAttributes a;
  if (!ptr || cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void pause_briefly(unsigned *spins) {
  if (++*spins < 1000)
    return;
  struct timespec ts = {0, 20000}; /* 20 us */
  nanosleep(&ts, NULL);
}

static void free_nccl(struct acc_nccl *n) {
  if (n->ready)
    cudaEventDestroy(n->ready);
  cudaStreamDestroy(n->stream);
  free(n);
}

static acc_result_t fail(acc_t *acc, acc_result_t code, const char *what, const char *detail) {
  if (acc->nccl) {
    for (int i = 0; i < 2; i++)
      if (acc->nccl->group[i])
        ncclCommAbort(acc->nccl->group[i]);
    ncclCommAbort(acc->nccl->comm);
    free_nccl(acc->nccl);
    acc->nccl = NULL;
  }
  acc->broken = 1;
  return acc__set_error(acc, code, "NCCL %s failed: %s; the communicator was aborted", what,
                        detail);
}

/* Poll the communicator until its pending call finished (non-blocking
 * communicators return ncclInProgress). */
static acc_result_t wait_comm(acc_t *acc, ncclComm_t comm, const char *what, double deadline) {
  unsigned spins = 0;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess)
      return fail(acc, ACC_ERR_BACKEND, what, ncclGetErrorString(r));
    if (st == ncclSuccess)
      return ACC_OK;
    if (st != ncclInProgress)
      return fail(acc, ACC_ERR_PEER, what, ncclGetErrorString(st));
    if (nbf_now_s() > deadline)
      return fail(acc, ACC_ERR_TIMEOUT, what, "timed out (NBFORK_TIMEOUT_S)");
    pause_briefly(&spins);
  }
}

/* A failed set-up after the id was published or read: no retry, since
 * a retry on rank 0 would publish a second id while the others may hold
 * the first (each side would then wait for a different communicator). */
static acc_result_t init_failed(acc_t *acc, acc_result_t code, const char *fmt, const char *a) {
  acc->broken = 1;
  return acc__set_error(acc, code, fmt, a);
}

static acc_result_t ensure_comm(acc_t *acc) {
  if (acc->nccl)
    return ACC_OK;
  if (acc->broken)
    return ACC_ERR_PEER; /* acc->err keeps the first failure */
  if (!acc->store && acc->world > 1)
    return acc__set_error(acc, ACC_ERR_STORE, "NCCL init needs the rendezvous store");
  ncclUniqueId id;
  char key[256];
  snprintf(key, sizeof key, "%snccl/id", acc->key_prefix);
  if (acc->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      return acc__set_error(acc, ACC_ERR_BACKEND, "ncclGetUniqueId failed: %s",
                            ncclGetErrorString(r));
    if (acc->world > 1) {
      acc_result_t s = acc_store_set(acc->store, key, &id, sizeof id);
      if (s != ACC_OK) /* the store may hold it even so */
        return init_failed(acc, s, "publishing the NCCL id: %s",
                           acc_store_client_error(acc->store));
    }
  } else {
    void *v = NULL;
    size_t len = 0;
    acc_result_t s = acc_store_get(acc->store, key, &v, &len);
    if (s != ACC_OK)
      return init_failed(acc, s, "reading the NCCL id from the store: %s",
                         acc_store_client_error(acc->store));
    if (len != sizeof id) {
      free(v);
      return acc__set_error(acc, ACC_ERR_STORE, "the NCCL id in the store has %zu bytes, not %zu",
                            len, sizeof id);
    }
    memcpy(&id, v, sizeof id);
    free(v);
  }
  struct acc_nccl *n = calloc(1, sizeof *n);
  if (!n)
    return init_failed(acc, ACC_ERR_NO_MEMORY, "NCCL init: %s", "out of memory");
  cudaError_t ce = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    free(n);
    return init_failed(acc, ACC_ERR_BACKEND, "cudaStreamCreate failed: %s", cudaGetErrorString(ce));
  }
  /* timing off: the cheapest event, used only for ordering */
  ce = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    n->ready = NULL;
    free_nccl(n);
    return init_failed(acc, ACC_ERR_BACKEND, "cudaEventCreate failed: %s", cudaGetErrorString(ce));
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, acc->world, id, acc->rank, &cfg);
  acc->nccl = n;
  if (r != ncclSuccess && r != ncclInProgress)
    return fail(acc, ACC_ERR_BACKEND, "ncclCommInitRankConfig", ncclGetErrorString(r));
  return wait_comm(acc, n->comm, "communicator init", nbf_now_s() + acc->timeout_ms / 1000.0);
}

static ncclDataType_t nccl_type(acc_dtype_t d) {
  static const ncclDataType_t types[] = {
      [ACC_F32] = ncclFloat32,   [ACC_F64] = ncclFloat64, [ACC_F16] = ncclFloat16,
      [ACC_BF16] = ncclBfloat16, [ACC_I32] = ncclInt32,   [ACC_I64] = ncclInt64};
  return acc_dtype_valid(d) ? types[d] : ncclFloat32;
}

static ncclRedOp_t nccl_op(acc_op_t op) {
  static const ncclRedOp_t ops[] = {
      [ACC_SUM] = ncclSum, [ACC_AVG] = ncclAvg, [ACC_MAX] = ncclMax, [ACC_MIN] = ncclMin};
  return acc_op_valid(op) ? ops[op] : ncclSum;
}

/* After enqueueing: wait for the enqueue itself, then for the stream. */
static acc_result_t finish(acc_t *acc, ncclComm_t comm, ncclResult_t r, const char *what) {
  double deadline = nbf_now_s() + acc->timeout_ms / 1000.0;
  if (r != ncclSuccess && r != ncclInProgress)
    return fail(acc, ACC_ERR_BACKEND, what, ncclGetErrorString(r));
  ACC_CHECK(wait_comm(acc, comm, what, deadline));
  unsigned spins = 0;
  for (;;) {
    cudaError_t e = cudaStreamQuery(acc->nccl->stream);
    if (e == cudaSuccess)
      return ACC_OK;
    if (e != cudaErrorNotReady)
      return fail(acc, ACC_ERR_BACKEND, what, cudaGetErrorString(e));
    ncclResult_t st = ncclSuccess;
    ncclCommGetAsyncError(comm, &st);
    if (st != ncclSuccess && st != ncclInProgress)
      return fail(acc, ACC_ERR_PEER, what, ncclGetErrorString(st));
    if (nbf_now_s() > deadline)
      return fail(acc, ACC_ERR_TIMEOUT, what, "timed out (NBFORK_TIMEOUT_S)");
    pause_briefly(&spins);
  }
}

/* The stream contract (nbfork.h, acc_set_stream): NCCL's stream is
 * non-blocking, so nothing orders it after work on the caller's stream
 * (not even the legacy default stream). Record an event there and make
 * NCCL's stream wait for it, as llm.c orders its NCCL stream after its
 * compute stream: the collective then reads what the caller's kernels and
 * copies wrote, without blocking the host. */
static acc_result_t order_after_caller(acc_t *acc) {
  cudaStream_t caller = (cudaStream_t)acc->stream;
  cudaError_t e = cudaEventRecord(acc->nccl->ready, caller);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(acc->nccl->stream, acc->nccl->ready, 0);
  if (e != cudaSuccess)
    return acc__set_error(acc, ACC_ERR_BACKEND,
                          "ordering the collective after the caller's stream %p failed: %s "
                          "(a stream of another device, or destroyed?)",
                          acc->stream, cudaGetErrorString(e));
  return ACC_OK;
}

/* All-gather and reduce-scatter have two buffers: NCCL needs both on the
 * device (a host one would be read or written by the device, an illegal
 * address that kills the CUDA context). */
static acc_result_t check_pair(acc_t *acc, acc_nccl_coll_t coll, const void *send,
                               const void *recv) {
  if (coll != ACC_NCCL_ALL_GATHER && coll != ACC_NCCL_REDUCE_SCATTER)
    return ACC_OK;
  const int ds = acc_nccl_is_device_ptr(send), dr = acc_nccl_is_device_ptr(recv);
  if (ds && dr)
    return ACC_OK;
  return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                        "%s: send is %s memory but recv is %s memory: both must be device "
                        "buffers (or both host buffers, for Gloo)",
                        coll == ACC_NCCL_ALL_GATHER ? "all-gather" : "reduce-scatter",
                        ds ? "device" : "host", dr ? "device" : "host");
}

/* Both communicators at once, so that every rank splits in the same
 * order. */
acc_result_t acc_nccl_split(acc_t *acc, int node, int me) {
  ACC_CHECK(ensure_comm(acc));
  struct acc_nccl *n = acc->nccl;
  if (n->group[0])
    return ACC_OK;
  const int color[2] = {node, me}, key[2] = {me, node};
  for (int i = 0; i < 2; i++) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommSplit(n->comm, color[i], key[i], &n->group[i], &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
      return fail(acc, ACC_ERR_BACKEND, "ncclCommSplit", ncclGetErrorString(r));
    ACC_CHECK(wait_comm(acc, n->group[i], "ncclCommSplit", nbf_now_s() + acc->timeout_ms / 1000.0));
  }
  return ACC_OK;
}

acc_result_t acc_nccl_group_collective(acc_t *acc, acc_nccl_group_t group, acc_nccl_coll_t coll,
                                       const void *send, void *recv, size_t count,
                                       acc_dtype_t dtype, acc_op_t op, int root) {
  ACC_CHECK(check_pair(acc, coll, send, recv));
  ACC_CHECK(ensure_comm(acc));
  if (group != ACC_NCCL_WORLD && !acc->nccl->group[0])
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "NCCL's node and replica groups are not split yet (acc_nccl_split)");
  ACC_CHECK(order_after_caller(acc));
  ncclComm_t comm = group == ACC_NCCL_WORLD ? acc->nccl->comm : acc->nccl->group[group - 1];
  cudaStream_t st = acc->nccl->stream;
  ncclDataType_t t = nccl_type(dtype);
  switch (coll) {
  case ACC_NCCL_ALL_REDUCE:
    return finish(acc, comm, ncclAllReduce(send, recv, count, t, nccl_op(op), comm, st),
                  "all-reduce");
  case ACC_NCCL_BROADCAST:
    return finish(acc, comm, ncclBroadcast(send, recv, count, t, root, comm, st), "broadcast");
  case ACC_NCCL_ALL_GATHER:
    return finish(acc, comm, ncclAllGather(send, recv, count, t, comm, st), "all-gather");
  case ACC_NCCL_REDUCE_SCATTER:
    return finish(acc, comm, ncclReduceScatter(send, recv, count, t, nccl_op(op), comm, st),
                  "reduce-scatter");
  }
  return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "unknown device collective %d", (int)coll);
}

acc_result_t acc_nccl_collective(acc_t *acc, acc_nccl_coll_t coll, const void *send, void *recv,
                                 size_t count, acc_dtype_t dtype, acc_op_t op, int root) {
  return acc_nccl_group_collective(acc, ACC_NCCL_WORLD, coll, send, recv, count, dtype, op, root);
}

/* Close one communicator: on a broken group abort it; else finalize
 * (non-blocking, bounded by the timeout), then destroy, aborting when
 * anything goes wrong so that we never block forever (ncclCommDestroy
 * can). */
static void close_comm(acc_t *acc, ncclComm_t comm) {
  if (!comm)
    return;
  if (acc->broken) {
    ncclCommAbort(comm);
    return;
  }
  ncclResult_t r = ncclCommFinalize(comm);
  double deadline = nbf_now_s() + acc->timeout_ms / 1000.0;
  ncclResult_t st = r;
  unsigned spins = 0;
  while (r == ncclSuccess || r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess || st != ncclInProgress)
      break;
    if (nbf_now_s() > deadline) {
      st = ncclInternalError;
      break;
    }
    pause_briefly(&spins);
  }
  if (st == ncclSuccess)
    ncclCommDestroy(comm);
  else
    ncclCommAbort(comm);
}

void acc_nccl_destroy(acc_t *acc) {
  if (!acc || !acc->nccl)
    return;
  struct acc_nccl *n = acc->nccl;
  acc->nccl = NULL;
  close_comm(acc, n->group[0]); /* the split ones before the one they came from */
  close_comm(acc, n->group[1]);
  close_comm(acc, n->comm);
  free_nccl(n);
}

#else /* !NBFORK_WITH_CUDA */

acc_result_t acc_set_stream(acc_t *acc, void *stream) {
  if (!acc)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_set_stream: acc is NULL");
  if (stream)
    return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                          "acc_set_stream: nbfork was built without CUDA");
  acc->stream = NULL;
  return ACC_OK;
}

void *acc_get_stream(const acc_t *acc) {
  return acc ? acc->stream : NULL;
}

int acc_nccl_device_count(void) {
  return 0;
}

acc_result_t acc_nccl_set_device(acc_t *acc, int device) {
  return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                        "device %d requested but nbfork was built without CUDA", device);
}

int acc_nccl_is_device_ptr(const void *ptr) {
  (void)ptr;
  return 0;
}

acc_result_t acc_nccl_collective(acc_t *acc, acc_nccl_coll_t coll, const void *send, void *recv,
                                 size_t count, acc_dtype_t dtype, acc_op_t op, int root) {
  (void)coll, (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)root;
  return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                        "collectives on device buffers need NCCL; nbfork was built without CUDA");
}

acc_result_t acc_nccl_split(acc_t *acc, int node, int me) {
  (void)node, (void)me;
  return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                        "NCCL's node and replica groups need NCCL; nbfork was built without CUDA");
}

acc_result_t acc_nccl_group_collective(acc_t *acc, acc_nccl_group_t group, acc_nccl_coll_t coll,
                                       const void *send, void *recv, size_t count,
                                       acc_dtype_t dtype, acc_op_t op, int root) {
  (void)group;
  return acc_nccl_collective(acc, coll, send, recv, count, dtype, op, root);
}
void acc_nccl_destroy(acc_t *acc) {
  (void)acc;
}

#endif
