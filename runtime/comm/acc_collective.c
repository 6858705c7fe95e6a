/*
 * acc_collective.c — the public collectives: argument checks, then host
 * buffers go through shared memory when every rank is on this node
 * (acc_shm.c; NBFORK_SHM_COLLECTIVES=0 keeps Gloo), else to Gloo
 * (acc_gloo.cc), and device buffers to NCCL (acc_nccl.c). A failed collective leaves the process group unusable
 * (Gloo closes its pairs after an error, as PyTorch's ProcessGroupGloo
 * does); later calls return ACC_ERR_PEER and acc_last_error keeps the
 * first cause.
 *
 * Every call that reaches the group (world > 1, arguments valid) gets the
 * next sequence number and is recorded in this rank's state page
 * (nbf_rankstate.h) before it starts and when it ends: the launcher's
 * failure and hang reports read where each rank is from there. With
 * ACCELERATE_DEBUG_MODE the ranks first all-gather what each called
 * (verify_call). A failure ends the rank unless the caller chose
 * ACC_ERRORS_RETURN (coll_end).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_nccl.h"
#include "acc_reduce.h"
#include "acc_shm.h"
#include "nbf_rankstate.h"
#include "nbf_util.h"

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

/* A shared-memory collective failed: the group is unusable from now on,
 * and the peers must not wait for this rank any more. A timeout aborts
 * nobody: the peers waiting for the same late rank reach their own
 * deadline at the same time, and each reports its own wait. */
static acc_result_t shm_failed(acc_t *acc, acc_result_t r, const char *err) {
  if (r != ACC_ERR_TIMEOUT)
    acc__node_abort(acc);
  return gloo_failed(acc, r, err);
}

static acc_result_t broken(acc_t *acc) {
  (void)acc; /* acc->err keeps the first failure */
  return ACC_ERR_PEER;
}

/* ---- sequence numbers, the state record, debug checks, fatal errors ---- */

/* One collective as its entry point sees it. */
typedef struct {
  nbf_rs_call_t c;
  int was_broken; /* the group was already broken: not the first cause */
} coll_t;

/* What one rank called, as the debug mode's all-gather carries it. */
typedef struct {
  uint64_t seq, count;
  int32_t op, dtype, reduce, root;
} call_desc_t;

static const char *reduce_name(int op) {
  static const char *const names[] = {"sum", "avg", "max", "min"};
  return op >= 0 && op < 4 ? names[op] : "?";
}

/* One process's call in a mismatch report: "f32 x 4096, sum" when it
 * called the same collective as this rank, else the whole call. */
static void desc_text(const call_desc_t *d, const call_desc_t *mine, char *out, size_t n) {
  nbf_rs_call_t c = {.op = (uint8_t)d->op, .dtype = (uint8_t)d->dtype, .reduce = (uint8_t)d->reduce,
                     .root = d->root, .count = d->count, .seq = d->seq};
  if (d->op != mine->op || d->seq != mine->seq) {
    nbf_rs_call_text(&c, out, n);
    return;
  }
  char extra[32] = "";
  if (d->op == NBF_RS_ALL_REDUCE || d->op == NBF_RS_REDUCE_SCATTER)
    snprintf(extra, sizeof extra, ", %s", reduce_name(d->reduce));
  else if (d->op == NBF_RS_BROADCAST)
    snprintf(extra, sizeof extra, ", root %d", (int)d->root);
  if (d->op == NBF_RS_BARRIER)
    snprintf(out, n, "barrier");
  else
    snprintf(out, n, "%s x %llu%s", nbf_rs_dtype_name(d->dtype), (unsigned long long)d->count,
             extra);
}

/* ACCELERATE_DEBUG_MODE (Accelerate's verify_operation): before the
 * collective, every rank all-gathers what it is about to call (op,
 * dtype, count, reduction, root, sequence number). When they differ,
 * every rank returns MISMATCH naming each rank's call, instead of a hang
 * or a backend error; the group stays usable (nothing was sent). */
