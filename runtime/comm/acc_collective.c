/*
 * acc_collective.c — the public collectives: argument checks, then host
 * buffers go to Gloo (acc_gloo.cc) and device buffers to NCCL
 * (acc_nccl.c). A failed collective leaves the process group unusable
 * (Gloo closes its pairs after an error, as PyTorch's ProcessGroupGloo
 * does); later calls return ACC_ERR_PEER and acc_last_error keeps the
 * first cause.
 */
#include <stdlib.h>
#include <string.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_nccl.h"
#include "acc_reduce.h"

static acc_result_t check(acc_t *acc, const char *what, const void *a, const void *b, size_t count,
                          acc_dtype_t dtype) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!acc_dtype_valid(dtype))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", what, (int)dtype);
  if (count && (!a || !b))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "%s: NULL buffer for %zu elements", what,
                          count);
  if (count > ((size_t)1 << 40))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "%s: count %zu is too large", what, count);
  return ACC_OK;
}

static int on_device(const acc_t *acc, const void *p) {
  return acc->device >= 0 && acc_nccl_is_device_ptr(p);
}

/* Record a Gloo failure: the group is unusable from now on. */
static acc_result_t gloo_failed(acc_t *acc, acc_result_t r, const char *err) {
  acc->broken = 1;
  return acc__set_error(acc, r, "%s", err);
}

static acc_result_t broken(acc_t *acc) {
  (void)acc; /* acc->err keeps the first failure */
  return ACC_ERR_PEER;
}

/* Run the Gloo shim call `call` on a group that is not broken; `call`
 * writes its text into the `err` this macro declares. A failure breaks
 * the group and returns from the enclosing function with the shim's
 * text as the error. */
#define GLOO_CHECK(acc, call)                                                                      \
  do {                                                                                             \
    if ((acc)->broken)                                                                             \
      return broken(acc);                                                                          \
    char err[1024];                                                                                \
    acc_result_t gloo_r_ = (call);                                                                 \
    if (gloo_r_ != ACC_OK)                                                                         \
      return gloo_failed((acc), gloo_r_, err);                                                     \
  } while (0)

acc_result_t acc_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, acc_op_t op) {
  ACC_CHECK(check(acc, "all-reduce", buf, buf, count, dtype));
  if (!acc_op_valid(op))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "all-reduce: unknown op %d", (int)op);
  if (count == 0 || acc->world == 1)
    return ACC_OK;
  if (!acc->broken && on_device(acc, buf))
    return acc_nccl_collective(acc, ACC_NCCL_ALL_REDUCE, buf, buf, count, dtype, op, 0);
  GLOO_CHECK(acc, acc_gloo_all_reduce_algo(acc->gloo, buf, count, dtype, op,
                                           (acc_gloo_algo_t)acc->allreduce_algo, err, sizeof err));
  if (op == ACC_AVG)
    acc_reduce_divide(buf, count, dtype, acc->world);
  return ACC_OK;
}

acc_result_t acc_broadcast(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, int root) {
  ACC_CHECK(check(acc, "broadcast", buf, buf, count, dtype));
  if (root < 0 || root >= acc->world)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "broadcast: root %d is not a rank (world size %d)", root, acc->world);
  if (count == 0 || acc->world == 1)
    return ACC_OK;
  if (!acc->broken && on_device(acc, buf))
    return acc_nccl_collective(acc, ACC_NCCL_BROADCAST, buf, buf, count, dtype, ACC_SUM, root);
  GLOO_CHECK(acc, acc_gloo_broadcast(acc->gloo, buf, count * acc_dtype_size(dtype), root, err,
                                     sizeof err));
  return ACC_OK;
}

/* What all-gather and reduce-scatter share before Gloo: device buffers
 * go to NCCL, and with one process the result is the input. Returns 1
 * with the result in *r when it handled the call, else 0. */
