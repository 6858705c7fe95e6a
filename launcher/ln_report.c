/*
 * ln_report.c — reading the ranks' state records for the launcher's
 * reports (see ln_report.h). Everything here comes from the records and
 * the exit statuses; no worker output is parsed.
 */
#define _GNU_SOURCE
#include "ln_report.h"

#include <string.h>
#include <sys/wait.h>

#include "nbfork.h"

static int lost_a_peer(const nbf_rankstate_t *r) {
  return r && r->err_call.seq && (r->err_code == ACC_ERR_PEER || r->err_code == ACC_ERR_TIMEOUT);
}

/* The record holds a failed collective (any cause). */
static int failed_call(const nbf_rankstate_t *r) {
  return r && r->err_call.seq && r->err_code;
}

/* The highest collective any rank was in (or failed in). */
static uint64_t max_seq(const nbf_rankstate_t *const *recs, int n) {
  uint64_t m = 0;
  for (int i = 0; i < n; i++) {
    const nbf_rankstate_t *r = recs[i];
    if (!r)
      continue;
    if (r->phase == NBF_RS_COLLECTIVE && r->call.seq > m)
      m = r->call.seq;
    if (failed_call(r) && r->err_call.seq > m)
      m = r->err_call.seq;
  }
  return m;
}

/* Exited 0, with no error of its own, while a peer was in (or failed in)
 * a collective this rank never completed. */
static int left_early(const ln_worker_t *w, const nbf_rankstate_t *rec,
                      const nbf_rankstate_t *const *recs, int n) {
  int exited_0 = w->exited && WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0;
  if (!rec || !(exited_0 || (rec->flags & NBF_RS_LEAVING)) || rec->err_code ||
      rec->phase < NBF_RS_RUNNING)
    return 0;
  /* a rank in acc_destroy's barrier while a peer is in another call of
   * the same number is leaving early too: they wait for each other */
  return max_seq(recs, n) > rec->done_seq;
}

ln_cause_t ln_report_cause(const ln_worker_t *w, const nbf_rankstate_t *rec,
                           const nbf_rankstate_t *const *recs, int n, int64_t stop_ms) {
  if (w->stopped_by)
    return LN_CAUSE_STOPPED;
  /* an error recorded before the group was stopped is the rank's own
   * end, even when the stop's SIGTERM reached it while it was exiting */
  if (rec && rec->err_code && rec->err_ms <= stop_ms)
    return lost_a_peer(rec) ? LN_CAUSE_PEER : LN_CAUSE_OWN;
  if (w->failed && WIFSIGNALED(w->status))
    return LN_CAUSE_SIGNAL;
  if (w->failed)
    return lost_a_peer(rec) ? LN_CAUSE_PEER : LN_CAUSE_OWN;
  return left_early(w, rec, recs, n) ? LN_CAUSE_LEFT : LN_CAUSE_NONE;
}

/* The record's message without its "rank R: " prefix (the report's
 * line already names the rank). */
static const char *bare_msg(const nbf_rankstate_t *r) {
  const char *m = r->err_msg;
  if (!strncmp(m, "rank ", 5)) {
    const char *c = strstr(m, ": ");
    if (c && c - m < 16)
      return c + 2;
  }
  return m;
}

void ln_report_record_line(const nbf_rankstate_t *rec, FILE *f) {
  if (!rec || !rec->err_code)
    return;
  if (!rec->err_call.seq) {
    fprintf(f, "  its error: %s\n", bare_msg(rec));
    return;
  }
  char call[160], peer[64] = "";
  nbf_rs_call_text(&rec->err_call, call, sizeof call);
  if (rec->err_peer >= 0)
    snprintf(peer, sizeof peer, rec->err_code == ACC_ERR_PEER ? ", lost rank %d" : ", on rank %d",
             (int)rec->err_peer);
  fprintf(f, "  its %s failed after %.1f s (%s%s): %s\n", call,
          (double)(rec->err_ms - rec->err_call.start_ms) / 1000.0,
          acc_strerror((acc_result_t)rec->err_code), peer, bare_msg(rec));
}

/* "exited 0" / "killed by signal 9 (SIGKILL)" for a reaped worker. */
static void end_text(const ln_worker_t *w, char *out, size_t n) {
  if (WIFSIGNALED(w->status)) {
    const char *a = sigabbrev_np(WTERMSIG(w->status));
    snprintf(out, n, "killed by signal %d (SIG%s)", WTERMSIG(w->status), a ? a : "?");
  } else {
    snprintf(out, n, "exited %d", WEXITSTATUS(w->status));
  }
}