static acc_result_t verify_call(acc_t *acc, const nbf_rs_call_t *c) {
  if (!acc->debug_ops)
    return ACC_OK;
  if (acc->broken)
    return broken(acc);
  call_desc_t mine = {c->seq, c->count, c->op, c->dtype, c->reduce, c->root};
  call_desc_t *all = calloc((size_t)acc->world, sizeof *all);
  if (!all)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "debug mode: no memory");
  char err[1024];
  acc_result_t r = acc->node ? acc__node_all_gather(acc, &mine, all, sizeof mine, err, sizeof err)
                             : acc_gloo_all_gather(acc->gloo, &mine, all, sizeof mine, err, sizeof err);
  if (r != ACC_OK) {
    free(all);
    if (acc->node && r != ACC_ERR_TIMEOUT)
      acc__node_abort(acc);
    return gloo_failed(acc, r, err);
  }
  int differ = 0;
  for (int i = 0; i < acc->world; i++)
    differ |= memcmp(&all[i], &mine, sizeof mine) != 0;
  if (!differ) {
    free(all);
    return ACC_OK;
  }
  char msg[768];
  size_t at = (size_t)snprintf(msg, sizeof msg,
                               "the ranks' calls differ: Operation: %s #%llu.",
                               nbf_rs_op_name(c->op), (unsigned long long)c->seq);
  for (int i = 0; i < acc->world && at < sizeof msg; i++) {
    char one[96];
    desc_text(&all[i], &mine, one, sizeof one);
    at += (size_t)snprintf(msg + at, sizeof msg - at, "%s Process %d: %s", i ? ";" : "", i, one);
  }
  free(all);
  return acc__set_error(acc, ACC_ERR_MISMATCH, "%s", msg);
}

/* Number the call, record it as in flight, and (debug mode) compare it
 * across ranks. */
static acc_result_t coll_begin(acc_t *acc, coll_t *k, nbf_rs_op_t op, size_t count,
                               acc_dtype_t dtype, acc_op_t reduce, int root, int device) {
  k->was_broken = acc->broken; /* a failed rebuild below is this call's first cause */
  acc_result_t rb = acc__rebuild_if_due(acc);
  k->c = (nbf_rs_call_t){.op = (uint8_t)op,
                         .dtype = op == NBF_RS_BARRIER ? 255 : (uint8_t)dtype,
                         .device = (uint8_t)(device != 0),
                         .reduce = (uint8_t)reduce,
                         .root = root,
                         .count = count,
                         .seq = ++acc->coll_seq,
                         .start_ms = nbf_now_ms()};
  nbf_rankstate_begin(acc->rankstate, &k->c);
  return rb != ACC_OK ? rb : verify_call(acc, &k->c);
}

/* The default of a failed collective (ACC_ERRORS_ARE_FATAL): say which
 * collective failed and why, mark the record, and end the rank. _exit,
 * not exit: a worker forked from the executor must not run the
 * executor's exit handlers. */
static void __attribute__((noreturn)) coll_fatal(acc_t *acc, const nbf_rs_call_t *c,
                                                 acc_result_t r) {
  char call[160];
  nbf_rs_call_text(c, call, sizeof call);
  char prefix[32];
  int n = snprintf(prefix, sizeof prefix, "rank %d: ", acc->rank);
  const char *why = strncmp(acc->err, prefix, (size_t)n) == 0 ? acc->err + n : acc->err;
  nbf_rankstate_fatal(acc->rankstate);
  fflush(stdout);
  fprintf(stderr,
          "nbfork: rank %d: %s failed (%s): %s\n"
          "nbfork: rank %d ends here: a failed collective is fatal (ACC_ERRORS_ARE_FATAL); to "
          "handle errors yourself, call acc_set_errhandler(acc, ACC_ERRORS_RETURN) or set "
          "NBFORK_COLLECTIVE_ERRORS=return\n",
          acc->rank, call, acc_strerror(r), why, acc->rank);
  fflush(stderr);
  _exit(1);
}

/* The call ended with `r`: record it; a failure is the rank's end unless
 * the caller handles errors (ACC_ERRORS_RETURN). */
static acc_result_t coll_end(acc_t *acc, const coll_t *k, acc_result_t r) {
  if (r == ACC_OK) {
    nbf_rankstate_end(acc->rankstate);
    return ACC_OK;
  }
  if (!k->was_broken) { /* the first cause, not an echo of it */
    int peer = r != ACC_ERR_PEER && r != ACC_ERR_TIMEOUT ? -1
               : acc->node                             ? acc__node_lost_rank(acc)
                                                       : acc_gloo_lost_peer(acc->gloo);
    nbf_rankstate_error(acc->rankstate, (int)r, peer, &k->c, acc->err);
  }
  nbf_rankstate_phase(acc->rankstate, NBF_RS_RUNNING);
  if (acc->errors_return)
    return r;
  coll_fatal(acc, &k->c, r);
}

