/*
 * acc_shm.c — shared-memory collectives between the processes of one node
 * (acc_shm.h). The scheme follows DeepSpeed's csrc/cpu/comm/shm.cpp
 * (per-rank workspace, double buffers, per-rank state flags, naive
 * all-reduce for small messages, reduce-scatter + all-gather for large
 * ones); the code is this project's.
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
#include "acc_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "acc_backoff.h"
#include "acc_reduce.h"
#include "nbf_util.h"

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
  /* Member 0's alone are used: the group's counters of a claimed
   * all-reduce (claimed_chunk): pieces handed out, pieces reduced (a
   * futex word), sleepers on it. */
  char pad4[64 - (DESC_RING * sizeof(desc_t)) % 64];
  _Atomic uint32_t claim;
  char pad5[60];
  _Atomic uint32_t reduced;
  char pad6[60];
  _Atomic uint32_t reduced_sleepers;
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
  uint32_t claim_base, reduced_base; /* the group's counters at this call's start */
  long pieces_reduced;               /* pieces of claimed all-reduces this member reduced (tests) */
};

static hdr_t *hdr(const acc_shm_t *s, int j) {
  return (hdr_t *)s->seg[j];
}
static unsigned char *slot(const acc_shm_t *s, int j, unsigned b) {
  return s->seg[j] + HDR_BYTES + (size_t)b * ACC_SHM_SLOT;
}

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* seq reached t (modulo 2^32: the counter may wrap). */
static int reached(uint32_t seq, uint32_t t) {
  return (int32_t)(seq - t) >= 0;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void acc_shm_node_id(char *out, size_t n) {
  char host[64] = "", boot[40] = "", ns[48] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f))
      boot[0] = 0;
    fclose(f);
    boot[strcspn(boot, "\n")] = 0;
  }
  /* /proc/PID of a peer names the same process only within one pid
   * namespace */
  ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[k > 0 ? k : 0] = 0;
  snprintf(out, n, "%s|%s|%s", host, boot, ns);
}

acc_shm_t *acc_shm_create(acc_shm_card_t *card, const char *node_extra, char *err, size_t errlen) {
  memset(card, 0, sizeof *card);
  card->fd = -1;
  card->pid = (int32_t)getpid();
  char id[256];
  acc_shm_node_id(id, sizeof id);
  size_t k = strlen(id);
  snprintf(id + k, sizeof id - k, "|%s", node_extra ? node_extra : "");
  uint64_t fnv = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)id; *p; p++)
    fnv = (fnv ^ *p) * 1099511628211ULL;
  card->node = fnv;
  acc_shm_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "no memory");
    return NULL;
  }
  s->fd = memfd_create("nbfork-shm", MFD_CLOEXEC);
  if (s->fd < 0 || ftruncate(s->fd, (off_t)SEG_BYTES) != 0) {
    snprintf(err, errlen, "memfd of %zu bytes: %s", SEG_BYTES, strerror(errno));
    goto fail;
  }
  s->mine = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (s->mine == MAP_FAILED) {
    s->mine = NULL;
    snprintf(err, errlen, "mmap of the workspace: %s", strerror(errno));
    goto fail;
  }
  hdr_t *h = (hdr_t *)s->mine;
  if (getrandom(&h->nonce, sizeof h->nonce, 0) != (ssize_t)sizeof h->nonce)
    h->nonce = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
  h->magic = SHM_MAGIC;
  h->pid = card->pid;
  card->fd = s->fd;
  card->nonce = h->nonce;
  card->ok = 1;
  s->lost = -1;
  return s;
fail:
  acc_shm_destroy(&s);
  return NULL;
}

/* Map member j's workspace through /proc/PID/fd/N and check it is the
 * one its card describes. */
static int map_peer(acc_shm_t *s, const acc_shm_card_t *c, int j, char *err, size_t errlen) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)c->pid, (int)c->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size != SEG_BYTES) {
    snprintf(err, errlen, "cannot open rank %d's workspace %s: %s", s->rank[j], path,
             fd < 0 ? strerror(errno) : "wrong size");
    if (fd >= 0)
      close(fd);
    return -1;
  }
  void *p = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "mmap of rank %d's workspace: %s", s->rank[j], strerror(errno));
    return -1;
  }
  s->seg[j] = p;
  const hdr_t *h = p;
  if (h->magic != SHM_MAGIC || h->nonce != c->nonce || h->pid != c->pid) {
    snprintf(err, errlen, "%s is not rank %d's workspace", path, s->rank[j]);
    return -1;
  }
  return 0;
}

