/*
 * ln_ranks_nodes.c — how a %%ranks cell ended, agreed by the executors of
 * every node through node 0's store (see ln_ranks_nodes.h).
 */
#define _GNU_SOURCE
#include "ln_ranks_nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_store.h"
#include "nbf_util.h"

/* A store request that should be answered at once (the stop poll). */
#define LN_RKN_POLL_MS 1000

struct ln_rk_nodes {
  acc_store_client_t *client;
  int num_nodes, node_rank, restart;
  ln_options_t o; /* where node 0's store is, its secret: to reconnect */
};

static acc_store_client_t *connect_store(const ln_options_t *o, char *err, size_t n) {
  return acc_store_client_open(o->master_addr, o->use_port, LN_RKN_POLL_MS,
                               o->rdzv_secret[0] ? o->rdzv_secret : NULL, err, n);
}

/* A request that got no answer in time leaves its answer on the way, and
 * the client reads answers in order (no request ids): the next request
 * would take it for its own. So a fresh client after any failure. */
static acc_result_t checked(ln_rk_nodes_t *n, acc_result_t r) {
  if (r != ACC_OK && r != ACC_ERR_INVALID_ARGUMENT) {
    char err[256];
    acc_store_client_destroy(&n->client);
    n->client = connect_store(&n->o, err, sizeof err); /* NULL: every request fails */
  }
  return r;
}

ln_rk_nodes_t *ln_rk_nodes_open(const ln_options_t *o, int restart, char **error) {
  ln_rk_nodes_t *n = calloc(1, sizeof *n);
  char err[256] = "out of memory";
  if (n)
    n->client = connect_store(o, err, sizeof err);
  if (!n || !n->client) {
    free(n);
    *error = nbf_xprintf("cannot reach node 0's store at %s:%d to follow the other nodes' "
                         "cells: %s",
                         o->master_addr, o->use_port, err);
    return NULL;
  }
  n->o = *o;
  n->num_nodes = o->num_nodes;
  n->node_rank = o->node_rank;
  n->restart = restart;
  return n;
}

void ln_rk_nodes_close(ln_rk_nodes_t **p) {
  if (!p || !*p)
    return;
  acc_store_client_destroy(&(*p)->client);
  free(*p);
  *p = NULL;
}

static void key(const ln_rk_nodes_t *n, int seq, const char *what, int node, char *out,
                size_t len) {
  if (node >= 0)
    snprintf(out, len, "nbfork-ranks/r%d/c%d/%s/%d", n->restart, seq, what, node);
  else
    snprintf(out, len, "nbfork-ranks/r%d/c%d/%s", n->restart, seq, what);
}

void ln_rk_nodes_stop(ln_rk_nodes_t *n, int seq, char kind, const char *why) {
  char k[128];
  key(n, seq, "stop", n->node_rank, k, sizeof k);
  char *v = nbf_xprintf("%c%s", kind, why);
  if (v)
    checked(n, acc_store_set(n->client, k, v, strlen(v)));
  free(v);
}

/* The value of k when it is set now (no wait), or NULL. */
static char *get_if_set(ln_rk_nodes_t *n, const char *k) {
  int exists = 0;
  void *v = NULL;
  size_t len = 0;
  if (checked(n, acc_store_check(n->client, k, &exists)) != ACC_OK || !exists ||
      checked(n, acc_store_get(n->client, k, &v, &len)) != ACC_OK)
    return NULL;
  return v; /* NUL-terminated by acc_store_get */
}

char *ln_rk_nodes_stopped(ln_rk_nodes_t *n, int seq) {
  char k[128], *v = NULL;
  for (int i = 0; i < n->num_nodes && !v; i++)
    if (i != n->node_rank) {
      key(n, seq, "stop", i, k, sizeof k);
      v = get_if_set(n, k);
    }
  return v;
}

void ln_rk_nodes_verdict(ln_rk_nodes_t *n, int seq, char verdict, const char *detail) {
  char k[128];
  key(n, seq, "node", n->node_rank, k, sizeof k);
  char *v = nbf_xprintf("%c%s", verdict, detail ? detail : "");
  if (v)
    checked(n, acc_store_set(n->client, k, v, strlen(v)));
  free(v);
}

/* The decider: every node's verdict (waited for together), then the
 * decision text ("N", "R" or "X<why>"; caller frees). */
static char *make_decision(ln_rk_nodes_t *n, int seq) {
  char(*keys)[128] = calloc((size_t)n->num_nodes, sizeof *keys);
  const char **kp = calloc((size_t)n->num_nodes, sizeof *kp);
  char *out = NULL;
  if (!keys || !kp)
    goto done;
  for (int i = 0; i < n->num_nodes; i++) {
    key(n, seq, "node", i, keys[i], sizeof keys[i]);
    kp[i] = keys[i];
  }
  checked(n, acc_store_wait(n->client, kp, (size_t)n->num_nodes, LN_RKN_DECIDE_MS));
  int cut = 0;
  size_t cap = 0;
  FILE *f = open_memstream(&out, &cap); /* "X" and every node's reason */
  if (!f)
    goto done;
  for (int i = 0; i < n->num_nodes; i++) {
    char *v = get_if_set(n, keys[i]);
    const char *sep = ftell(f) ? "; " : "X";
    if (!v)
      fprintf(f, "%snode %d did not end this cell within %d s (did its notebook run it?)", sep, i,
              LN_RKN_DECIDE_MS / 1000);
    else if (v[0] == 'd')
      fprintf(f, "%s%s on node %d", sep, v + 1, i);
    cut |= v && v[0] == 'c';
    free(v);
  }
  if (!ftell(f))
    fputs(cut ? "R" : "N", f);
  fclose(f);
done:
  free(keys);
  free(kp);
  return out;
}

ln_rkn_decision_t ln_rk_nodes_decide(ln_rk_nodes_t *n, int seq, char **why) {
  char kd[128], kx[128];
  key(n, seq, "decider", -1, kd, sizeof kd);
  key(n, seq, "decision", -1, kx, sizeof kx);
  int64_t turn = 0;
  char *text = NULL;
  *why = NULL;
  if (checked(n, acc_store_add(n->client, kd, 1, &turn)) == ACC_OK && turn == 1) {
    text = make_decision(n, seq);
    if (text)
      checked(n, acc_store_set(n->client, kx, text, strlen(text)));
  } else if (turn > 1) {
    if (n->client)
      acc_store_client_set_timeout(n->client, LN_RKN_DECIDE_MS + 2000);
    size_t len = 0;
    if (checked(n, acc_store_get(n->client, kx, (void **)&text, &len)) != ACC_OK)
      text = NULL;
    if (n->client)
      acc_store_client_set_timeout(n->client, LN_RKN_POLL_MS);
  }
  ln_rkn_decision_t d = LN_RKN_CANNOT;
  if (text && text[0] == 'N')
    d = LN_RKN_NOTHING;
  else if (text && text[0] == 'R')
    d = LN_RKN_REBUILD;
  else
    *why = text && text[0] == 'X'
               ? strdup(text + 1)
               : strdup("node 0's store did not answer with the nodes' decision");
  free(text);
  return d;
}
