/*
 * acc_node_hybrid.c — HYBRID_SHARD's collectives by node (PyTorch FSDP's
 * HYBRID_SHARD: shard within a node, replicate across nodes): the
 * replica group, i.e. the ranks with this rank's member index on every
 * node (FSDP's "inter-node process group"), as a Gloo group through the
 * store, and the reduce-scatter that sums a gradient within the node
 * through shared memory, then all-reduces only this member's block
 * across the replica group. A rank then moves 1/members of a unit
 * between nodes, where an all-reduce over the world has the node's
 * leader move all of it.
 */
#include <stdio.h>

#include "acc_node_internal.h"
#include "acc_reduce.h"

/* The replica group of this rank: member 0's is the leaders' group (the
 * same ranks, numbered by node alike); another member's is connected
 * here, once, under "<key_prefix>node/replica/<member>/". NULL with
 * acc's error set when it cannot be. */
static acc_gloo_t *replica_group(acc_t *acc) {
  acc_node_t *nd = acc->node;
  if (nd->me == 0)
    return nd->leaders;
  if (!nd->replica) {
    char name[32], what[64];
    snprintf(name, sizeof name, "replica/%d", nd->me);
    snprintf(what, sizeof what, "HYBRID_SHARD's replica group of member %d", nd->me);
    if (acc__node_gloo_group(acc, nd, nd->me, &nd->replica, acc->gloo_host, name, what) != 0)
      return NULL;
  }
  return nd->replica;
}

acc_result_t acc__node_replica_connect(acc_t *acc) {
  if (!acc->node || acc->node->nnodes < 2)
    return ACC_OK;
  if (!replica_group(acc))
    return ACC_ERR_PEER;
  /* every rank past its store reads before any goes on: rank 0 stops
   * hosting the store in acc_destroy, which a rank with nothing more to
   * do may reach while another still connects (acc_core.c) */
  char err[1024];
  acc_result_t r = acc__node_barrier(acc, 0, err, sizeof err);
  return r == ACC_OK
             ? ACC_OK
             : acc__set_error(acc, r, "after connecting HYBRID_SHARD's replica groups: %s", err);
}

acc_result_t acc__node_hybrid_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                             acc_dtype_t dtype, acc_op_t op, char *err,
                                             size_t errlen) {
  acc_node_t *nd = acc->node;
  /* AVG: sums, divided by the world once at the end (as the world's
   * all-reduce does: the same value where the sums have one order) */
  acc_op_t o = op == ACC_AVG ? ACC_SUM : op;
  acc_result_t r = acc__node_local_done(
      nd, acc_shm_reduce_scatter(nd->shm, send, recv, count, dtype, o, err, errlen));
  if (r == ACC_OK && nd->nnodes > 1) {
    acc_gloo_t *g = replica_group(acc);
    if (!g) {
      snprintf(err, errlen, "%s", acc->err);
      return ACC_ERR_PEER;
    }
    r = acc__node_cross_done(
        acc, g, count * acc_dtype_size(dtype),
        acc_gloo_all_reduce_algo(g, recv, count, dtype, o, ACC_GLOO_AUTO, err, errlen));
  }
  if (r == ACC_OK && op == ACC_AVG)
    acc_reduce_divide(recv, count, dtype, acc->world);
  return r;
}

uint64_t acc__node_cross_bytes(const acc_t *acc) {
  return acc && acc->node ? acc->node->cross_bytes : 0;
}

int acc__node_place(const acc_t *acc, int *node, int *me) {
  if (!acc || !acc->node)
    return -1;
  *node = acc->node->node, *me = acc->node->me;
  return 0;
}
