/*
 * ln_report — what the ranks' state records (nbf_rankstate.h) say, for
 * the failure, interrupt and SIGQUIT reports of ln_group: the class of
 * each failed rank (the order of causes), ranks that left early, and
 * every rank's position with the odd one named.
 */
#ifndef LN_REPORT_H
#define LN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "ln_worker.h"

/* The order of causes in a failure report, first first; within a class,
 * by global rank. */
typedef enum {
  LN_CAUSE_STOPPED = 0, /* found stopped (SIGSTOP...): its peers timed out on it   */
  LN_CAUSE_SIGNAL,      /* killed by a signal the launcher did not send (a crash)  */
  LN_CAUSE_OWN,         /* exited non-zero, not because a peer was lost            */
  LN_CAUSE_LEFT,        /* exited 0 while its peers were in a collective it left   */
  LN_CAUSE_PEER,        /* its collective failed: a peer was lost or timed out     */
  LN_CAUSE_NONE         /* no cause: finished, or ended by the group's stop        */
} ln_cause_t;

/* Classify worker w (rec: its final record, or NULL when it has none)
 * among n workers whose final records are recs[] (NULL entries: none);
 * stop_ms: when the group was stopped (an error recorded before it is a
 * failure whatever the exit status). */
ln_cause_t ln_report_cause(const ln_worker_t *w, const nbf_rankstate_t *rec,
                           const nbf_rankstate_t *const *recs, int n, int64_t stop_ms);

/* One line about a failed rank's record: the collective that failed,
 * for how long it had waited, the peer it lost, the error's text. */
void ln_report_record_line(const nbf_rankstate_t *rec, FILE *f);

/* Every rank's position from w[i].seen (read at now_ms), one line each
 * ("rank 1: in all_reduce #58 (f32 x 4096) for 30.2 s"), then the odd
 * one ("rank 2 left early: ..."), under the heading `title`. Writes
 * nothing when no record went past "starting" (a program without
 * libnbfork). base: the global rank of local rank 0. */
void ln_report_positions(const ln_worker_t *w, int n, int base, int64_t now_ms, const char *title,
                         FILE *f);

/* A rank leaving its group (in acc_destroy's final barrier, #k) while a
 * peer waits in another collective at #k or later: they wait for each
 * other until NBFORK_TIMEOUT_S, so the group can only hang. Reads
 * w[i].seen (the records last read). Returns the local index of the
 * leaving rank and *waiter that of the peer, or -1 when there is none,
 * or when every such peer handles failed collectives itself
 * (NBF_RS_ERRORS_RETURN: it may go on without the rank, as it chose). */
int ln_report_leaving(const ln_worker_t *w, int n, int *waiter);

#endif
