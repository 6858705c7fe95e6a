/*
 * ln_rdzv — the launchers of several nodes meet at the store of node 0
 * (static rendezvous, as torch elastic's "static" backend does, on the
 * store that nbfork's node 0 hosts at master_addr:use_port).
 *
 * Each node's launcher sets the key RUN/nodes/NODE_RANK in the store
 * (RUN = rdzv_id and restart count, so runs with different rdzv_id never
 * mix); node 0 waits until every node's key exists. A node that does not
 * arrive within rdzv_timeout seconds makes the launch fail with the list of
 * missing nodes (on node 0), or with "node 0's store did not answer" (on
 * the others). Polled from the launcher's monitor loop: never blocks more
 * than LN_RDZV_POLL_MS.
 */
#ifndef LN_RDZV_H
#define LN_RDZV_H

#include "acc_store.h"
#include "ln_options.h"

#define LN_RDZV_POLL_MS 200

typedef struct {
  const ln_options_t *o;
  acc_store_client_t *client; /* NULL for a single node, or when done */
  char prefix[200];
  int self_set;    /* our key is in the store                 */
  int done;        /* every node arrived (or single node)    */
  double deadline_ms;
} ln_rdzv_t;

/* Start (after the fork: the client has ZeroMQ threads). */
void ln_rdzv_begin(ln_rdzv_t *r, const ln_options_t *o, int restart);

/* Advance. Returns 0 (arrived or still waiting), or -1 when the timeout
 * passed, with *error (caller frees) naming the missing nodes. */
int ln_rdzv_poll(ln_rdzv_t *r, char **error);

/* Close the client (before any fork). */
void ln_rdzv_end(ln_rdzv_t *r);

#endif