/* Run the backend call `call` on a group that is not broken; `call`
 * writes its text into the `err` this macro declares. A failure goes to
 * `failed` (gloo_failed, or shm_failed, which also aborts the peers'
 * waits): it breaks the group, and the enclosing function returns its
 * result, the backend's text as the error. */
#define BACKEND_CHECK(acc, call, failed)                                                           \
  do {                                                                                             \
    if ((acc)->broken)                                                                             \
      return broken(acc);                                                                          \
    char err[1024];                                                                                \
    acc_result_t backend_r_ = (call);                                                              \
    if (backend_r_ != ACC_OK)                                                                      \
      return failed((acc), backend_r_, err);                                                       \
  } while (0)
#define GLOO_CHECK(acc, call) BACKEND_CHECK(acc, call, gloo_failed)
#define SHM_CHECK(acc, call) BACKEND_CHECK(acc, call, shm_failed)

/* Host collectives go by node (shared memory) when the group was joined
 * so. */
static int use_shm(const acc_t *acc) {
  return acc->node != NULL;
}

/* A Gloo all-reduce algorithm forced (benchmarks and their tests) is run
 * where Gloo's mesh exists, i.e. with NBFORK_SHM_COLLECTIVES=0. */
static int shm_all_reduce(const acc_t *acc) {
  return acc->node && (acc->allreduce_algo == 0 || !acc->gloo);
}

static acc_result_t all_reduce_run(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                   acc_op_t op, int dev) {
  if (count == 0)
    return ACC_OK;
  if (dev)
    return acc_nccl_collective(acc, ACC_NCCL_ALL_REDUCE, buf, buf, count, dtype, op, 0);
  if (shm_all_reduce(acc)) {
    SHM_CHECK(acc, acc__node_all_reduce(acc, buf, count, dtype, op, err, sizeof err));
    return ACC_OK;
  }
  GLOO_CHECK(acc, acc_gloo_all_reduce_algo(acc->gloo, buf, count, dtype, op,
                                           (acc_gloo_algo_t)acc->allreduce_algo, err, sizeof err));
  if (op == ACC_AVG)
    acc_reduce_divide(buf, count, dtype, acc->world);
  return ACC_OK;
}

acc_result_t acc_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, acc_op_t op) {
  ACC_CHECK(check(acc, "all-reduce", buf, buf, count, dtype));
  if (!acc_op_valid(op))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "all-reduce: unknown op %d", (int)op);
  if (acc->world == 1)
    return ACC_OK;
  int dev = !acc->broken && count && on_device(acc, buf);
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, NBF_RS_ALL_REDUCE, count, dtype, op, -1, dev);
  if (r == ACC_OK)
    r = all_reduce_run(acc, buf, count, dtype, op, dev);
  return coll_end(acc, &k, r);
}

static acc_result_t broadcast_run(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, int root,
                                  int dev) {
  if (count == 0)
    return ACC_OK;
  if (dev)
    return acc_nccl_collective(acc, ACC_NCCL_BROADCAST, buf, buf, count, dtype, ACC_SUM, root);
  if (use_shm(acc)) {
    SHM_CHECK(acc, acc__node_broadcast(acc, buf, count * acc_dtype_size(dtype), root, err,
                                       sizeof err));
    return ACC_OK;
  }
  GLOO_CHECK(acc, acc_gloo_broadcast(acc->gloo, buf, count * acc_dtype_size(dtype), root, err,
                                     sizeof err));
  return ACC_OK;
}

acc_result_t acc_broadcast(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype, int root) {
  ACC_CHECK(check(acc, "broadcast", buf, buf, count, dtype));
  if (root < 0 || root >= acc->world)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "broadcast: root %d is not a rank (world size %d)", root, acc->world);
  if (acc->world == 1)
    return ACC_OK;
  int dev = !acc->broken && count && on_device(acc, buf);
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, NBF_RS_BROADCAST, count, dtype, ACC_SUM, root, dev);
  if (r == ACC_OK)
    r = broadcast_run(acc, buf, count, dtype, root, dev);
  return coll_end(acc, &k, r);
}

