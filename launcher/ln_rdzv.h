/*
 * ln_rdzv — the launchers of several nodes meet at the store of node 0
 * (static rendezvous, as torch elastic's "static" backend does, on the
 * store that nbfork's node 0 hosts at master_addr:use_port), and agree on
 * the world before any worker joins the process group.
 *
 * Keys (RUN = "nbfork-rdzv/r" + the restart count; rdzv_id is not in it,
 * so that nodes with different rdzv_id meet and are told so):
 *   RUN/node/K     node K's world description (ln_rdzv_describe): rdzv_id,
 *                  num_nodes, num_processes, mixed_precision, host
 *   RUN/verdict    set by node 0 once every node arrived (or the timeout
 *                  passed): "OK", or the error every node reports
 *   RUN/ack/K      node K read a refusing verdict (node 0 keeps its store
 *                  up until every arrived node acknowledged, at most
 *                  LN_RDZV_LINGER_MS, so that none misses it)
 *   GATE           ln_rdzv_gate_key: set by node 0 when the verdict is OK;
 *                  workers (NBFORK_RDZV_GATE) wait for it before joining
 *                  the process group, so a mismatch is reported by the
 *                  launchers, never as a Gloo error.
 *
 * Failures, each within rdzv_timeout (+ LN_RDZV_GRACE_MS on nodes > 0,
 * which wait for node 0's verdict): descriptions that differ (every
 * differing field with each node's value); nodes missing (named, with
 * the connections node 0's store refused and why: a secret on one side
 * only, or two secrets); node 0's store unreachable or refusing this
 * node's secret (said from the handshake: acc_store_client_refusal).
 * Polled from the launcher's monitor loop: never blocks more than about
 * LN_RDZV_POLL_MS per store request.
 */
#ifndef LN_RDZV_H
#define LN_RDZV_H

#include <stddef.h>

#include "acc_store.h"
#include "ln_options.h"

#define LN_RDZV_POLL_MS 200
/* Nodes > 0 wait this much longer than rdzv_timeout for node 0's verdict
 * (node 0 may have started later). */
#define LN_RDZV_GRACE_MS 4000
/* Node 0 keeps a refusing verdict readable at most this long. */
#define LN_RDZV_LINGER_MS 3000

typedef struct {
  const ln_options_t *o;
  const acc_store_server_t *srv; /* node 0: its store, for refusal counts */
  acc_store_client_t *client;    /* NULL for a single node, or when done */
  char prefix[64];
  char gate[200];
  int restart;
  int self_set;        /* our description is in the store            */
  int done;            /* verdict OK (or single node)                */
  int refusal;         /* nodes > 0: acc_store_refusal_t last seen   */
  int *present;        /* node 0: which nodes' descriptions exist    */
  char *error;         /* the refusing verdict, once known           */
  double deadline_ms;  /* rdzv_timeout from ln_rdzv_begin            */
  double linger_until; /* node 0: > 0 while a refusal is kept up     */
} ln_rdzv_t;

/* Start (after the fork: the client has ZeroMQ threads). `srv` is node
 * 0's store (NULL elsewhere). */
void ln_rdzv_begin(ln_rdzv_t *r, const ln_options_t *o, int restart, const acc_store_server_t *srv);

/* Advance. Returns 0 (agreed, or still waiting), or -1 when the
 * rendezvous failed, with *error (caller frees) saying what differs or
 * who is missing and what to do. */
int ln_rdzv_poll(ln_rdzv_t *r, char **error);

/* Close the client (before any fork). */
void ln_rdzv_end(ln_rdzv_t *r);

/* The store key workers wait for (NBFORK_RDZV_GATE) in run `restart`. */
void ln_rdzv_gate_key(const ln_options_t *o, int restart, char *out, size_t n);

/* This node's world description (the value of RUN/node/K). */
void ln_rdzv_describe(const ln_options_t *o, char *out, size_t n);

/* Compare the descriptions desc[0..n) (NULL = not arrived) field by
 * field: NULL when they agree, else a malloc'd text naming each field
 * that differs and each node's value. Pure; unit-tested. */
char *ln_rdzv_compare(const char *const *desc, int n);
/* The same in `nbfork launch`'s words when cli != 0: its flag names, per
 * machine ("--num_processes 4 on machine 0, 2 on machine 1"). */
char *ln_rdzv_compare_for(const char *const *desc, int n, int cli);

#endif