/* The last collective the rank completed, as text ("all_reduce #57"). */
static void done_text(const nbf_rankstate_t *r, char *out, size_t n) {
  if (!r->done_seq)
    snprintf(out, n, "no collective");
  else
    snprintf(out, n, "%s #%llu", nbf_rs_op_name(r->done_op), (unsigned long long)r->done_seq);
}

static void position_line(const ln_worker_t *w, int rank, int64_t now, FILE *f) {
  const nbf_rankstate_t *r = &w->seen;
  char call[160], done[96], end[64];
  nbf_rs_call_text(&r->call, call, sizeof call);
  done_text(r, done, sizeof done);
  double for_s = (double)(now - r->phase_ms) / 1000.0;
  fprintf(f, "  rank %d: ", rank);
  if (w->stopped_by) {
    const char *a = sigabbrev_np(w->stopped_by);
    fprintf(f, "stopped by signal %d (SIG%s) %s %s; ", w->stopped_by, a ? a : "?",
            r->phase == NBF_RS_COLLECTIVE ? "in" : "after", r->phase == NBF_RS_COLLECTIVE ? call : done);
  }
  if (r->phase == NBF_RS_COLLECTIVE && (r->flags & NBF_RS_LEAVING)) {
    fprintf(f, "in acc_destroy's %s for %.1f s (leaving the group)", call,
            (double)(now - r->call.start_ms) / 1000.0);
  } else if (r->err_code && r->err_call.seq) {
    char ecall[160];
    nbf_rs_call_text(&r->err_call, ecall, sizeof ecall);
    fprintf(f, "%s failed after %.1f s (%s)", ecall,
            (double)(r->err_ms - r->err_call.start_ms) / 1000.0,
            acc_strerror((acc_result_t)r->err_code));
  } else if (r->phase == NBF_RS_COLLECTIVE) {
    fprintf(f, "in %s for %.1f s", call, (double)(now - r->call.start_ms) / 1000.0);
  } else if (r->phase == NBF_RS_RUNNING) {
    fprintf(f, "running its own code for %.1f s, after %s", for_s, done);
  } else if (r->phase == NBF_RS_EXITED) {
    fprintf(f, "left the process group after %s", done);
    if (r->call.seq > r->done_seq) /* acc_destroy's barrier, which its peers never joined */
      fprintf(f, " (its %s did not complete)", call);
  } else {
    fprintf(f, "%s for %.1f s", r->phase == NBF_RS_STARTING ? "starting (before acc_new)"
                                                           : "in the rendezvous (acc_new)",
            for_s);
  }
  if (w->exited && w->exited_ms <= now) { /* ended before the records were read */
    end_text(w, end, sizeof end);
    fprintf(f, "; %s", end);
  }
  fputc('\n', f);
}

/* Two calls are the same collective with the same shape. */
static int same_call(const nbf_rs_call_t *a, const nbf_rs_call_t *b) {
  return a->op == b->op && a->dtype == b->dtype && a->count == b->count && a->root == b->root &&
         a->reduce == b->reduce;
}

/* The call a rank was in at collective `seq`, or NULL. */
static const nbf_rs_call_t *call_at(const nbf_rankstate_t *r, uint64_t seq) {
  if (r->phase == NBF_RS_COLLECTIVE && r->call.seq == seq)
    return &r->call;
  if (failed_call(r) && r->err_call.seq == seq)
    return &r->err_call;
  return NULL;
}

/* A rank whose call at `seq` differs from most others', or -1. */
static int odd_call(const ln_worker_t *w, int n, uint64_t seq, int *like) {
  for (int i = 0; i < n; i++) {
    const nbf_rs_call_t *ci = call_at(&w[i].seen, seq);
    if (!ci)
      continue;
    int same = 0, other = -1;
    for (int j = 0; j < n; j++) {
      const nbf_rs_call_t *cj = call_at(&w[j].seen, seq);
      if (cj && j != i && same_call(ci, cj))
        same++;
      else if (cj && j != i && other < 0)
        other = j;
    }
    if (other >= 0 && same == 0) {
      *like = other;
      return i;
    }
  }
  return -1;
}

/* The odd one: who left early, who never reached the collective the
 * others wait in, who called something else, who is behind. */