/* What all-gather and reduce-scatter share before Gloo: device buffers
 * go to NCCL. Returns 1 with the result in *r when it handled the call,
 * else 0. */
static int device_call(acc_t *acc, acc_nccl_coll_t coll, const void *send, void *recv,
                       size_t count, acc_dtype_t dtype, acc_op_t op, acc_result_t *r) {
  if (acc->device >= 0 && (on_device(acc, send) || on_device(acc, recv))) {
    *r =
        acc->broken ? broken(acc) : acc_nccl_collective(acc, coll, send, recv, count, dtype, op, 0);
    return 1;
  }
  return 0;
}

static acc_result_t all_gather_run(acc_t *acc, const void *send, void *recv, size_t count,
                                   acc_dtype_t dtype) {
  acc_result_t r;
  if (count == 0)
    return ACC_OK;
  if (device_call(acc, ACC_NCCL_ALL_GATHER, send, recv, count, dtype, ACC_SUM, &r))
    return r;
  size_t bytes = count * acc_dtype_size(dtype);
  if (use_shm(acc)) {
    SHM_CHECK(acc, acc__node_all_gather(acc, send, recv, bytes, err, sizeof err));
    return ACC_OK;
  }
  GLOO_CHECK(acc, acc_gloo_all_gather(acc->gloo, send, recv, bytes, err, sizeof err));
  return ACC_OK;
}

/* NCCL's node and replica communicators, split at the first device call
 * of HYBRID_SHARD (every rank makes it: the first gather or reduction of
 * a unit) along the node layout the host's node groups found. */
static acc_result_t nccl_groups(acc_t *acc) {
  int node, me;
  if (acc__node_place(acc, &node, &me) != 0)
    return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                          "NCCL's node and replica groups need the node groups of the "
                          "shared-memory collectives (NBFORK_SHM_COLLECTIVES=0?)");
  return acc_nccl_split(acc, node, me);
}

/* HYBRID_SHARD's collectives within the node or over the replica group
 * (a gather, or the reduction when `gather` is 0): on device buffers
 * through NCCL's node and replica communicators; on the host through
 * the node group (shared memory, the replica group's Gloo). */
static acc_result_t hybrid_run(acc_t *acc, int gather, const void *send, void *recv, size_t count,
                               acc_dtype_t dtype, acc_op_t op, int dev) {
  if (acc->broken)
    return broken(acc);
  if (dev)
    ACC_CHECK(nccl_groups(acc));
  if (dev && gather)
    return acc_nccl_group_collective(acc, ACC_NCCL_NODE, ACC_NCCL_ALL_GATHER, send, recv, count,
                                     dtype, op, 0);
  if (dev) { /* AVG: the node's mean, then the nodes' mean */
    acc_result_t r = acc_nccl_group_collective(acc, ACC_NCCL_NODE, ACC_NCCL_REDUCE_SCATTER, send,
                                               recv, count, dtype, op, 0);
    return r != ACC_OK ? r
                       : acc_nccl_group_collective(acc, ACC_NCCL_REPLICA, ACC_NCCL_ALL_REDUCE, recv,
                                                   recv, count, dtype, op, 0);
  }
  char err[1024];
  acc_result_t r =
      gather ? acc__node_local_all_gather(acc, send, recv, count * acc_dtype_size(dtype), err,
                                          sizeof err)
             : acc__node_hybrid_reduce_scatter(acc, send, recv, count, dtype, op, err, sizeof err);
  return r == ACC_OK ? ACC_OK : shm_failed(acc, r, err);
}

/* acc__local_all_gather and acc__hybrid_reduce_scatter: checked,
 * numbered and recorded as the world's collectives are. */
static acc_result_t hybrid_collective(acc_t *acc, int gather, const void *send, void *recv,
                                      size_t count, acc_dtype_t dtype, acc_op_t op) {
  const char *what = gather ? "node all-gather" : "HYBRID_SHARD reduce-scatter";
  ACC_CHECK(check(acc, what, send, recv, count, dtype));
  int dev = acc->device >= 0 && count && (on_device(acc, send) || on_device(acc, recv));
  if (!acc->node && !dev) {
    if (acc->world == 1) {
      memmove(recv, send, count * acc_dtype_size(dtype));
      return ACC_OK;
    }
    return acc__set_error(acc, ACC_ERR_UNSUPPORTED,
                          "%s: no node groups (shared-memory collectives are off)", what);
  }
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, gather ? NBF_RS_ALL_GATHER : NBF_RS_REDUCE_SCATTER, count,
                              dtype, op, -1, dev);
  if (r == ACC_OK && count)
    r = hybrid_run(acc, gather, send, recv, count, dtype, op, dev);
  return coll_end(acc, &k, r);
}

