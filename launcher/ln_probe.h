/*
 * ln_probe — after a multi-node launch failed, which other nodes this node
 * can no longer reach.
 *
 * Why: when the network between nodes is cut, every rank times out, and
 * Gloo's messages do not always name the peer across the cut (a rank of
 * each node may be waiting on a peer of its own node, and one of Gloo's
 * all-reduce paths names no peer at all), so the report could name only
 * the node's own address. The launcher itself still knows where the other
 * nodes are: node k > 0 the address of node 0's store (main_process_ip,
 * use_port), node 0 the addresses its store's clients came from
 * (acc_store_server_peers). A TCP connect with a short deadline tells a
 * reachable host (it connects, or refuses: the workers' ports are closed
 * by then) from one that does not answer (a cut link, a node down).
 */
#ifndef LN_PROBE_H
#define LN_PROBE_H

#include "acc_store.h"
#include "ln_options.h"

/* How long a node may take to answer the probe. */
#define LN_PROBE_MS 1000

/* 1 when a TCP connection to ip:port (a numeric IPv4 or IPv6 address)
 * gets an answer within timeout_ms (connected, or refused), 0 when none
 * came (timed out, host or network unreachable), -1 when the probe could
 * not be made here (a bad address, no socket). */
int ln_probe_tcp(const char *ip, int port, int timeout_ms);

/* For a failed launch of o->num_nodes > 1 nodes: one line per other node
 * that does not answer within LN_PROBE_MS ("the node at [ADDR] (node 0's
 * store) does not answer from this node ...: the network between the
 * nodes failed or that node went down"), or NULL when every node answers
 * (or there is a single node). `srv` is node 0's store (NULL elsewhere).
 * The nodes are probed at once, so this takes at most LN_PROBE_MS.
 * Caller frees. */
char *ln_probe_lost_nodes(const ln_options_t *o, const acc_store_server_t *srv);

#endif
