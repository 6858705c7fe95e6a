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
#include "acc_node_internal.h"
#include "acc_reduce.h"
#include "acc_shm.h"
#include "nbf_param.h"

static void node_free(acc_node_t *nd) {
  if (!nd)
    return;
  acc_shm_destroy(&nd->shm);
  acc_gloo_destroy(&nd->leaders);
  acc_gloo_destroy(&nd->replica);
  free(nd->member_rank);
  free(nd->node_of);
  free(nd->index_of);
  free(nd->leader_of);
  free(nd);
}

/* ---- joining: O(N) messages through the store ----
 *
 * A full mesh's rendezvous makes every rank read every other rank's key
 * (N^2 messages through the one store, then N^2/2 connections). Here rank
 * 0 collects one small card per rank, numbers the nodes, and publishes
 * the layout (4 bytes per rank) and each node's cards; each rank reads the
 * layout and its own node's cards, maps its node's workspaces, and the
 * verdict (every rank could map them, or all use Gloo) goes the same way.
 */

static void key_of(const acc_t *acc, char *key, size_t n, const char *name, int i) {
  if (i >= 0)
    snprintf(key, n, "%snode/%s/%d", acc->key_prefix, name, i);
  else
    snprintf(key, n, "%snode/%s", acc->key_prefix, name);
}

static int store_failed(acc_t *acc, acc_result_t r, const char *key, int who) {
  if (r == ACC_ERR_TIMEOUT && who > 0)
    acc__set_error(acc, r,
                   "rendezvous: rank %d did not arrive in time (not started, crashed before "
                   "acc_new, or started with another MASTER_ADDR/MASTER_PORT/WORLD_SIZE/"
                   "NBFORK_RUN_ID): %s",
                   who, acc_store_client_error(acc->store));
  else
    acc__set_error(acc, r, "rendezvous (store key '%s'): %s", key,
                   acc_store_client_error(acc->store));
  return -1;
}

/* Read `key` (exactly len bytes) into buf. */
static int store_read(acc_t *acc, const char *key, void *buf, size_t len, int who) {
  void *v = NULL;
  size_t n = 0;
  acc_result_t r = acc_store_get(acc->store, key, &v, &n);
  if (r == ACC_OK && n != len)
    r = ACC_ERR_STORE;
  if (r == ACC_OK)
    memcpy(buf, v, len);
  free(v);
  return r == ACC_OK ? 0 : store_failed(acc, r, key, who);
}

/* Every rank's `len` bytes to rank 0 (into all, rank-major; others only
 * set theirs). 0, or -1 with acc's error set. */
static int gather_to_0(acc_t *acc, const char *name, const void *mine, size_t len, void *all) {
  char key[320];
  if (acc->rank != 0) {
    key_of(acc, key, sizeof key, name, acc->rank);
    acc_result_t r = acc_store_set(acc->store, key, mine, len);
    return r == ACC_OK ? 0 : store_failed(acc, r, key, -1);
  }
  memcpy(all, mine, len);
  for (int q = 1; q < acc->world; q++) {
    key_of(acc, key, sizeof key, name, q);
    if (store_read(acc, key, (char *)all + (size_t)q * len, len, q) != 0)
      return -1;
  }
  return 0;
}

/* Rank 0 sets `name` (index i, or none when i < 0) to buf; the others read
 * it into buf. */
static int publish(acc_t *acc, const char *name, int i, void *buf, size_t len) {
  char key[320];
  key_of(acc, key, sizeof key, name, i);
  if (acc->rank != 0)
    return store_read(acc, key, buf, len, -1);
  acc_result_t r = acc_store_set(acc->store, key, buf, len);
  return r == ACC_OK ? 0 : store_failed(acc, r, key, -1);
}

/* Rank 0: number the nodes in the order of their lowest rank from every
 * rank's card: layout[0] = 1 when every card is usable, layout[1 + r] =
 * rank r's node. */
static void number_nodes(const acc_shm_card_t *cards, int world, int32_t *layout) {
  int32_t nnodes = 0, *leader = calloc((size_t)world, sizeof *leader);
  layout[0] = leader != NULL;
  for (int r = 0; r < world && leader; r++) {
    int k = 0;
    while (k < nnodes && cards[leader[k]].node != cards[r].node)
      k++;
    if (k == nnodes)
      leader[nnodes++] = r;
    layout[1 + r] = k;
    layout[0] &= cards[r].ok;
  }
  free(leader);
}