acc_result_t acc__local_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                                   acc_dtype_t dtype) {
  return hybrid_collective(acc, 1, send, recv, count, dtype, ACC_SUM);
}

acc_result_t acc__hybrid_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                        acc_dtype_t dtype, acc_op_t op) {
  if (!acc_op_valid(op))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "HYBRID_SHARD reduce-scatter: unknown op %d", (int)op);
  return hybrid_collective(acc, 0, send, recv, count, dtype, op);
}

/* Host reduce-scatter: through shared memory by node; else as PyTorch's
 * Gloo backend does: all-reduce a copy of the whole input, keep this
 * rank's block. Not Gloo 0.5's ReduceScatterHalvingDoubling (half the
 * traffic): it moves a rank's result to the start of its buffer while its
 * first step's send of that region may still be in flight (no waitSend
 * before the memcpy), so the peer can receive the moved values: 2 of 6
 * runs of runtime.gloo.matrix.np2 got a wrong f64 block element. */
static acc_result_t reduce_scatter_run(acc_t *acc, const void *send, void *recv, size_t count,
                                       acc_dtype_t dtype, acc_op_t op) {
  acc_result_t r;
  if (count == 0)
    return ACC_OK;
  if (device_call(acc, ACC_NCCL_REDUCE_SCATTER, send, recv, count, dtype, op, &r))
    return r;
  if (use_shm(acc)) {
    SHM_CHECK(acc,
              acc__node_reduce_scatter(acc, send, recv, count, dtype, op, err, sizeof err));
    return ACC_OK;
  }
  size_t esz = acc_dtype_size(dtype), bytes = count * esz;
  if (acc->broken)
    return broken(acc);
  size_t total = bytes * (size_t)acc->world;
  unsigned char *tmp = malloc(total);
  if (!tmp)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "reduce-scatter: no memory for %zu bytes", total);
  memcpy(tmp, send, total);
  char err[1024];
  acc_op_t o = op == ACC_AVG ? ACC_SUM : op;
  unsigned char *mine = tmp + (size_t)acc->rank * bytes;
  r = acc_gloo_all_reduce(acc->gloo, tmp, count * (size_t)acc->world, esz,
                          acc_reduce_get(dtype, o), err, sizeof err);
  if (r == ACC_OK) {
    if (op == ACC_AVG)
      acc_reduce_divide(mine, count, dtype, acc->world);
    memcpy(recv, mine, bytes);
  }
  free(tmp);
  return r == ACC_OK ? ACC_OK : gloo_failed(acc, r, err);
}

/* All-gather (op unused) or reduce-scatter after its argument checks:
 * alone, the copy of send into recv (through NCCL for device buffers);
 * else numbered and recorded like every collective, then run. */
static acc_result_t send_recv_collective(acc_t *acc, acc_nccl_coll_t coll, const void *send,
                                         void *recv, size_t count, acc_dtype_t dtype,
                                         acc_op_t op) {
  if (acc->world == 1) {
    acc_result_t r1;
    if (count && device_call(acc, coll, send, recv, count, dtype, op, &r1))
      return r1;
    memmove(recv, send, count * acc_dtype_size(dtype));
    return ACC_OK;
  }
  int gather = coll == ACC_NCCL_ALL_GATHER;
  int dev = acc->device >= 0 && count && (on_device(acc, send) || on_device(acc, recv));
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, gather ? NBF_RS_ALL_GATHER : NBF_RS_REDUCE_SCATTER, count,
                              dtype, op, -1, dev);
  if (r == ACC_OK)
    r = gather ? all_gather_run(acc, send, recv, count, dtype)
               : reduce_scatter_run(acc, send, recv, count, dtype, op);
  return coll_end(acc, &k, r);
}

acc_result_t acc_all_gather(acc_t *acc, const void *send, void *recv, size_t count,
                            acc_dtype_t dtype) {
  ACC_CHECK(check(acc, "all-gather", send, recv, count, dtype));
  return send_recv_collective(acc, ACC_NCCL_ALL_GATHER, send, recv, count, dtype, ACC_SUM);
}

