/*
 * ln_rdzv.c — node arrival at node 0's store (see ln_rdzv.h).
 */
#define _GNU_SOURCE
#include "ln_rdzv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_util.h"

void ln_rdzv_begin(ln_rdzv_t *r, const ln_options_t *o, int restart) {
  memset(r, 0, sizeof *r);
  r->o = o;
  if (o->num_nodes <= 1) {
    r->done = 1;
    return;
  }
  snprintf(r->prefix, sizeof r->prefix, "%s-r%d/nodes/", o->rdzv_id[0] ? o->rdzv_id : "nbfork",
           restart);
  r->deadline_ms = nbf_now_ms() + o->rdzv_timeout_s * 1000.0;
  r->client =
      acc_store_client_new_secure(o->master_addr, o->use_port, LN_RDZV_POLL_MS, o->rdzv_secret);
}

static void node_key(const ln_rdzv_t *r, int node, char *key, size_t n) {
  snprintf(key, n, "%s%d", r->prefix, node);
}

int ln_rdzv_poll(ln_rdzv_t *r, char **error) {
  if (r->done)
    return 0;
  const ln_options_t *o = r->o;
  char key[256];
  if (r->client && !r->self_set) {
    node_key(r, o->node_rank, key, sizeof key);
    char host[64] = "";
    snprintf(host, sizeof host, "node %d", o->node_rank);
    if (acc_store_set(r->client, key, host, strlen(host)) == ACC_OK) {
      r->self_set = 1;
      if (o->node_rank != 0)
        r->done = 1; /* node 0 does the counting */
    }
  }
  if (r->client && r->self_set && o->node_rank == 0) {
    int all = 1;
    for (int n = 1; n < o->num_nodes && all; n++) {
      int exists = 0;
      node_key(r, n, key, sizeof key);
      if (acc_store_check(r->client, key, &exists) != ACC_OK || !exists)
        all = 0;
    }
    if (all) {
      r->done = 1;
      return 0;
    }
  }
  if (nbf_now_ms() < r->deadline_ms)
    return 0;
  /* timed out: say who is missing */
  if (o->node_rank != 0 || !r->client || !r->self_set) {
    if (asprintf(error,
                 "rendezvous: node 0's store at %s:%d did not answer within rdzv_timeout=%d s. "
                 "Run the launch cell of node_rank=0 (same use_port, num_nodes, rdzv_id) and check "
                 "that %s:%d is reachable from this machine (and that every node uses the same "
                 "rendezvous secret).",
                 o->master_addr, o->use_port, o->rdzv_timeout_s, o->master_addr, o->use_port) < 0)
      *error = NULL;
    return -1;
  }
  char missing[512] = "";
  size_t off = 0;
  int count = 0;
  for (int n = 1; n < o->num_nodes; n++) {
    int exists = 0;
    node_key(r, n, key, sizeof key);
    if (acc_store_check(r->client, key, &exists) == ACC_OK && exists)
      continue;
    count++;
    if (off < sizeof missing)
      off +=
          (size_t)snprintf(missing + off, sizeof missing - off, "%s%d", count > 1 ? ", " : "", n);
  }
  if (asprintf(error,
               "rendezvous: node%s %s of num_nodes=%d did not join within rdzv_timeout=%d s "
               "(node 0 waited at %s:%d, rdzv_id '%s'). Start their launch cells with the same "
               "master_addr, use_port, num_nodes and rdzv_id.",
               count > 1 ? "s" : "", missing, o->num_nodes, o->rdzv_timeout_s, o->master_addr,
               o->use_port, o->rdzv_id) < 0)
    *error = NULL;
  return -1;
}

void ln_rdzv_end(ln_rdzv_t *r) {
  acc_store_client_destroy(&r->client);
  r->done = 1;
}