/* Every rank: the node tables from the published layout. 0, or -1 (no
 * memory). */
static int node_layout(acc_node_t *nd, const int32_t *node_of, int world, int rank) {
  nd->node_of = calloc((size_t)world, sizeof(int));
  nd->index_of = calloc((size_t)world, sizeof(int));
  nd->leader_of = calloc((size_t)world, sizeof(int));
  nd->member_rank = calloc((size_t)world, sizeof(int));
  int *size = calloc((size_t)world, sizeof(int));
  if (!nd->node_of || !nd->index_of || !nd->leader_of || !nd->member_rank || !size) {
    free(size);
    return -1;
  }
  for (int r = 0; r < world; r++) {
    int k = node_of[r];
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

/* Rank 0 publishes each node's cards (member order); every rank reads its
 * own node's into mine (nd->n cards). */
static int node_cards(acc_t *acc, acc_node_t *nd, const acc_shm_card_t *all, acc_shm_card_t *mine) {
  if (acc->rank != 0)
    return publish(acc, "node_cards", nd->node, mine, (size_t)nd->n * sizeof *mine);
  acc_shm_card_t *one = calloc((size_t)nd->maxn, sizeof *one);
  if (!one) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    return -1;
  }
  int rc = 0;
  for (int k = 0; k < nd->nnodes && rc == 0; k++) {
    int m = 0;
    for (int r = 0; r < acc->world; r++)
      if (nd->node_of[r] == k)
        one[m++] = all[r];
    if (k == nd->node)
      memcpy(mine, one, (size_t)m * sizeof *one);
    rc = publish(acc, "node_cards", k, one, (size_t)m * sizeof *one);
  }
  free(one);
  return rc;
}

/* Map this node's workspaces. 1 on success, 0 when they cannot be used. */
static int node_attach(acc_node_t *nd, const acc_shm_card_t *mine, int timeout_ms) {
  char why[512];
  return acc_shm_attach(nd->shm, mine, nd->member_rank, nd->n, nd->me, timeout_ms, why,
                        sizeof why) == 0;
}

/* Every rank's 1/0 to rank 0, the verdict back: 1 when all are 1, 0 when
 * not, -1 on failure. */
static int all_agree(acc_t *acc, int ok) {
  int32_t v = ok, verdict = 1, *all = acc->rank == 0 ? calloc((size_t)acc->world, 4) : NULL;
  if (acc->rank == 0 && !all) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    return -1;
  }
  int rc = gather_to_0(acc, "ok", &v, sizeof v, all);
  for (int i = 0; rc == 0 && all && i < acc->world; i++)
    verdict &= all[i] == 1;
  free(all);
  if (rc == 0)
    rc = publish(acc, "verdict", -1, &verdict, sizeof verdict);
  return rc == 0 ? verdict : -1;
}

int acc__node_gloo_group(acc_t *acc, acc_node_t *nd, int member, acc_gloo_t **g, const char *host,
                         const char *name, const char *what) {
  char prefix[256], err[1024];
  snprintf(prefix, sizeof prefix, "%snode/%s/", acc->key_prefix, name);
  acc_result_t r = acc_gloo_connect(g, nd->node, nd->nnodes, host, acc->store, prefix,
                                    acc->timeout_ms, 0, err, sizeof err);
  /* The shim connects its second (synchronous) mesh at the first repeated
   * all-reduce, through the store: connect it now, while every member is
   * here, so that no later collective waits in the store for a member
   * whose node already failed (its closed connections fail the others at
   * once; a store wait would last until NBFORK_TIMEOUT_S). */
  for (int i = 0; i < 2 && r == ACC_OK; i++) {
    float one = 1.0f;
    r = acc_gloo_all_reduce_algo(*g, &one, 1, ACC_F32, ACC_SUM, ACC_GLOO_AUTO, err, sizeof err);
  }
  if (r != ACC_OK) {
    acc_gloo_destroy(g);
    acc__set_error(acc, r, "connecting %s: %s", what, err);
    return -1;
  }
  /* its error texts name world ranks (without the table, group ranks) */
  int *world_rank = malloc((size_t)nd->nnodes * sizeof *world_rank);
  for (int q = 0; world_rank && q < acc->world; q++)
    if (nd->index_of[q] == member)
      world_rank[nd->node_of[q]] = q;
  acc_gloo_set_world_ranks(*g, world_rank, world_rank ? nd->nnodes : 0);
  free(world_rank);
  return 0;
}

