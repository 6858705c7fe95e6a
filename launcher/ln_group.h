/*
 * ln_group — one run of this node's worker group (see ln_launch.h).
 */
#ifndef LN_GROUP_H
#define LN_GROUP_H

#include "acc_store.h"
#include "ln_launch.h"
#include "ln_worker.h"

typedef enum {
  LN_RUN_OK,           /* every worker exited 0                          */
  LN_RUN_FAILED,       /* a worker failed; the others were stopped       */
  LN_RUN_INTERRUPTED,  /* ctx->interrupted was set; all were stopped     */
  LN_RUN_SETUP_FAILED  /* fork/pipe/store failed; *setup_error says why  */
} ln_run_result_t;

/* Fork o->num_processes workers running fn, host the store when
 * node_rank is 0, forward output until every worker is reaped.
 * On LN_RUN_FAILED, *failures describes each failed worker and where
 * every rank was (caller frees); on LN_RUN_INTERRUPTED, *failures is
 * where every rank was, or NULL; on LN_RUN_SETUP_FAILED, *setup_error. */
ln_run_result_t ln_run_group(const ln_options_t *o, int (*fn)(void), ln_context_t *ctx,
                             int restart, int use_gpu, char **failures, char **setup_error);

/* Call `send` (nbf_proc_term or nbf_proc_kill) for each of the n workers
 * not yet reaped: what the group's stop does; ln_ranks.c too. */
void ln_group_signal(ln_worker_t *w, int n, void (*send)(pid_t));

/* Start node 0's rendezvous store for the options (loopback only when
 * master_addr is): 0, or -1 with *setup_error (caller frees). */
int ln_group_host_store(const ln_options_t *o, acc_store_server_t **srv, char **setup_error);

#endif