static void verdict(const ln_worker_t *w, int n, int base, int64_t now, FILE *f) {
  const nbf_rankstate_t *recs[n];
  for (int i = 0; i < n; i++)
    recs[i] = w[i].seen_ok ? &w[i].seen : NULL;
  uint64_t m = max_seq(recs, n);
  if (!m)
    return;
  int waiter = -1;
  for (int i = 0; i < n && waiter < 0; i++)
    if (recs[i] && call_at(recs[i], m))
      waiter = i;
  if (waiter < 0)
    return;
  char want[160], done[96];
  nbf_rs_call_text(call_at(recs[waiter], m), want, sizeof want);
  for (int i = 0; i < n; i++) {
    const nbf_rankstate_t *r = recs[i];
    if (!r || !(r->flags & NBF_RS_LEAVING) || r->err_code || r->done_seq >= m)
      continue;
    done_text(r, done, sizeof done);
    for (int j = 0; j < n; j++)
      if (j != i && recs[j] && call_at(recs[j], m) && recs[j]->call.op != NBF_RS_BARRIER) {
        nbf_rs_call_text(call_at(recs[j], m), want, sizeof want);
        fprintf(f,
                "  -> rank %d left early: it is leaving the group (acc_destroy's barrier) after "
                "%s while rank %d waits in %s\n",
                base + i, done, base + j, want);
        return;
      }
  }
  for (int i = 0; i < n; i++) {
    const nbf_rankstate_t *r = recs[i];
    if (!r || r->done_seq >= m || r->err_code || call_at(r, m) || r->phase == NBF_RS_COLLECTIVE)
      continue;
    done_text(r, done, sizeof done);
    if (left_early(&w[i], r, recs, n) || r->phase == NBF_RS_EXITED)
      fprintf(f, "  -> rank %d left early: it left after %s while rank %d waited in %s\n", base + i,
              done, base + waiter, want);
    else
      fprintf(f,
              "  -> rank %d did not reach %s: it %s for %.1f s after %s (busy or hung outside "
              "collectives)\n",
              base + i, want, w[i].stopped_by ? "was stopped" : "ran its own code",
              (double)(now - r->phase_ms) / 1000.0, done);
    return;
  }
  int like = -1, odd = odd_call(w, n, m, &like);
  if (odd >= 0) {
    char a[160], b[160];
    nbf_rs_call_text(call_at(recs[odd], m), a, sizeof a);
    nbf_rs_call_text(call_at(recs[like], m), b, sizeof b);
    fprintf(f, "  -> rank %d called %s where rank %d called %s\n", base + odd, a, base + like, b);
    return;
  }
  for (int i = 0; i < n; i++)
    if (recs[i] && recs[i]->phase == NBF_RS_COLLECTIVE && recs[i]->call.seq < m) {
      char a[160];
      nbf_rs_call_text(&recs[i]->call, a, sizeof a);
      fprintf(f, "  -> rank %d is behind: in %s while rank %d is in %s\n", base + i, a,
              base + waiter, want);
      return;
    }
}

/* Peer j waits in a collective that rank i's final barrier #k can never
 * complete: another call at #k, or any call after it. */
static int waits_past(const nbf_rankstate_t *j, const nbf_rs_call_t *k) {
  if (j->phase != NBF_RS_COLLECTIVE || (j->flags & (NBF_RS_LEAVING | NBF_RS_ERRORS_RETURN)))
    return 0;
  return j->call.seq > k->seq || (j->call.seq == k->seq && j->call.op != k->op);
}

int ln_report_leaving(const ln_worker_t *w, int n, int *waiter) {
  for (int i = 0; i < n; i++) {
    const nbf_rankstate_t *r = &w[i].seen;
    if (!w[i].seen_ok || !(r->flags & NBF_RS_LEAVING) || r->phase != NBF_RS_COLLECTIVE ||
        r->call.op != NBF_RS_BARRIER || r->err_code)
      continue;
    for (int j = 0; j < n; j++)
      if (j != i && w[j].seen_ok && waits_past(&w[j].seen, &r->call)) {
        *waiter = j;
        return i;
      }
  }
  return -1;
}

void ln_report_positions(const ln_worker_t *w, int n, int base, int64_t now_ms, const char *title,
                         FILE *f) {
  int any = 0;
  for (int i = 0; i < n; i++)
    any |= w[i].seen_ok && w[i].seen.phase != NBF_RS_STARTING;
  if (!any)
    return;
  fprintf(f, "%s\n", title);
  for (int i = 0; i < n; i++)
    if (w[i].seen_ok)
      position_line(&w[i], base + i, now_ms, f);
  verdict(w, n, base, now_ms, f);
}
