/*
 * acc_node.c — host collectives by node (issue 24): the ranks of a node
 * share memory (acc_shm.c); with several nodes, one leader per node (its
 * lowest rank) joins a second Gloo group, and each collective is
 * node-local through shared memory, then between leaders through Gloo,
 * then node-local again (DESIGN.md, "Intra-node collectives").
 *
 * A node is what acc_shm_node_id says (host name, boot id, pid
 * namespace) plus NODE_RANK: ranks that a launch declares on different
 * nodes are kept apart even on one host (tests simulate several nodes
 * so). Nodes are numbered in the order of their lowest rank; members in
 * rank order.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_reduce.h"
#include "acc_shm.h"
#include "nbf_param.h"

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
  int lost;            /* global rank the last failure lost, or -1 */
};

static void node_free(acc_node_t *nd) {
  if (!nd)
    return;
  acc_shm_destroy(&nd->shm);
  acc_gloo_destroy(&nd->leaders);
  free(nd->member_rank);
  free(nd->node_of);
  free(nd->index_of);
  free(nd->leader_of);
  free(nd);
}

/* Every rank's `len` bytes into all (rank-major), through the store in
 * O(N) messages: each rank sets its key, rank 0 collects them and sets
 * one key with the whole table, which every rank reads once. (A full
 * mesh's rendezvous makes every rank read every other rank's key: N^2
 * messages through the one store, and N^2/2 connections after.) 0, or -1
 * with acc's error set. */
static int store_all_gather(acc_t *acc, const char *name, const void *mine, size_t len, void *all) {
  char key[320];
  const size_t total = len * (size_t)acc->world;
  acc_result_t r = ACC_OK;
  int who = -1; /* whose key timed out */
  if (acc->rank != 0) {
    snprintf(key, sizeof key, "%snode/%s/%d", acc->key_prefix, name, acc->rank);
    r = acc_store_set(acc->store, key, mine, len);
  } else {
    memcpy(all, mine, len);
    for (int q = 1; q < acc->world && r == ACC_OK; q++) {
      void *v = NULL;
      size_t n = 0;
      snprintf(key, sizeof key, "%snode/%s/%d", acc->key_prefix, name, q);
      r = acc_store_get(acc->store, key, &v, &n);
      if (r == ACC_OK && n != len)
        r = ACC_ERR_STORE;
      if (r == ACC_OK)
        memcpy((char *)all + (size_t)q * len, v, len);
      else
        who = q;
      free(v);
    }
    snprintf(key, sizeof key, "%snode/%s/all", acc->key_prefix, name);
    if (r == ACC_OK)
      r = acc_store_set(acc->store, key, all, total);
  }
  if (r == ACC_OK && acc->rank != 0) {
    void *v = NULL;
    size_t n = 0;
    snprintf(key, sizeof key, "%snode/%s/all", acc->key_prefix, name);
    r = acc_store_get(acc->store, key, &v, &n);
    if (r == ACC_OK && n != total)
      r = ACC_ERR_STORE;
    if (r == ACC_OK)
      memcpy(all, v, total);
    free(v);
  }
  if (r == ACC_OK)
    return 0;
  if (r == ACC_ERR_TIMEOUT && who > 0)
    acc__set_error(acc, r,
                   "rendezvous: rank %d did not arrive in time (not started, crashed "
                   "before acc_new, or started with another MASTER_ADDR/MASTER_PORT/WORLD_SIZE/"
                   "NBFORK_RUN_ID): %s",
                   who, acc_store_client_error(acc->store));
  else
    acc__set_error(acc, r, "rendezvous (store key '%s'): %s", key,
                   acc_store_client_error(acc->store));
  return -1;
}

/* Every rank's 1/0 through the store: 1 when all are 1, -1 on failure. */
static int all_agree(acc_t *acc, int mine) {
  int32_t *all = calloc((size_t)acc->world, sizeof *all), v = mine;
  if (!all) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    return -1;
  }
  int yes = store_all_gather(acc, "ok", &v, sizeof v, all) == 0 ? 1 : -1;
  for (int i = 0; yes == 1 && i < acc->world; i++)
    yes = all[i] == 1;
  free(all);
  return yes;
}

