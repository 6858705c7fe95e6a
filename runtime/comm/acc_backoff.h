/*
 * acc_backoff.h — when a waiting rank may spin (or busy-poll) and when it
 * sleeps at once; internal, C and C++ (acc_shm.c's waits, acc_gloo_poll's
 * polling of Gloo's synchronous mesh).
 *
 * As an adaptive mutex chooses between spinning and sleeping: a rank
 * spins while its spins run without being preempted; once one is (an
 * involuntary context switch of the calling thread,
 * getrusage(RUSAGE_THREAD).ru_nivcsw: someone else wanted this core, a
 * busy machine's other work or the peer), the next `backoff` waits sleep
 * at once, then one spins again to look. The backoff doubles at every
 * preempted spin (up to ACC_BACKOFF_MAX) and halves back at every quiet
 * one (down to ACC_BACKOFF_MIN), so a busy machine is probed rarely and a
 * quiet one spins almost always.
 */
#ifndef ACC_BACKOFF_H
#define ACC_BACKOFF_H

#include <sys/resource.h>

#define ACC_BACKOFF_MIN 16   /* waits that sleep at once after a preempted spin */
#define ACC_BACKOFF_MAX 4096 /* its ceiling (doubling per preempted spin) */

typedef struct {
  int sleep_left; /* waits left that sleep at once */
  int backoff;    /* sleep_left after the next preempted spin */
} acc_backoff_t;

#define ACC_BACKOFF_INIT                                                                           \
  { 0, ACC_BACKOFF_MIN }

/* The calling thread's involuntary context switches so far: read when a
 * spin starts, given to acc_backoff_ended when it ends. */
static inline long acc_backoff_switches(void) {
  struct rusage ru;
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}

/* 1 when this wait may spin; 0 when it sleeps at once (one of the waits
 * left to sleep used). */
static inline int acc_backoff_may_spin(acc_backoff_t *b) {
  if (b->sleep_left > 0) {
    b->sleep_left--;
    return 0;
  }
  return 1;
}

/* A spin that started at `switches` (acc_backoff_switches) ended. */
static inline void acc_backoff_ended(acc_backoff_t *b, long switches) {
  if (acc_backoff_switches() > switches) {
    b->sleep_left = b->backoff;
    b->backoff = b->backoff * 2 > ACC_BACKOFF_MAX ? ACC_BACKOFF_MAX : b->backoff * 2;
  } else if (b->backoff > ACC_BACKOFF_MIN) {
    b->backoff /= 2;
  }
}

#endif /* ACC_BACKOFF_H */