/* The leaders' Gloo group (several nodes; on leaders only). */
static int leaders_connect(acc_t *acc, acc_node_t *nd, const char *host) {
  if (nd->nnodes == 1 || nd->me != 0)
    return 0;
  return acc__node_gloo_group(acc, nd, 0, &nd->leaders, host, "leaders", "the nodes' leaders");
}

/* The node tables and this rank's workspaces mapped: 1; some rank cannot
 * (every rank learns it alike): 0; failure: -1. */
static int node_join(acc_t *acc, acc_node_t *nd, const acc_shm_card_t *card) {
  const int world = acc->world;
  acc_shm_card_t *all = acc->rank == 0 ? calloc((size_t)world, sizeof *all) : NULL;
  int32_t *layout = calloc((size_t)world + 1, sizeof *layout);
  acc_shm_card_t *mine = calloc((size_t)world, sizeof *mine);
  int rc = -1;
  if ((acc->rank == 0 && !all) || !layout || !mine) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    goto out;
  }
  if (gather_to_0(acc, "cards", card, sizeof *card, all) != 0)
    goto out;
  if (acc->rank == 0)
    number_nodes(all, world, layout);
  if (publish(acc, "layout", -1, layout, ((size_t)world + 1) * sizeof *layout) != 0)
    goto out;
  if (!layout[0]) { /* a rank has no workspace: Gloo for everyone */
    rc = 0;
    goto out;
  }
  if (node_layout(nd, layout + 1, world, acc->rank) != 0) {
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    goto out;
  }
  if (node_cards(acc, nd, all, mine) != 0)
    goto out;
  rc = all_agree(acc, node_attach(nd, mine, acc->timeout_ms));
out:
  free(all);
  free(layout);
  free(mine);
  return rc;
}

int acc__node_connect(acc_t *acc, const char *host) {
  if (!nbf_param_NBFORK_SHM_COLLECTIVES())
    return 0;
  acc_node_t *nd = calloc(1, sizeof *nd);
  acc_shm_card_t card;
  char why[512] = "", extra[64];
  snprintf(extra, sizeof extra, "node %s", nbf_param_str(NBF_P_NODE_RANK));
  acc_shm_t *s = acc_shm_create(&card, extra, why, sizeof why);
  if (!nd) {
    acc_shm_destroy(&s);
    acc__set_error(acc, ACC_ERR_NO_MEMORY, "shared-memory setup: no memory");
    return -1;
  }
  nd->shm = s;
  nd->lost = -1;
  int joined = node_join(acc, nd, &card);
  if (joined <= 0) { /* 0: some rank cannot, Gloo for everyone */
    node_free(nd);
    return joined;
  }
  acc_shm_close_fds(nd->shm);
  if (leaders_connect(acc, nd, host) != 0) {
    node_free(nd);
    return -1;
  }
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
}