static int local_or_device(acc_t *acc, acc_nccl_coll_t coll, const void *send, void *recv,
                           size_t count, acc_dtype_t dtype, acc_op_t op, acc_result_t *r) {
  if (acc->device >= 0 && (on_device(acc, send) || on_device(acc, recv))) {
    *r =
        acc->broken ? broken(acc) : acc_nccl_collective(acc, coll, send, recv, count, dtype, op, 0);
    return 1;
  }
  if (acc->world == 1) {
    memmove(recv, send, count * acc_dtype_size(dtype));
    *r = ACC_OK;
    return 1;
  }
  return 0;
}

acc_result_t acc_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                            acc_dtype_t dtype) {
  ACC_CHECK(check(acc, "all-gather", send, recv, count, dtype));
  if (count == 0)
    return ACC_OK;
  acc_result_t r;
  if (local_or_device(acc, ACC_NCCL_ALL_GATHER, send, recv, count, dtype, ACC_SUM, &r))
    return r;
  size_t bytes = count * acc_dtype_size(dtype);
  GLOO_CHECK(acc, acc_gloo_all_gather(acc->gloo, send, recv, bytes, err, sizeof err));
  return ACC_OK;
}

/* Host reduce-scatter as PyTorch's Gloo backend does it: all-reduce a
 * copy of the whole input with Gloo, keep this rank's block. */
acc_result_t acc_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                acc_dtype_t dtype, acc_op_t op) {
  ACC_CHECK(check(acc, "reduce-scatter", send, recv, count, dtype));
  if (!acc_op_valid(op))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "reduce-scatter: unknown op %d", (int)op);
  if (count == 0)
    return ACC_OK;
  acc_result_t r;
  if (local_or_device(acc, ACC_NCCL_REDUCE_SCATTER, send, recv, count, dtype, op, &r))
    return r;
  size_t esz = acc_dtype_size(dtype), bytes = count * esz;
  if (acc->broken)
    return broken(acc);
  size_t total = bytes * (size_t)acc->world;
  unsigned char *tmp = malloc(total);
  if (!tmp)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "reduce-scatter: no memory for %zu bytes", total);
  memcpy(tmp, send, total);
  char err[1024];
  r = acc_gloo_all_reduce(acc->gloo, tmp, count * (size_t)acc->world, esz,
                          acc_reduce_get(dtype, op), err, sizeof err);
  if (r == ACC_OK) {
    unsigned char *mine = tmp + (size_t)acc->rank * bytes;
    if (op == ACC_AVG)
      acc_reduce_divide(mine, count, dtype, acc->world);
    memcpy(recv, mine, bytes);
  }
  free(tmp);
  return r == ACC_OK ? ACC_OK : gloo_failed(acc, r, err);
}

acc_result_t acc_wait_for_everyone(acc_t *acc) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (acc->world == 1)
    return ACC_OK;
  GLOO_CHECK(acc, acc_gloo_barrier(acc->gloo, err, sizeof err));
  return ACC_OK;
}

void acc__set_allreduce_algo(acc_t *acc, int algo) {
  if (acc && algo >= 0 && algo <= (int)ACC_GLOO_BCUBE)
    acc->allreduce_algo = algo;
}

const char *acc__allreduce_algo_name(const acc_t *acc, size_t bytes) {
  if (!acc || acc->world == 1)
    return "none (one process)";
  acc_gloo_algo_t a = (acc_gloo_algo_t)acc->allreduce_algo;
  if (a == ACC_GLOO_AUTO)
    a = acc_gloo_choose_algo(acc->gloo, bytes);
  return acc_gloo_algo_name(a);
}

acc_result_t acc__all_reduce_bucket(acc_t *acc, float *buf, size_t n) {
  if (acc->grad_buckets != 2)
    return acc_all_reduce(acc, buf, n, ACC_F32, ACC_AVG);
  GLOO_CHECK(acc, acc_gloo_all_reduce_async(acc->gloo, buf, n, ACC_F32, ACC_AVG, err, sizeof err));
  return ACC_OK;
}

acc_result_t acc__wait_buckets(acc_t *acc) {
  if (!acc || !acc->gloo)
    return ACC_OK;
  char err[1024];
  acc_result_t r = acc_gloo_wait(acc->gloo, err, sizeof err);
  if (r != ACC_OK && !acc->broken)
    return gloo_failed(acc, r, err);
  return r;
}
