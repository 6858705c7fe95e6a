/*
 * acc_shm_internal.h — what the three parts of the shared-memory
 * collectives share (acc_shm.h): the workspace's layout (header page,
 * slots), the group's state, and the synchronisation layer
 * (acc_shm_sync.c) that the collectives (acc_shm_ops.c) are built on.
 * acc_shm.c creates, maps and frees the workspaces. Internal to
 * runtime/comm.
 */
#ifndef ACC_SHM_INTERNAL_H
#define ACC_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "acc_backoff.h"
#include "acc_shm.h"

#define SHM_MAGIC 0x6e62666f726b7368ULL /* "nbforksh" */
#define HDR_BYTES ((size_t)4096)
#define SEG_BYTES (HDR_BYTES + 2 * ACC_SHM_SLOT)
#define WAKE_MS 50 /* a sleeper's check of the deadline and the peer */
#define SPIN_MIN_NS 2000L
#define FUSE ((size_t)16 << 10) /* bytes reduced then copied out at a time */

/* What a member called (written before its first post of the call, read
 * by the peers after it): a difference is an error (MISMATCH) instead of
 * a hang or a silently wrong result. A member is at most two calls ahead
 * of another (a broadcast's root), so a ring of 8 keeps each in place. */
#define DESC_RING 8
typedef struct {
  uint64_t call;  /* the member's shared-memory calls so far, this one included */
  uint32_t kind;  /* SHM_* below */
  uint32_t code;  /* dtype << 8 | op of reductions, else 0 */
  int64_t root;   /* broadcast's root, else -1 */
  uint64_t bytes; /* of one member's contribution */
} desc_t;
enum {
  SHM_ALL_REDUCE = 1,
  SHM_REDUCE_SCATTER,
  SHM_BROADCAST,
  SHM_ALL_GATHER,
  SHM_BARRIER,
  SHM_LEAVE
};

/* The header page of a workspace; each flag on its own cache line, so a
 * member writing its flag does not invalidate the line its peers spin on
 * for another. */
typedef struct {
  uint64_t magic, nonce;
  int32_t pid, pad;
  char pad0[64 - 24];
  _Atomic uint32_t seq; /* the member's posts so far (the futex word) */
  char pad1[60];
  _Atomic uint32_t sleepers; /* members sleeping on seq */
  char pad2[60];
  _Atomic uint32_t abort; /* set by a member that failed */
  char pad3[60];
  desc_t desc[DESC_RING]; /* the member's last calls, by call number */
} hdr_t;

struct acc_shm {
  int fd;
  unsigned char *mine; /* own workspace */
  int n, me;
  unsigned char **seg; /* every member's workspace (seg[me] == mine) */
  pid_t *pid;
  int *rank;        /* each member's rank in the whole group, for messages */
  uint32_t t;       /* own posts */
  uint32_t done[2]; /* a slot may be written once every member posted this */
  unsigned step;
  int timeout_ms;
  long spin_ns;             /* how long a wait spins before it sleeps (adaptive) */
  long spin_max_ns;         /* its ceiling */
  acc_backoff_t backoff;    /* waits that sleep at once after a preempted spin */
  long waits_slept_at_once; /* waits that skipped the spin (tests) */
  int lost;
  const char *what;                  /* the collective running, for error texts */
  uint64_t ncall;                    /* calls so far */
};

static inline hdr_t *hdr(const acc_shm_t *s, int j) {
  return (hdr_t *)s->seg[j];
}
static inline unsigned char *slot(const acc_shm_t *s, int j, unsigned b) {
  return s->seg[j] + HDR_BYTES + (size_t)b * ACC_SHM_SLOT;
}

static inline long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* seq reached t (modulo 2^32: the counter may wrap). */
static inline int reached(uint32_t seq, uint32_t t) {
  return (int32_t)(seq - t) >= 0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- the synchronisation layer (acc_shm_sync.c) ---- */

/* One collective call: its deadline, where its error text goes, its
 * descriptor (compared with the peers' at the first wait). */
typedef struct {
  long deadline;
  char *err;
  size_t errlen;
  desc_t d;     /* this call */
  int verified; /* the peers' descriptors were compared */
} call_t;

long acc__shm_futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts);
/* Record that member j (-1: unknown) was lost; the error text in err. */
acc_result_t acc__shm_fail(acc_shm_t *s, acc_result_t r, int j, char *err, size_t errlen,
                           const char *why);
/* Wait until member j (every peer: wait_all) posted t: spin, then sleep. */
acc_result_t acc__shm_wait_one(acc_shm_t *s, int j, uint32_t t, long deadline, char *err,
                               size_t errlen);
acc_result_t acc__shm_wait_all(acc_shm_t *s, uint32_t t, long deadline, char *err, size_t errlen);
/* Post: this member's next sequence number, waking its sleepers. */
void acc__shm_post(acc_shm_t *s);
/* A step writes this member's next slot (*b) once every member is done
 * reading what it held two steps ago; step_end records the step. */
acc_result_t acc__shm_step_begin(acc_shm_t *s, const call_t *c, unsigned *b);
void acc__shm_step_end(acc_shm_t *s, unsigned b);
/* Start a call: publishes its descriptor (with the next post). */
call_t acc__shm_call_start(acc_shm_t *s, const char *what, char *err, size_t errlen, uint32_t kind,
                           uint32_t code, int root, size_t bytes);
/* After the call's first wait: member j (every peer, j < 0) called the
 * same, else ACC_ERR_MISMATCH (or PEER when it left the group). */
acc_result_t acc__shm_verify(acc_shm_t *s, call_t *c, int j);
/* wait_all for this member's last post, then verify. */
acc_result_t acc__shm_sync_all(acc_shm_t *s, call_t *c);
/* An aborted group fails every later call at once. */
acc_result_t acc__shm_check_abort(acc_shm_t *s, const call_t *c);

#endif
