/*
 * acc_node_internal.h — the node group's state (acc_node.c) shared with
 * HYBRID_SHARD's collectives (acc_node_hybrid.c): this rank's node, the
 * leaders' Gloo group between nodes, and the replica group (the ranks
 * with this rank's member index on every node). Internal to runtime/comm.
 */
#ifndef ACC_NODE_INTERNAL_H
#define ACC_NODE_INTERNAL_H

#include <stdint.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_shm.h"

struct acc_node {
  acc_shm_t *shm;      /* this node's ranks */
  int n, me;           /* members of this node, this rank's index */
  int *member_rank;    /* global rank of each member */
  int nnodes, node;    /* nodes, this rank's node */
  int *node_of;        /* node of each global rank */
  int *index_of;       /* member index of each global rank */
  int *leader_of;      /* global rank of each node's leader */
  int maxn;            /* members of the largest node */
  acc_gloo_t *leaders; /* the leaders' group: on leaders, with several nodes */
  /* HYBRID_SHARD's replica group of a member other than 0 (member 0's is
   * the leaders' group: the same ranks in the same order), connected at
   * the first use (acc_node_hybrid.c) */
  acc_gloo_t *replica;
  /* payload bytes this rank handed to Gloo between nodes (the leaders'
   * and the replica group's collectives): acc__node_cross_bytes */
  uint64_t cross_bytes;
  int lost; /* global rank the last failure lost, or -1 */
};

/* Connect *g: a Gloo group of member `member` of every node (one rank
 * per node, numbered by node; this rank is member `member` of its node),
 * listening on `host`, its keys under "<key_prefix>node/<name>/", its
 * error texts naming world ranks, and its synchronous mesh connected at
 * once (two all-reduces of one float) while every member is here, so
 * that no later collective waits in the store for a member whose node
 * already failed. 0, or -1 with acc's error set ("connecting <what>:
 * ..."). Collective over the group. */
int acc__node_gloo_group(acc_t *acc, acc_node_t *nd, int member, acc_gloo_t **g, const char *host,
                         const char *name, const char *what);

/* A call of a Gloo group between nodes (the leaders', or HYBRID_SHARD's
 * replica group: member nd->me of every node, numbered by node) that
 * handed it `bytes` of payload (counted: acc__node_cross_bytes) ended
 * with r; a failure records the rank it lost (this rank's member index
 * on the lost node) and aborts the node's shared memory, so that its
 * members do not wait for the result. Returns r. */
acc_result_t acc__node_cross_done(acc_t *acc, acc_gloo_t *g, size_t bytes, acc_result_t r);

/* A shared-memory call's result: a failure records the member it lost. */
acc_result_t acc__node_local_done(acc_node_t *nd, acc_result_t r);

#endif /* ACC_NODE_INTERNAL_H */
