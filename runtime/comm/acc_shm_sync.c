/*
 * acc_shm_sync.c — the synchronisation of the shared-memory collectives
 * (acc_shm.h, acc_shm_internal.h): posting and waiting on the members'
 * sequence numbers (spin, then futex sleep, with acc_backoff.h's rule
 * after a switched-out spin), failure and abort, the double-buffered
 * steps, and each call's descriptor compared with the peers'.
 *
 * Synchronisation. Every member counts its posts (t); a post stores t in
 * its own header's `seq` (release) and wakes sleepers. Every member posts
 * the same number of times in every step, so "every member has posted t"
 * is a point all members pass in the same order. A step writes one slot
 * (slot = step % 2). Readers of a slot during step k read it before their
 * first post of step k+1; so before writing the slot again in step k+2 a
 * member waits until every member posted the first post of step k+1:
 * done[slot] = (last post of step k) + 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "acc_shm_internal.h"

/* ---- waiting ---- */

long acc__shm_futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  /* not FUTEX_PRIVATE_FLAG: the word is shared between processes */
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* A process that is gone or a zombie (its parent has not reaped it). */
static int dead(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 1;
  char path[48], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t k = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[k] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return p && (p[2] == 'Z' || p[2] == 'X');
}

acc_result_t acc__shm_fail(acc_shm_t *s, acc_result_t r, int j, char *err, size_t errlen,
                           const char *why) {
  s->lost = j;
  snprintf(err, errlen, "%s through shared memory: %s", s->what, why);
  return r;
}

/* Sleep on member j's flag until it reaches t, the deadline passes, j
 * dies, or someone aborts. */
static acc_result_t sleep_for(acc_shm_t *s, int j, uint32_t t, long deadline, char *err,
                              size_t errlen) {
  hdr_t *h = hdr(s, j), *own = hdr(s, s->me);
  char why[160];
  for (;;) {
    atomic_fetch_add(&h->sleepers, 1);
    uint32_t v = atomic_load(&h->seq);
    if (!reached(v, t) && !atomic_load(&own->abort)) {
      struct timespec ts = {0, WAKE_MS * 1000000L};
      acc__shm_futex(&h->seq, FUTEX_WAIT, v, &ts);
    }
    atomic_fetch_sub(&h->sleepers, 1);
    if (reached(atomic_load_explicit(&h->seq, memory_order_acquire), t))
      return ACC_OK;
    uint32_t who = atomic_load(&own->abort);
    if (who) {
      snprintf(why, sizeof why, "rank %d failed first (see its own error)", s->rank[(int)who - 1]);
      return acc__shm_fail(s, ACC_ERR_PEER, (int)who - 1, err, errlen, why);
    }
    if (dead(s->pid[j])) {
      snprintf(why, sizeof why,
               "the connection to rank %d was lost: rank %d (pid %d) exited or died while this "
               "rank still needed it; see rank %d's own error",
               s->rank[j], s->rank[j], (int)s->pid[j], s->rank[j]);
      return acc__shm_fail(s, ACC_ERR_PEER, j, err, errlen, why);
    }
    if (now_ns() > deadline) {
      snprintf(why, sizeof why, "timed out after %d s waiting for rank %d", s->timeout_ms / 1000,
               s->rank[j]);
      return acc__shm_fail(s, ACC_ERR_TIMEOUT, j, err, errlen, why);
    }
  }
}

/* A spin that yielded ended (switches >= 0: it read them when it began
 * to yield; a yield that let another task run counts as switched out:
 * someone else wanted this core): acc_backoff.h's rule. */
static void spin_ended(acc_shm_t *s, long switches) {
  if (switches >= 0)
    acc_backoff_ended(&s->backoff, switches);
}

/* Wait until member j posted t: spin for spin_ns (yielding the core
 * after the first 2 us: on a busy machine the peer may be waiting for
 * it), then sleep. The budget adapts as an adaptive mutex's does: a wait
 * that ended while spinning doubles it (back-to-back collectives: the
 * latency of a spin), one that had to sleep halves it (training steps,
 * whose ranks arrive milliseconds apart: no CPU burnt on spinning). A
 * spin that was switched out skips the spin of the next waits
 * (spin_ended). */
acc_result_t acc__shm_wait_one(acc_shm_t *s, int j, uint32_t t, long deadline, char *err,
                               size_t errlen) {
  hdr_t *h = hdr(s, j);
  if (reached(atomic_load_explicit(&h->seq, memory_order_acquire), t))
    return ACC_OK;
  if (!acc_backoff_may_spin(&s->backoff)) {
    s->waits_slept_at_once++;
    return sleep_for(s, j, t, deadline, err, errlen);
  }
  long start = now_ns(), until = start + s->spin_ns, yield_from = start + SPIN_MIN_NS;
  long switches = -1; /* read once the spin starts yielding */
  for (unsigned i = 1;; i++) {
    if (reached(atomic_load_explicit(&h->seq, memory_order_acquire), t)) {
      s->spin_ns = s->spin_ns * 2 > s->spin_max_ns ? s->spin_max_ns : s->spin_ns * 2;
      spin_ended(s, switches);
      return ACC_OK;
    }
    cpu_relax();
    if ((i & 63) == 0) {
      long now = now_ns();
      if (now > until)
        break;
      if (now > yield_from) { /* the peer may be waiting for this core */
        if (switches < 0)
          switches = acc_backoff_switches();
        sched_yield();
      }
    }
  }
  spin_ended(s, switches);
  s->spin_ns = s->spin_ns / 2 < SPIN_MIN_NS ? SPIN_MIN_NS : s->spin_ns / 2;
  return sleep_for(s, j, t, deadline, err, errlen);
}

