/*
 * acc_shard_prefetch.c — stage 3's prefetch of the next unit (FSDP's
 * forward_prefetch and backward_prefetch=BACKWARD_PRE): one helper
 * thread per acc_shard_t that all-gathers a unit into the unit buffer
 * the caller's thread does not use while it computes the current unit.
 * The caller hands over one unit at a time and waits for it before its
 * next collective (acc_shard_run.c's hooks), so a rank's
 * collectives never overlap and keep the same order on every rank, as
 * one stream of collectives needs (Gloo's pairs and the shared-memory
 * slots both do). The gathered values are those of the synchronous
 * gather: the results are bitwise unchanged (test_shard.c prefetch).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "acc_shard_internal.h"

struct acc__shard_prefetch {
  acc_shard_t *sh;
  float *dst; /* the job's unit buffer */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int job;        /* unit to gather, -1 none */
  int busy;       /* a job was handed over and is not waited for yet */
  int ready;      /* unit gathered by the last job, -1 none */
  int quit;       /* the thread must end */
  acc_result_t r; /* the last job's result */
};

static void *helper(void *arg) {
  acc__shard_prefetch_t *pf = arg;
  /* signals (a cell's interrupt) go to the caller's thread, never here */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&pf->mu);
  for (;;) {
    while (pf->job < 0 && !pf->quit)
      pthread_cond_wait(&pf->cv, &pf->mu);
    if (pf->quit)
      break;
    int u = pf->job;
    pthread_mutex_unlock(&pf->mu);
    acc_result_t r = acc__shard_gather_into(pf->sh, &pf->sh->units[u], pf->dst);
    pthread_mutex_lock(&pf->mu);
    pf->r = r;
    pf->ready = r == ACC_OK ? u : -1;
    pf->job = -1;
    pthread_cond_broadcast(&pf->cv);
  }
  pthread_mutex_unlock(&pf->mu);
  return NULL;
}

acc__shard_prefetch_t *acc__shard_pf_new(acc_shard_t *sh) {
  acc__shard_prefetch_t *pf = calloc(1, sizeof *pf);
  if (!pf) {
    acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_new: no memory for the prefetch");
    return NULL;
  }
  pf->sh = sh;
  pf->job = pf->ready = -1;
  pthread_mutex_init(&pf->mu, NULL);
  pthread_cond_init(&pf->cv, NULL);
  if (pthread_create(&pf->thread, NULL, helper, pf) != 0) {
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    free(pf);
    acc__set_error(sh->acc, ACC_ERR_NO_MEMORY, "acc_shard_new: cannot start the prefetch thread");
    return NULL;
  }
  return pf;
}

void acc__shard_pf_destroy(acc__shard_prefetch_t **pf_p) {
  acc__shard_prefetch_t *pf = pf_p ? *pf_p : NULL;
  if (!pf)
    return;
  *pf_p = NULL;
  pthread_mutex_lock(&pf->mu);
  while (pf->job >= 0) /* a gather under way finishes: its peers wait for it */
    pthread_cond_wait(&pf->cv, &pf->mu);
  pf->quit = 1;
  pthread_cond_broadcast(&pf->cv);
  pthread_mutex_unlock(&pf->mu);
  pthread_join(pf->thread, NULL);
  pthread_mutex_destroy(&pf->mu);
  pthread_cond_destroy(&pf->cv);
  free(pf);
}

void acc__shard_pf_start(acc__shard_prefetch_t *pf, int u, float *dst) {
  pthread_mutex_lock(&pf->mu);
  pf->job = u;
  pf->dst = dst;
  pf->busy = 1;
  pf->ready = -1;
  pthread_cond_broadcast(&pf->cv);
  pthread_mutex_unlock(&pf->mu);
}

acc_result_t acc__shard_pf_wait(acc__shard_prefetch_t *pf, int *unit_out, int take) {
  if (unit_out)
    *unit_out = -1;
  if (!pf)
    return ACC_OK;
  pthread_mutex_lock(&pf->mu);
  while (pf->job >= 0)
    pthread_cond_wait(&pf->cv, &pf->mu);
  acc_result_t r = pf->busy ? pf->r : ACC_OK;
  pf->busy = 0; /* a failure is reported once */
  if (unit_out)
    *unit_out = pf->ready;
  if (take)
    pf->ready = -1;
  pthread_mutex_unlock(&pf->mu);
  return r;
}

int acc__shard_pf_job(acc__shard_prefetch_t *pf) {
  if (!pf)
    return -1;
  pthread_mutex_lock(&pf->mu);
  int u = pf->job;
  pthread_mutex_unlock(&pf->mu);
  return u;
}