/* Number the nodes and members from every rank's card. 0, or -1 (no
 * memory). */
static int node_layout(acc_node_t *nd, const acc_shm_card_t *cards, int world, int rank) {
  nd->node_of = calloc((size_t)world, sizeof(int));
  nd->index_of = calloc((size_t)world, sizeof(int));
  nd->leader_of = calloc((size_t)world, sizeof(int));
  nd->member_rank = calloc((size_t)world, sizeof(int));
  if (!nd->node_of || !nd->index_of || !nd->leader_of || !nd->member_rank)
    return -1;
  int *size = calloc((size_t)world, sizeof(int));
  if (!size)
    return -1;
  for (int r = 0; r < world; r++) {
    int k = 0;
    while (k < nd->nnodes && cards[nd->leader_of[k]].node != cards[r].node)
      k++;
    if (k == nd->nnodes)
      nd->leader_of[nd->nnodes++] = r;
    nd->node_of[r] = k;
    nd->index_of[r] = size[k]++;
  }
  nd->node = nd->node_of[rank];
  nd->me = nd->index_of[rank];
  nd->n = size[nd->node];
  for (int k = 0; k < nd->nnodes; k++)
    nd->maxn = size[k] > nd->maxn ? size[k] : nd->maxn;
  for (int r = 0; r < world; r++)
    if (nd->node_of[r] == nd->node)
      nd->member_rank[nd->index_of[r]] = r;
  free(size);
  return 0;
}

/* Map this node's workspaces. 1 on success, 0 when they cannot be used. */
static int node_attach(acc_node_t *nd, const acc_shm_card_t *cards, int timeout_ms) {
  acc_shm_card_t *mine = calloc((size_t)nd->n, sizeof *mine);
  char why[512];
  if (!mine)
    return 0;
  for (int i = 0; i < nd->n; i++)
    mine[i] = cards[nd->member_rank[i]];
  int ok = acc_shm_attach(nd->shm, mine, nd->member_rank, nd->n, nd->me, timeout_ms, why,
                          sizeof why) == 0;
  free(mine);
  return ok;
}

/* The leaders' Gloo group (several nodes; on leaders only). */
static int leaders_connect(acc_t *acc, acc_node_t *nd, const char *host) {
  if (nd->nnodes == 1 || nd->me != 0)
    return 0;
  char prefix[256], err[1024];
  snprintf(prefix, sizeof prefix, "%sleaders/", acc->key_prefix);
  acc_result_t r = acc_gloo_connect(&nd->leaders, nd->node, nd->nnodes, host, acc->store, prefix,
                                    acc->timeout_ms, 0, err, sizeof err);
  /* The shim connects its second (synchronous) mesh at the first repeated
   * all-reduce, through the store: connect it now, while every leader is
   * here, so that no later collective waits in the store for a leader
   * whose node already failed (its closed connections fail the others at
   * once; a store wait would last until NBFORK_TIMEOUT_S). */
  for (int i = 0; i < 2 && r == ACC_OK; i++) {
    float one = 1.0f;
    r = acc_gloo_all_reduce_algo(nd->leaders, &one, 1, ACC_F32, ACC_SUM, ACC_GLOO_AUTO, err,
                                 sizeof err);
  }
  if (r != ACC_OK) {
    acc__set_error(acc, r, "connecting the nodes' leaders: %s", err);
    return -1;
  }
  return 0;
}