acc_result_t acc__shm_wait_all(acc_shm_t *s, uint32_t t, long deadline, char *err, size_t errlen) {
  for (int j = 0; j < s->n; j++) {
    if (j == s->me)
      continue;
    acc_result_t r = acc__shm_wait_one(s, j, t, deadline, err, errlen);
    if (r != ACC_OK)
      return r;
  }
  return ACC_OK;
}

void acc__shm_post(acc_shm_t *s) {
  hdr_t *h = hdr(s, s->me);
  atomic_store(&h->seq, ++s->t); /* seq_cst: ordered before the load below */
  if (atomic_load(&h->sleepers))
    acc__shm_futex(&h->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void acc_shm_abort(acc_shm_t *s) {
  if (!s || !s->seg)
    return;
  for (int j = 0; j < s->n; j++)
    if (s->seg[j])
      atomic_store(&hdr(s, j)->abort, (uint32_t)s->me + 1);
  for (int j = 0; j < s->n; j++)
    if (s->seg[j])
      acc__shm_futex(&hdr(s, j)->seq, FUTEX_WAKE, INT_MAX, NULL);
}

long acc_shm_waits_slept_at_once(const acc_shm_t *s) {
  return s ? s->waits_slept_at_once : 0;
}

int acc_shm_lost_member(const acc_shm_t *s) {
  return s ? s->lost : -1;
}

/* ---- steps ---- */

/* Start a step that writes this member's next slot: returns the slot once
 * every member is done reading what it held two steps ago. */
acc_result_t acc__shm_step_begin(acc_shm_t *s, const call_t *c, unsigned *b) {
  *b = s->step & 1;
  return acc__shm_wait_all(s, s->done[*b], c->deadline, c->err, c->errlen);
}

void acc__shm_step_end(acc_shm_t *s, unsigned b) {
  s->done[b] = s->t + 1;
  s->step++;
}

call_t acc__shm_call_start(acc_shm_t *s, const char *what, char *err, size_t errlen, uint32_t kind,
                           uint32_t code, int root, size_t bytes) {
  s->what = what;
  call_t c = {now_ns() + (long)s->timeout_ms * 1000000L,
              err,
              errlen,
              {++s->ncall, kind, code, root, bytes},
              0};
  hdr(s, s->me)->desc[c.d.call % DESC_RING] = c.d; /* published by the first post */
  return c;
}

static void desc_text(const desc_t *d, char *out, size_t n) {
  static const char *const kinds[] = {
      "?",          "all-reduce", "reduce-scatter",       "broadcast",
      "all-gather", "barrier",    "acc_destroy's barrier"};
  const char *k = d->kind <= SHM_LEAVE ? kinds[d->kind] : "?";
  if (d->kind == SHM_BARRIER || d->kind == SHM_LEAVE)
    snprintf(out, n, "%s", k);
  else if (d->kind == SHM_BROADCAST)
    snprintf(out, n, "%s of %llu bytes from %lld", k, (unsigned long long)d->bytes,
             (long long)d->root);
  else
    snprintf(out, n, "%s of %llu bytes (dtype %u, op %u)", k, (unsigned long long)d->bytes,
             d->code >> 8, d->code & 255);
}

/* After the call's first wait: member j (or every peer, j < 0) called
 * the same. */
acc_result_t acc__shm_verify(acc_shm_t *s, call_t *c, int j) {
  if (c->verified)
    return ACC_OK;
  c->verified = 1;
  for (int k = j < 0 ? 0 : j; k < (j < 0 ? s->n : j + 1); k++) {
    const desc_t *p = &hdr(s, k)->desc[c->d.call % DESC_RING];
    if (k == s->me || memcmp(p, &c->d, sizeof *p) == 0)
      continue;
    char mine[96], theirs[96], why[256];
    desc_text(&c->d, mine, sizeof mine);
    desc_text(p, theirs, sizeof theirs);
    if (p->call == c->d.call && p->kind == SHM_LEAVE) { /* as a closed connection */
      snprintf(why, sizeof why,
               "the connection to rank %d was lost: it left the group (acc_destroy) while "
               "this rank called %s",
               s->rank[k], mine);
      return acc__shm_fail(s, ACC_ERR_PEER, k, c->err, c->errlen, why);
    }
    snprintf(why, sizeof why, "this rank called %s, rank %d %s", mine, s->rank[k],
             p->call == c->d.call ? theirs : "is in another call");
    return acc__shm_fail(s, ACC_ERR_MISMATCH, k, c->err, c->errlen, why);
  }
  return ACC_OK;
}

/* wait_all, then (first time in the call) compare the calls. */
acc_result_t acc__shm_sync_all(acc_shm_t *s, call_t *c) {
  acc_result_t r = acc__shm_wait_all(s, s->t, c->deadline, c->err, c->errlen);
  return r != ACC_OK ? r : acc__shm_verify(s, c, -1);
}

/* An aborted group fails every later call at once. */
acc_result_t acc__shm_check_abort(acc_shm_t *s, const call_t *c) {
  uint32_t who = atomic_load(&hdr(s, s->me)->abort);
  if (!who)
    return ACC_OK;
  return acc__shm_fail(s, ACC_ERR_PEER, (int)who - 1, c->err, c->errlen,
                       "the group was aborted after a failure");
}