void acc__node_release_store(acc_t *acc) {
  if (acc->node) {
    acc_gloo_release_store(acc->node->leaders);
    acc_gloo_release_store(acc->node->replica);
  }
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

long acc__shm_waits_slept_at_once(const acc_t *acc) {
  return acc && acc->node ? acc_shm_waits_slept_at_once(acc->node->shm) : 0;
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
  acc_gloo_destroy(&acc->node->replica);
}

/* ---- the collectives ---- */

/* Record which rank a failure lost: a member (shared memory) or a node's
 * leader (Gloo between leaders). */
acc_result_t acc__node_local_done(acc_node_t *nd, acc_result_t r) {
  if (r != ACC_OK) {
    int m = acc_shm_lost_member(nd->shm);
    nd->lost = m >= 0 && m < nd->n ? nd->member_rank[m] : -1;
  }
  return r;
}
acc_result_t acc__node_cross_done(acc_t *acc, acc_gloo_t *g, size_t bytes, acc_result_t r) {
  acc_node_t *nd = acc->node;
  nd->cross_bytes += bytes;
  if (r == ACC_OK)
    return r;
  int k = acc_gloo_lost_peer(g); /* the group numbers its ranks by node */
  nd->lost = -1;
  for (int q = 0; k >= 0 && q < acc->world; q++)
    if (nd->node_of[q] == k && nd->index_of[q] == nd->me)
      nd->lost = q;
  acc_shm_abort(nd->shm); /* this node's members must not wait for the result */
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
    return acc__node_local_done(nd,
                                acc_shm_all_reduce(nd->shm, buf, count, dtype, op, err, errlen));
  /* AVG: sums, divided by the world once at the end */
  acc_op_t o = op == ACC_AVG ? ACC_SUM : op;
  acc_result_t r =
      acc__node_local_done(nd, acc_shm_all_reduce(nd->shm, buf, count, dtype, o, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = acc__node_cross_done(
        acc, nd->leaders, count * acc_dtype_size(dtype),
        acc_gloo_all_reduce_algo(nd->leaders, buf, count, dtype, o, ACC_GLOO_AUTO, err, errlen));
  if (r == ACC_OK)
    r = acc__node_local_done(
        nd, acc_shm_broadcast(nd->shm, buf, count * acc_dtype_size(dtype), 0, err, errlen));
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
    r = acc__node_local_done(nd, acc_shm_broadcast(nd->shm, buf, bytes, rmember, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = acc__node_cross_done(acc, nd->leaders, bytes,
                             acc_gloo_broadcast(nd->leaders, buf, bytes, rnode, err, errlen));
  if (r == ACC_OK && nd->node != rnode)
    r = acc__node_local_done(nd, acc_shm_broadcast(nd->shm, buf, bytes, 0, err, errlen));
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
    r = acc__node_local_done(nd, acc_shm_all_gather(nd->shm, send, local, bytes, err, errlen));
  if (r == ACC_OK && leading(nd))
    r = acc__node_cross_done(acc, nd->leaders, block,
                             acc_gloo_all_gather(nd->leaders, local, all, block, err, errlen));
  if (r == ACC_OK && leading(nd))
    for (int q = 0; q < acc->world; q++)
      memcpy((unsigned char *)recv + (size_t)q * bytes,
             all + (size_t)nd->node_of[q] * block + (size_t)nd->index_of[q] * bytes, bytes);
  if (r == ACC_OK)
    r = acc__node_local_done(
        nd, acc_shm_broadcast(nd->shm, recv, bytes * (size_t)acc->world, 0, err, errlen));
  free(local);
  free(all);
  return r;
}

acc_result_t acc__node_all_gather(acc_t *acc, const void *send, void *recv, size_t bytes, char *err,
                                  size_t errlen) {
  acc_node_t *nd = acc->node;
  if (nd->nnodes == 1)
    return acc__node_local_done(nd, acc_shm_all_gather(nd->shm, send, recv, bytes, err, errlen));
  return all_gather_nodes(acc, send, recv, bytes, err, errlen);
}

acc_result_t acc__node_reduce_scatter(acc_t *acc, const void *send, void *recv, size_t count,
                                      acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  if (nd->nnodes == 1)
    return acc__node_local_done(
        nd, acc_shm_reduce_scatter(nd->shm, send, recv, count, dtype, op, err, errlen));
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

int acc__node_shape(const acc_t *acc, int *members, int *me, int *nnodes) {
  const acc_node_t *nd = acc ? acc->node : NULL;
  if (!nd)
    return -1;
  *members = nd->n, *me = nd->me, *nnodes = nd->nnodes;
  return nd->maxn * nd->nnodes == acc->world ? 0 : 1; /* 1: nodes of unequal sizes */
}

acc_result_t acc__node_local_all_gather(acc_t *acc, const void *send, void *recv, size_t bytes,
                                        char *err, size_t errlen) {
  return acc__node_local_done(acc->node,
                              acc_shm_all_gather(acc->node->shm, send, recv, bytes, err, errlen));
}

acc_result_t acc__node_barrier(acc_t *acc, int leaving, char *err, size_t errlen) {
  acc_node_t *nd = acc->node;
  acc_result_t r = acc__node_local_done(nd, acc_shm_barrier(nd->shm, leaving, err, errlen));
  if (nd->nnodes == 1)
    return r;
  if (r == ACC_OK && leading(nd))
    r = acc__node_cross_done(acc, nd->leaders, 0, acc_gloo_barrier(nd->leaders, err, errlen));
  if (r == ACC_OK)
    r = acc__node_local_done(nd, acc_shm_barrier(nd->shm, leaving, err, errlen));
  return r;
}