int acc__node_connect(acc_t *acc, const char *host) {
  if (!nbf_param_bool(NBF_P_NBFORK_SHM_COLLECTIVES, 1))
    return 0;
  acc_node_t *nd = calloc(1, sizeof *nd);
  acc_shm_card_t mine, *cards = calloc((size_t)acc->world, sizeof *cards);
  char why[512] = "", extra[64];
  snprintf(extra, sizeof extra, "node %s", nbf_param_str(NBF_P_NODE_RANK));
  acc_shm_t *s = acc_shm_create(&mine, extra, why, sizeof why);
  if (!cards || !nd) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    goto fail;
  }
  nd->shm = s;
  s = NULL;
  nd->lost = -1;
  if (store_all_gather(acc, "cards", &mine, sizeof mine, cards) != 0)
    goto fail;
  int usable = 1; /* the same answer on every rank: from the same cards */
  for (int i = 0; i < acc->world; i++)
    usable &= cards[i].ok;
  int ok = usable && node_layout(nd, cards, acc->world, acc->rank) == 0 &&
           node_attach(nd, cards, acc->timeout_ms);
  free(cards);
  cards = NULL;
  int all = all_agree(acc, ok);
  if (all < 0)
    goto fail;
  if (all == 0) { /* some rank cannot: Gloo for everyone */
    node_free(nd);
    return 0;
  }
  acc_shm_close_fds(nd->shm);
  if (leaders_connect(acc, nd, host) != 0)
    goto fail;
  acc->node = nd;
  /* every rank is past its store reads once this returns (rank 0 may
   * stop hosting the store) */
  char err[1024];
  acc_result_t r = acc__node_barrier(acc, 0, err, sizeof err);
  if (r != ACC_OK) {
    acc->node = NULL;
    acc__set_error(acc, r, "first barrier of the process group: %s", err);
    node_free(nd);
    return -1;
  }
  return 1;
fail:
  free(cards);
  acc_shm_destroy(&s);
  node_free(nd);
  return -1;
}

void acc__node_release_store(acc_t *acc) {
  if (acc->node)
    acc_gloo_release_store(acc->node->leaders);
}

void acc__node_destroy(acc_t *acc) {
  node_free(acc->node);
  acc->node = NULL;
}

const char *acc__host_path(const acc_t *acc) {
  if (!acc || !acc->node)
    return "gloo";
  return acc->node->nnodes > 1 ? "shared memory + gloo between nodes" : "shared memory";
}

int acc__node_lost_rank(const acc_t *acc) {
  const acc_node_t *nd = acc->node;
  return nd ? nd->lost : -1;
}

void acc__node_abort(acc_t *acc) {
  if (!acc->node)
    return;
  acc_shm_abort(acc->node->shm);
  /* The other nodes' leaders must not wait for this node either: closing
   * this leader's connections fails their Gloo calls at once (PEER), and
   * they abort their own nodes in turn. The group is broken: no call
   * needs the leaders' group again. */
  acc_gloo_destroy(&acc->node->leaders);
}

/* ---- the collectives ---- */

/* Record which rank a failure lost: a member (shared memory) or a node's
 * leader (Gloo between leaders). */
static acc_result_t local_done(acc_node_t *nd, acc_result_t r) {
  if (r != ACC_OK) {
    int m = acc_shm_lost_member(nd->shm);
    nd->lost = m >= 0 && m < nd->n ? nd->member_rank[m] : -1;
  }
  return r;
}
static acc_result_t leaders_done(acc_node_t *nd, acc_result_t r) {
  if (r != ACC_OK) {
    int k = acc_gloo_lost_peer(nd->leaders);
    nd->lost = k >= 0 && k < nd->nnodes ? nd->leader_of[k] : -1;
    acc_shm_abort(nd->shm); /* this node's members must not wait for the result */
  }
  return r;
}

/* Between nodes: is this rank a leader with peers to talk to. */
static int leading(const acc_node_t *nd) {
  return nd->leaders != NULL;
}

