/*
 * ln_ranks_nodes — the executors of several nodes running one group of
 * rank workers (`%ranks start ... num_nodes=M node_rank=K`) agree on how
 * each `%%ranks` cell ended, through node 0's rendezvous store (the one
 * `%launch` and the ranks meet at, secret included).
 *
 * Why: each node's kernel sends a cell to its own ranks only, but the
 * ranks of every node form one process group. A rank that dies, or an
 * interrupt, on one node leaves the other nodes' ranks waiting in
 * collectives that will never complete, and a collective cut on one node
 * puts the whole group out of step: every rank of every node must rebuild
 * it (acc_rebuild_process_groups) with the same epoch, or none may.
 *
 * The cells are numbered alike on every node (`seq`: the %%ranks cells
 * sent since the start; every node runs the same cells in the same order,
 * as every node runs the same script under a launcher). Keys, under
 * "nbfork-ranks/r<restart>/c<seq>/":
 *   stop/K      set by node K when it stopped the cell: "F<text>" a rank
 *               died, "I<text>" an interrupt; the other nodes poll these
 *               keys while the cell runs (one request per other node per
 *               monitor tick) and stop their ranks too
 *   node/K      node K's verdict when the cell ended there: "o" finished,
 *               "k" stopped outside collectives, "c" a rank cut inside a
 *               collective, "d<text>" a rank dead
 *   decider     ADD counter: the node that gets 1 decides
 *   decision    "N" nothing to rebuild, "R" rebuild with epoch seq,
 *               "X<text>" the group cannot be rebuilt, and why
 * The decider waits LN_RKN_DECIDE_MS for every node's verdict: a node
 * that did not end the cell by then (it never ran it) makes the decision
 * "X", so every node reads the same decision whatever the timing.
 */
#ifndef LN_RANKS_NODES_H
#define LN_RANKS_NODES_H

#include "ln_options.h"

/* How long the decider waits for every node's verdict: a running node
 * sees the stop at its next monitor tick and ends its cell within the
 * ranks' answer time (1 s), so this leaves it a margin. */
#define LN_RKN_DECIDE_MS 4000

typedef struct ln_rk_nodes ln_rk_nodes_t;

typedef enum { LN_RKN_NOTHING, LN_RKN_REBUILD, LN_RKN_CANNOT } ln_rkn_decision_t;

/* A client of node 0's store for run `restart` (after the workers were
 * forked: the client has ZeroMQ threads). NULL with *error (caller
 * frees) when it cannot be made. Caller owns the result. */
ln_rk_nodes_t *ln_rk_nodes_open(const ln_options_t *o, int restart, char **error);

/* Close the client. NULL-safe; clears the pointer. */
void ln_rk_nodes_close(ln_rk_nodes_t **p);

/* Cell `seq` was stopped on this node: kind 'F' (a rank died) or 'I'
 * (an interrupt), `why` one line naming the rank and node. */
void ln_rk_nodes_stop(ln_rk_nodes_t *n, int seq, char kind, const char *why);

/* Whether another node stopped cell `seq`: the first such node's
 * "F..."/"I..." text (caller frees), or NULL (none, or the store did not
 * answer within 200 ms: asked again at the next tick). */
char *ln_rk_nodes_stopped(ln_rk_nodes_t *n, int seq);

/* This node's verdict on cell `seq` ('o', 'k', 'c', or 'd' with
 * `detail`, e.g. "rank 3 is dead"). */
void ln_rk_nodes_verdict(ln_rk_nodes_t *n, int seq, char verdict, const char *detail);

/* The decision on stopped cell `seq`, the same on every node: blocks up
 * to LN_RKN_DECIDE_MS (the decider) or that plus 2 s (the others). For
 * LN_RKN_CANNOT, *why (caller frees) says why ("rank 3 on node 1 is
 * dead", "node 1 did not end the cell", "node 0's store did not
 * answer"). */
ln_rkn_decision_t ln_rk_nodes_decide(ln_rk_nodes_t *n, int seq, char **why);

#endif