acc_result_t acc_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                acc_dtype_t dtype, acc_op_t op) {
  ACC_CHECK(check(acc, "reduce-scatter", send, recv, count, dtype));
  if (!acc_op_valid(op))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "reduce-scatter: unknown op %d", (int)op);
  return send_recv_collective(acc, ACC_NCCL_REDUCE_SCATTER, send, recv, count, dtype, op);
}

static acc_result_t barrier_run(acc_t *acc) {
  if (use_shm(acc)) {
    SHM_CHECK(acc, acc__node_barrier(acc, 0, err, sizeof err));
    return ACC_OK;
  }
  GLOO_CHECK(acc, acc_gloo_barrier(acc->gloo, err, sizeof err));
  return ACC_OK;
}

acc_result_t acc_wait_for_everyone(acc_t *acc) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (acc->world == 1)
    return ACC_OK;
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, NBF_RS_BARRIER, 0, ACC_F32, ACC_SUM, -1, 0);
  if (r == ACC_OK)
    r = barrier_run(acc);
  return coll_end(acc, &k, r);
}

acc_result_t acc__final_barrier(acc_t *acc) {
  nbf_rankstate_leaving(acc->rankstate);
  coll_t k;
  acc_result_t r = coll_begin(acc, &k, NBF_RS_BARRIER, 0, ACC_F32, ACC_SUM, -1, 0);
  if (r == ACC_OK) {
    char err[512];
    r = acc->node ? acc__node_barrier(acc, 1, err, sizeof err)
                 : acc_gloo_barrier(acc->gloo, err, sizeof err);
  }
  if (r == ACC_OK)
    nbf_rankstate_end(acc->rankstate);
  else
    nbf_rankstate_phase(acc->rankstate, NBF_RS_RUNNING);
  return r;
}

void acc__set_allreduce_algo(acc_t *acc, int algo) {
  if (acc && algo >= 0 && algo <= (int)ACC_GLOO_BCUBE)
    acc->allreduce_algo = algo;
}

void acc__gloo_poll_counts(const acc_t *acc, long *polled, long *slept) {
  acc_gloo_poll_counts(acc ? acc->gloo : NULL, polled, slept);
}

const char *acc__allreduce_algo_name(const acc_t *acc, size_t bytes) {
  if (!acc || acc->world == 1)
    return "none (one process)";
  if (shm_all_reduce(acc))
    return bytes <= ACC_SHM_NAIVE_MAX ? "shm naive"
                                      : "shm reduce-scatter+gather";
  acc_gloo_algo_t a = (acc_gloo_algo_t)acc->allreduce_algo;
  if (a == ACC_GLOO_AUTO)
    a = acc_gloo_choose_algo(acc->gloo, bytes);
  return acc_gloo_algo_name(a);
}

acc_result_t acc__all_reduce_bucket(acc_t *acc, float *buf, size_t n) {
  /* through shared memory a bucket's all-reduce takes less than the
   * hand-off to a worker thread would: no overlap */
  if (acc->grad_buckets != 2 || use_shm(acc))
    return acc_all_reduce(acc, buf, n, ACC_F32, ACC_AVG);
  ACC_CHECK(acc__rebuild_if_due(acc));
  GLOO_CHECK(acc, acc_gloo_all_reduce_async(acc->gloo, buf, n, ACC_F32, ACC_AVG, err, sizeof err));
  return ACC_OK;
}

acc_result_t acc__wait_buckets(acc_t *acc) {
  if (!acc || !acc->gloo)
    return ACC_OK;
  char err[1024];
  acc_result_t r = acc_gloo_wait(acc->gloo, err, sizeof err);
  if (r == ACC_OK)
    return ACC_OK;
  /* the queued all-reduces of gradient buckets (NBFORK_GRAD_BUCKETS=2):
   * their failure is that of an all-reduce */
  coll_t k = {.was_broken = acc->broken,
              .c = {.op = NBF_RS_ALL_REDUCE, .dtype = ACC_F32, .reduce = ACC_AVG, .root = -1,
                    .seq = acc->coll_seq, .start_ms = nbf_now_ms()}};
  if (!acc->broken)
    gloo_failed(acc, r, err);
  return coll_end(acc, &k, r);
}
