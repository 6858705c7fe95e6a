/*
 * acc_rebuild.c — a new process group after a collective was cut
 * (acc_rebuild_process_groups, nbfork.h: `%ranks` interrupts a cell
 * inside a collective, then asks every rank for a new epoch), and the
 * busy-poll choice of Gloo's mesh that the first join (acc_core.c) and a
 * rebuild share. Below acc_core.c and acc_collective.c: every collective
 * calls acc__rebuild_if_due first; nothing here calls up into them.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_nccl.h"
#include "nbf_param.h"
#include "nbf_rankstate.h"

/* NBFORK_GLOO_BUSY_POLL: 1 = the all-reduces and gathers of the
 * synchronous mesh (up to 4 MiB: every training step's gradients)
 * busy-poll their sockets, as MPI and NCCL do by default (Gloo's
 * busyPoll); 0 = they block in recv. Default: 1 when this node's ranks
 * do not outnumber its online CPUs, else 0.
 * Measured on the 2-vCPU VM (bench/train_fmnist.py, 2 processes): 2
 * processes trained 20-25% faster with it (27-31k vs 24k images/s): a
 * rank blocked in recv lets its vCPU halt, and waking it again costs the
 * host a reschedule on every message; a spinning rank also kept its
 * compute faster. The price: while something else wants the same cores
 * (another job, a build), a spinning rank holds the core its peer needs
 * until the scheduler preempts it; an earlier measurement under such
 * load had 1 MiB all-reduces 20x slower. Hence polling is only allowed:
 * acc_gloo_poll.h stops it for a while after each preempted collective. */
int acc__gloo_busy_poll(const acc_t *acc) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int set = nbf_param_NBFORK_GLOO_BUSY_POLL(); /* -1: unset */
  return set >= 0 ? set : cpus > 0 && acc->local_world <= cpus;
}

/* The epoch acc_rebuild_process_groups asked for last (0: none). */
static _Atomic unsigned g_rebuild_epoch;

void acc_rebuild_process_groups(unsigned epoch) {
  g_rebuild_epoch = epoch;
}

unsigned acc__rebuild_epoch(void) {
  return g_rebuild_epoch;
}

/* A new Gloo mesh under "<key_prefix>rebuild-<epoch>/": the old one is
 * abandoned, not destroyed (a collective cut by siglongjmp may hold its
 * locks, and its worker thread may never finish its job); then one
 * all-reduce (MAX) of the sequence numbers, so that every rank numbers
 * the next collective alike (one had finished the cut call, another not). */
static acc_result_t rebuild(acc_t *acc, unsigned epoch) {
  char *cut = strstr(acc->key_prefix, "rebuild-"); /* "<run>/<gen>/" stays */
  if (cut)
    *cut = 0;
  size_t at = strlen(acc->key_prefix);
  snprintf(acc->key_prefix + at, sizeof acc->key_prefix - at, "rebuild-%u/", epoch);
  char prefix[256], err[1024];
  snprintf(prefix, sizeof prefix, "%sgloo/", acc->key_prefix);
  acc_nccl_destroy(acc); /* ncclCommAbort; made again at the next device collective */
  acc_gloo_t *g = NULL;
  int64_t seq = (int64_t)acc->coll_seq;
  acc_result_t r = ACC_OK;
  /* by node (issue 24): the old node group is abandoned as the old mesh
   * is (its leaders' Gloo group may be cut inside a call), and the ranks
   * join anew by node; else (shared memory off or unusable) a new mesh */
  acc->node = NULL;
  int by_node = acc__node_connect(acc, acc->gloo_host);
  if (by_node > 0)
    r = acc__node_all_reduce(acc, &seq, 1, ACC_I64, ACC_MAX, err, sizeof err);
  else if (by_node < 0) {
    r = ACC_ERR_STORE;
    snprintf(err, sizeof err, "%s", acc->err);
  } else
    r = acc_gloo_connect(&g, acc->rank, acc->world, acc->gloo_host, acc->store, prefix,
                         acc->timeout_ms, acc__gloo_busy_poll(acc), err, sizeof err);
  if (r == ACC_OK && by_node == 0)
    r = acc_gloo_all_reduce_algo(g, &seq, 1, ACC_I64, ACC_MAX, ACC_GLOO_AUTO, err, sizeof err);
  acc->rebuilt_epoch = epoch; /* tried once: a failure is not retried at every call */
  if (r != ACC_OK) {
    acc_gloo_destroy(&g);
    acc->broken = 1;
    return acc__set_error(acc, r, "rebuilding the process group (epoch %u, keys %s): %s", epoch,
                          prefix, err);
  }
  if (g || by_node > 0)
    acc->gloo = g; /* the old one leaks on purpose (above) */
  acc->coll_seq = (uint64_t)seq;
  acc->broken = 0;
  nbf_rankstate_phase(acc->rankstate, NBF_RS_RUNNING);
  return ACC_OK;
}

acc_result_t acc__rebuild_if_due(acc_t *acc) {
  unsigned epoch = g_rebuild_epoch;
  if (!acc || acc->world < 2 || !acc->store || epoch == acc->rebuilt_epoch)
    return ACC_OK;
  return rebuild(acc, epoch);
}