int acc_shm_attach(acc_shm_t *s, const acc_shm_card_t *cards, const int *ranks, int n, int me,
                   int timeout_ms, char *err, size_t errlen) {
  s->n = n;
  s->me = me;
  s->timeout_ms = timeout_ms;
  s->seg = calloc((size_t)n, sizeof *s->seg);
  s->pid = calloc((size_t)n, sizeof *s->pid);
  s->rank = calloc((size_t)n, sizeof *s->rank);
  if (!s->seg || !s->pid || !s->rank) {
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (int j = 0; j < n; j++) {
    s->pid[j] = cards[j].pid;
    s->rank[j] = ranks[j];
    if (j == me)
      s->seg[j] = s->mine;
    else if (map_peer(s, &cards[j], j, err, errlen) != 0)
      return -1;
  }
  /* Spin about as long as a short collective takes, then sleep. Where the
   * members outnumber the CPUs a spinning member holds the core its peer
   * needs: spin far less. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->spin_max_ns = cpus > 0 && n > cpus ? SPIN_MIN_NS : 50000;
  s->spin_ns = s->spin_max_ns;
  s->backoff = (acc_backoff_t)ACC_BACKOFF_INIT;
  return 0;
}

void acc_shm_close_fds(acc_shm_t *s) {
  if (s && s->fd >= 0) {
    close(s->fd);
    s->fd = -1;
  }
}

void acc_shm_destroy(acc_shm_t **s_p) {
  acc_shm_t *s = NBF_TAKE(s_p);
  if (!s)
    return;
  if (s->seg)
    for (int j = 0; j < s->n; j++)
      if (j != s->me && s->seg[j])
        munmap(s->seg[j], SEG_BYTES);
  if (s->mine)
    munmap(s->mine, SEG_BYTES);
  if (s->fd >= 0)
    close(s->fd);
  free(s->seg);
  free(s->pid);
  free(s->rank);
  free(s);
}

/* ---- waiting ---- */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
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

static acc_result_t fail(acc_shm_t *s, acc_result_t r, int j, char *err, size_t errlen,
                         const char *why) {
  s->lost = j;
  snprintf(err, errlen, "%s through shared memory: %s", s->what, why);
  return r;
}

/* The first peer that is gone, or -1. */
static int dead_peer(const acc_shm_t *s) {
  for (int k = 0; k < s->n; k++)
    if (k != s->me && dead(s->pid[k]))
      return k;
  return -1;
}

/* Sleep on `word` (its sleepers counted in `sleepers`) until it reaches
 * t, the deadline passes, member j (every peer when j < 0: the group's
 * counters) dies, or someone aborts. */
static acc_result_t sleep_on(acc_shm_t *s, _Atomic uint32_t *word, _Atomic uint32_t *sleepers,
                             int j, uint32_t t, long deadline, char *err, size_t errlen) {
  hdr_t *own = hdr(s, s->me);
  char why[160];
  for (;;) {
    atomic_fetch_add(sleepers, 1);
    uint32_t v = atomic_load(word);
    if (!reached(v, t) && !atomic_load(&own->abort)) {
      struct timespec ts = {0, WAKE_MS * 1000000L};
      futex(word, FUTEX_WAIT, v, &ts);
    }
    atomic_fetch_sub(sleepers, 1);
    if (reached(atomic_load_explicit(word, memory_order_acquire), t))
      return ACC_OK;
    uint32_t who = atomic_load(&own->abort);
    if (who) {
      snprintf(why, sizeof why, "rank %d failed first (see its own error)", s->rank[(int)who - 1]);
      return fail(s, ACC_ERR_PEER, (int)who - 1, err, errlen, why);
    }
    int gone = j >= 0 ? (dead(s->pid[j]) ? j : -1) : dead_peer(s);
    if (gone >= 0) {
      snprintf(why, sizeof why,
               "the connection to rank %d was lost: rank %d (pid %d) exited or died while this "
               "rank still needed it; see rank %d's own error",
               s->rank[gone], s->rank[gone], (int)s->pid[gone], s->rank[gone]);
      return fail(s, ACC_ERR_PEER, gone, err, errlen, why);
    }
    if (now_ns() > deadline) {
      if (j >= 0)
        snprintf(why, sizeof why, "timed out after %d s waiting for rank %d", s->timeout_ms / 1000,
                 s->rank[j]);
      else
        snprintf(why, sizeof why, "timed out after %d s waiting for the other ranks",
                 s->timeout_ms / 1000);
      return fail(s, ACC_ERR_TIMEOUT, j, err, errlen, why);
    }
  }
}

/* Sleep on member j's flag until it reaches t (sleep_on). */
static acc_result_t sleep_for(acc_shm_t *s, int j, uint32_t t, long deadline, char *err,
                              size_t errlen) {
  hdr_t *h = hdr(s, j);
  return sleep_on(s, &h->seq, &h->sleepers, j, t, deadline, err, errlen);
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
static acc_result_t wait_one(acc_shm_t *s, int j, uint32_t t, long deadline, char *err,
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

static acc_result_t wait_all(acc_shm_t *s, uint32_t t, long deadline, char *err, size_t errlen) {
  for (int j = 0; j < s->n; j++) {
    if (j == s->me)
      continue;
    acc_result_t r = wait_one(s, j, t, deadline, err, errlen);
    if (r != ACC_OK)
      return r;
  }
  return ACC_OK;
}

static void post(acc_shm_t *s) {
  hdr_t *h = hdr(s, s->me);
  atomic_store(&h->seq, ++s->t); /* seq_cst: ordered before the load below */
  if (atomic_load(&h->sleepers))
    futex(&h->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void acc_shm_abort(acc_shm_t *s) {
  if (!s || !s->seg)
    return;
  for (int j = 0; j < s->n; j++)
    if (s->seg[j])
      atomic_store(&hdr(s, j)->abort, (uint32_t)s->me + 1);
  for (int j = 0; j < s->n; j++)
    if (s->seg[j])
      futex(&hdr(s, j)->seq, FUTEX_WAKE, INT_MAX, NULL);
}

long acc_shm_waits_slept_at_once(const acc_shm_t *s) {
  return s ? s->waits_slept_at_once : 0;
}

long acc_shm_pieces_reduced(const acc_shm_t *s) {
  return s ? s->pieces_reduced : 0;
}

int acc_shm_lost_member(const acc_shm_t *s) {
  return s ? s->lost : -1;
}

/* ---- steps ---- */

typedef struct {
  long deadline;
  char *err;
  size_t errlen;
  desc_t d;     /* this call */
  int verified; /* the peers' descriptors were compared */
} call_t;

/* Start a step that writes this member's next slot: returns the slot once
 * every member is done reading what it held two steps ago. */
static acc_result_t step_begin(acc_shm_t *s, const call_t *c, unsigned *b) {
  *b = s->step & 1;
  return wait_all(s, s->done[*b], c->deadline, c->err, c->errlen);
}

static void step_end(acc_shm_t *s, unsigned b) {
  s->done[b] = s->t + 1;
  s->step++;
}

static call_t call_start(acc_shm_t *s, const char *what, char *err, size_t errlen, uint32_t kind,
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
static acc_result_t verify(acc_shm_t *s, call_t *c, int j) {
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
      return fail(s, ACC_ERR_PEER, k, c->err, c->errlen, why);
    }
    snprintf(why, sizeof why, "this rank called %s, rank %d %s", mine, s->rank[k],
             p->call == c->d.call ? theirs : "is in another call");
    return fail(s, ACC_ERR_MISMATCH, k, c->err, c->errlen, why);
  }
  return ACC_OK;
}

/* wait_all, then (first time in the call) compare the calls. */
static acc_result_t sync_all(acc_shm_t *s, call_t *c) {
  acc_result_t r = wait_all(s, s->t, c->deadline, c->err, c->errlen);
  return r != ACC_OK ? r : verify(s, c, -1);
}

/* An aborted group fails every later call at once. */
static acc_result_t check_abort(acc_shm_t *s, const call_t *c) {
  uint32_t who = atomic_load(&hdr(s, s->me)->abort);
  if (!who)
    return ACC_OK;
  return fail(s, ACC_ERR_PEER, (int)who - 1, c->err, c->errlen,
              "the group was aborted after a failure");
}

/* ---- the collectives ---- */

/* Naive all-reduce of one chunk: every member copies its data into its
 * slot, then reduces all slots in member order (so every member computes
 * the same bits). */
static acc_result_t naive_chunk(acc_shm_t *s, call_t *c, void *buf, size_t m, acc_dtype_t dtype,
                                acc_op_t op) {
  unsigned b;
  acc_result_t r = step_begin(s, c, &b);
  if (r != ACC_OK)
    return r;
  size_t bytes = m * acc_dtype_size(dtype);
  memcpy(slot(s, s->me, b), buf, bytes);
  post(s);
  if ((r = sync_all(s, c)) != ACC_OK)
    return r;
  const void *in[s->n];
  for (int j = 0; j < s->n; j++)
    in[j] = slot(s, j, b);
  acc_reduce_many(buf, in, s->n, m, dtype, op, op == ACC_AVG ? s->n : 0);
  step_end(s, b);
  return ACC_OK;
}

/* Wait until the group's pieces reduced reach t: a short spin (what is
 * left is pieces in flight, microseconds each), then sleep. */
static acc_result_t wait_reduced(acc_shm_t *s, uint32_t t, long deadline, char *err,
                                 size_t errlen) {
  hdr_t *g = hdr(s, 0);
  for (int i = 0; i < 4096; i++) {
    if (reached(atomic_load_explicit(&g->reduced, memory_order_acquire), t))
      return ACC_OK;
    cpu_relax();
  }
  return sleep_on(s, &g->reduced, &g->reduced_sleepers, -1, t, deadline, err, errlen);
}

/* Claimed all-reduce of one chunk: every member copies its data into its
 * slot and posts; then every member that runs takes pieces (FUSE bytes)
 * from the group's counter until none is left, reduces each from all
 * slots in member order (the bits of naive_chunk) into buf and copies it
 * to member 0's slot (whose own piece was read by then, by this member
 * only), and once every piece is reduced copies the pieces others reduced
 * from there. A member that is switched out or asleep when its peers
 * arrive holds up nobody: the members that run reduce its share, and the
 * last to arrive never waits for a peer to wake (rsag_chunk's second
 * synchronisation would make it). Each member makes exactly one claim
 * past the end per chunk, so the counter's next base is known to all. */
static acc_result_t claimed_chunk(acc_shm_t *s, call_t *c, unsigned char *buf, size_t m,
                                  acc_dtype_t dtype, acc_op_t op) {
  unsigned b;
  acc_result_t r = step_begin(s, c, &b);
  if (r != ACC_OK)
    return r;
  const size_t esz = acc_dtype_size(dtype), bytes = m * esz;
  const size_t piece = FUSE / esz * esz, np = (bytes + piece - 1) / piece;
  memcpy(slot(s, s->me, b), buf, bytes);
  post(s);
  if ((r = sync_all(s, c)) != ACC_OK)
    return r;
  hdr_t *g = hdr(s, 0);
  unsigned char *out = slot(s, 0, b);
  uint64_t mine[(ACC_SHM_SLOT / FUSE + 63) / 64] = {0};
  const void *in[s->n];
  for (;;) {
    uint32_t k = atomic_fetch_add(&g->claim, 1) - s->claim_base;
    if (k >= np)
      break;
    size_t at = (size_t)k * piece, len = bytes - at < piece ? bytes - at : piece;
    for (int j = 0; j < s->n; j++)
      in[j] = slot(s, j, b) + at;
    acc_reduce_many(buf + at, in, s->n, len / esz, dtype, op, op == ACC_AVG ? s->n : 0);
    memcpy(out + at, buf + at, len);
    mine[k / 64] |= 1ULL << (k % 64);
    s->pieces_reduced++;
    if (atomic_fetch_add_explicit(&g->reduced, 1, memory_order_release) + 1 ==
            s->reduced_base + (uint32_t)np &&
        atomic_load(&g->reduced_sleepers))
      futex(&g->reduced, FUTEX_WAKE, INT_MAX, NULL);
  }
  s->claim_base += (uint32_t)(np + (size_t)s->n);
  s->reduced_base += (uint32_t)np;
  if ((r = wait_reduced(s, s->reduced_base, c->deadline, c->err, c->errlen)) != ACC_OK)
    return r;
  for (size_t k = 0; k < np; k++)
    if (!(mine[k / 64] >> (k % 64) & 1)) {
      size_t at = k * piece;
      memcpy(buf + at, out + at, bytes - at < piece ? bytes - at : piece);
    }
  step_end(s, b);
  return ACC_OK;
}

/* Start of member j's block of a chunk of m elements (j = n: the end);
 * blocks start on 16-element boundaries. */
static size_t block_at(size_t m, int j, int n) {
  return j >= n ? m : (m * (size_t)j / (size_t)n) & ~(size_t)15;
}

/* Reduce-scatter + all-gather of one chunk: each member copies the blocks
 * the others reduce into its slot, reduces its own block from the
 * others' slots and its own buffer into its slot, then copies the
 * others' reduced blocks out of their slots. */
static acc_result_t rsag_chunk(acc_shm_t *s, call_t *c, unsigned char *buf, size_t m,
                               acc_dtype_t dtype, acc_op_t op) {
  unsigned b;
  acc_result_t r = step_begin(s, c, &b);
  if (r != ACC_OK)
    return r;
  size_t esz = acc_dtype_size(dtype);
  size_t lo = block_at(m, s->me, s->n) * esz, hi = block_at(m, s->me + 1, s->n) * esz;
  unsigned char *own = slot(s, s->me, b);
  memcpy(own, buf, lo);
  memcpy(own + hi, buf + hi, m * esz - hi);
  post(s);
  if ((r = sync_all(s, c)) != ACC_OK)
    return r;
  /* the own block, FUSE bytes at a time: each piece is copied to buf
   * while it is still in L1 */
  const void *in[s->n];
  for (size_t at = lo; at < hi; at += FUSE) {
    size_t k = hi - at < FUSE ? hi - at : FUSE;
    for (int j = 0; j < s->n; j++)
      in[j] = j == s->me ? (const void *)(buf + at) : (const void *)(slot(s, j, b) + at);
    acc_reduce_many(own + at, in, s->n, k / esz, dtype, op, op == ACC_AVG ? s->n : 0);
    memcpy(buf + at, own + at, k);
  }
  post(s);
  if ((r = sync_all(s, c)) != ACC_OK)
    return r;
  for (int j = 0; j < s->n; j++) {
    if (j == s->me)
      continue;
    size_t a = block_at(m, j, s->n) * esz, z = block_at(m, j + 1, s->n) * esz;
    memcpy(buf + a, slot(s, j, b) + a, z - a);
  }
  step_end(s, b);
  return ACC_OK;
}

acc_result_t acc_shm_all_reduce(acc_shm_t *s, void *buf, size_t count, acc_dtype_t dtype,
                                acc_op_t op, char *err, size_t errlen) {
  call_t c = call_start(s, "all-reduce", err, errlen, SHM_ALL_REDUCE, (uint32_t)dtype << 8 | op, -1,
                        count * acc_dtype_size(dtype));
  acc_result_t r = check_abort(s, &c);
  size_t esz = acc_dtype_size(dtype), per = ACC_SHM_SLOT / esz;
  const size_t bytes = count * esz;
  for (size_t at = 0; r == ACC_OK && at < count; at += per) {
    size_t m = count - at < per ? count - at : per;
    unsigned char *p = (unsigned char *)buf + at * esz;
    if (bytes <= ACC_SHM_NAIVE_MAX)
      r = naive_chunk(s, &c, p, m, dtype, op);
    else if (bytes <= ACC_SHM_CLAIM_MAX)
      r = claimed_chunk(s, &c, p, m, dtype, op);
    else
      r = rsag_chunk(s, &c, p, m, dtype, op);
  }
  return r;
}

/* One chunk of a reduce-scatter: m elements of each member's block,
 * starting `at` into the block (blocks are `count` long). The slot holds
 * the n pieces side by side; member j's piece is reduced by member j. */
static acc_result_t rs_chunk(acc_shm_t *s, call_t *c, const unsigned char *send,
                             unsigned char *recv, size_t count, size_t at, size_t m,
                             acc_dtype_t dtype, acc_op_t op) {
  unsigned b;
  acc_result_t r = step_begin(s, c, &b);
  if (r != ACC_OK)
    return r;
  size_t esz = acc_dtype_size(dtype), piece = m * esz;
  unsigned char *own = slot(s, s->me, b);
  for (int j = 0; j < s->n; j++)
    if (j != s->me)
      memcpy(own + (size_t)j * piece, send + ((size_t)j * count + at) * esz, piece);
  post(s);
  if ((r = sync_all(s, c)) != ACC_OK)
    return r;
  const void *in[s->n];
  for (int j = 0; j < s->n; j++)
    in[j] = j == s->me ? (const void *)(send + ((size_t)s->me * count + at) * esz)
                       : (const void *)(slot(s, j, b) + (size_t)s->me * piece);
  acc_reduce_many(recv + at * esz, in, s->n, m, dtype, op, op == ACC_AVG ? s->n : 0);
  step_end(s, b);
  return ACC_OK;
}

acc_result_t acc_shm_reduce_scatter(acc_shm_t *s, const void *send, void *recv, size_t count,
                                    acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen) {
  call_t c = call_start(s, "reduce-scatter", err, errlen, SHM_REDUCE_SCATTER,
                        (uint32_t)dtype << 8 | op, -1, count * acc_dtype_size(dtype));
  acc_result_t r = check_abort(s, &c);
  size_t esz = acc_dtype_size(dtype), per = ACC_SHM_SLOT / esz / (size_t)s->n;
  for (size_t at = 0; r == ACC_OK && at < count; at += per) {
    size_t m = count - at < per ? count - at : per;
    r = rs_chunk(s, &c, send, recv, count, at, m, dtype, op);
  }
  return r;
}

acc_result_t acc_shm_broadcast(acc_shm_t *s, void *buf, size_t bytes, int root, char *err,
                               size_t errlen) {
  call_t c = call_start(s, "broadcast", err, errlen, SHM_BROADCAST, 0, root, bytes);
  acc_result_t r = check_abort(s, &c);
  for (size_t at = 0; r == ACC_OK && at < bytes; at += ACC_SHM_SLOT) {
    size_t m = bytes - at < ACC_SHM_SLOT ? bytes - at : ACC_SHM_SLOT;
    unsigned b = s->step & 1;
    if (s->me == root) {
      if ((r = step_begin(s, &c, &b)) != ACC_OK)
        break;
      memcpy(slot(s, root, b), (unsigned char *)buf + at, m);
    } else {
      if ((r = wait_one(s, root, s->t + 1, c.deadline, err, errlen)) != ACC_OK ||
          (r = verify(s, &c, root)) != ACC_OK)
        break;
      memcpy((unsigned char *)buf + at, slot(s, root, b), m);
    }
    post(s);
    step_end(s, b);
  }
  return r;
}

acc_result_t acc_shm_all_gather(acc_shm_t *s, const void *send, void *recv, size_t bytes, char *err,
                                size_t errlen) {
  call_t c = call_start(s, "all-gather", err, errlen, SHM_ALL_GATHER, 0, -1, bytes);
  acc_result_t r = check_abort(s, &c);
  unsigned char *out = recv;
  for (size_t at = 0; r == ACC_OK && at < bytes; at += ACC_SHM_SLOT) {
    size_t m = bytes - at < ACC_SHM_SLOT ? bytes - at : ACC_SHM_SLOT;
    unsigned b;
    if ((r = step_begin(s, &c, &b)) != ACC_OK)
      break;
    memcpy(slot(s, s->me, b), (const unsigned char *)send + at, m);
    post(s);
    if ((r = sync_all(s, &c)) != ACC_OK)
      break;
    for (int j = 0; j < s->n; j++) {
      unsigned char *dst = out + (size_t)j * bytes + at;
      if (j != s->me)
        memcpy(dst, slot(s, j, b), m);
      else if (dst != (const unsigned char *)send + at) /* not in place */
        memcpy(dst, (const unsigned char *)send + at, m);
    }
    step_end(s, b);
  }
  return r;
}

acc_result_t acc_shm_barrier(acc_shm_t *s, int leaving, char *err, size_t errlen) {
  call_t c = call_start(s, "barrier", err, errlen, leaving ? SHM_LEAVE : SHM_BARRIER, 0, -1, 0);
  acc_result_t r = check_abort(s, &c);
  if (r != ACC_OK)
    return r;
  post(s);
  return sync_all(s, &c);
}