acc_result_t acc__node_all_reduce(acc_t *acc, void *buf, size_t count, acc_dtype_t dtype,
                                  acc_op_t op, char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  if (nd->nnodes == 1)
    return local_done(nd, acc_shm_all_reduce(nd->shm, buf, count, dtype, op, err, errlen));
  /* AVG: sums, divided by the world once at the end */
  acc_op_t o = op == ACC_AVG ? ACC_SUM : op;
  acc_result_t r = local_done(nd, acc_shm_all_reduce(nd->shm, buf, count, dtype, o, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = leaders_done(nd, acc_gloo_all_reduce_algo(nd->leaders, buf, count, dtype, o, ACC_GLOO_AUTO,
                                                  err, errlen));
  if (r == ACC_OK)
    r = local_done(nd,
                   acc_shm_broadcast(nd->shm, buf, count * acc_dtype_size(dtype), 0, err, errlen));
  if (r == ACC_OK && op == ACC_AVG)
    acc_reduce_divide(buf, count, dtype, acc->world);
  return r;
}

acc_result_t acc__node_broadcast(acc_t *acc, void *buf, size_t bytes, int root, char *err,
                                 size_t errlen) {
  acc_node_t *nd = acc->node;
  int rnode = nd->node_of[root], rmember = nd->index_of[root];
  acc_result_t r = ACC_OK;
  if (nd->node == rnode) /* the root's node first: its leader then has the data */
    r = local_done(nd, acc_shm_broadcast(nd->shm, buf, bytes, rmember, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = leaders_done(nd, acc_gloo_broadcast(nd->leaders, buf, bytes, rnode, err, errlen));
  if (r == ACC_OK && nd->node != rnode)
    r = local_done(nd, acc_shm_broadcast(nd->shm, buf, bytes, 0, err, errlen));
  return r;
}

/* Several nodes: gather the node's blocks, exchange them between leaders
 * (padded to the largest node), place them by rank, share the whole. */
static acc_result_t all_gather_nodes(acc_t *acc, const void *send, void *recv, size_t bytes,
                                     char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  size_t block = (size_t)nd->maxn * bytes;
  unsigned char *local = calloc(1, block), *all = leading(nd) ? malloc(block * nd->nnodes) : NULL;
  acc_result_t r = local && (all || !leading(nd)) ? ACC_OK : ACC_ERR_NO_MEMORY;
  if (r != ACC_OK)
    snprintf(err, errlen, "all-gather: no memory for %zu bytes", block * nd->nnodes);
  if (r == ACC_OK)
    r = local_done(nd, acc_shm_all_gather(nd->shm, send, local, bytes, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = leaders_done(nd, acc_gloo_all_gather(nd->leaders, local, all, block, err, errlen));
  if (r == ACC_OK && leading(nd))
    for (int q = 0; q < acc->world; q++)
      memcpy((unsigned char *)recv + (size_t)q * bytes,
             all + (size_t)nd->node_of[q] * block + (size_t)nd->index_of[q] * bytes, bytes);
  if (r == ACC_OK)
    r = local_done(nd,
                   acc_shm_broadcast(nd->shm, recv, bytes * (size_t)acc->world, 0, err, errlen));
  free(local);
  free(all);
  return r;
}

acc_result_t acc__node_all_gather(acc_t *acc, const void *send, void *recv, size_t bytes, char *err,
                                  size_t errlen) {
  acc_node_t *nd = acc->node;
  if (nd->nnodes == 1)
    return local_done(nd, acc_shm_all_gather(nd->shm, send, recv, bytes, err, errlen));
  return all_gather_nodes(acc, send, recv, bytes, err, errlen);
}

acc_result_t acc__node_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                      acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  if (nd->nnodes == 1)
    return local_done(nd,
                      acc_shm_reduce_scatter(nd->shm, send, recv, count, dtype, op, err, errlen));
  /* as the Gloo path: all-reduce a copy of the whole input, keep the own
   * block */
  size_t esz = acc_dtype_size(dtype), total = count * esz * (size_t)acc->world;
  unsigned char *tmp = malloc(total);
  if (!tmp) {
    snprintf(err, errlen, "reduce-scatter: no memory for %zu bytes", total);
    return ACC_ERR_NO_MEMORY;
  }
  memcpy(tmp, send, total);
  acc_result_t r =
      acc__node_all_reduce(acc, tmp, count * (size_t)acc->world, dtype, op, err, errlen);
  if (r == ACC_OK)
    memcpy(recv, tmp + (size_t)acc->rank * count * esz, count * esz);
  free(tmp);
  return r;
}

acc_result_t acc__node_barrier(acc_t *acc, int leaving, char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  acc_result_t r = local_done(nd, acc_shm_barrier(nd->shm, leaving, err, errlen));
  if (nd->nnodes == 1)
    return r;
  if (r == ACC_OK && leading(nd))
    r = leaders_done(nd, acc_gloo_barrier(nd->leaders, err, errlen));
  if (r == ACC_OK)
    r = local_done(nd, acc_shm_barrier(nd->shm, leaving, err, errlen));
  return r;
}
