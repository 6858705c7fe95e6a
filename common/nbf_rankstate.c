/*
 * nbf_rankstate.c — the per-rank state records (see nbf_rankstate.h).
 */
#define _GNU_SOURCE
#include "nbf_rankstate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbf_param.h"
#include "nbf_util.h"

/* The layout is the documented contract (nbf_rankstate.h): a reader built
 * from another tree (another node's launcher version) relies on it. */
_Static_assert(sizeof(nbf_rs_call_t) == 32, "nbf_rs_call_t layout");
_Static_assert(offsetof(nbf_rankstate_t, call) == 40, "rankstate layout");
_Static_assert(offsetof(nbf_rankstate_t, done_seq) == 72, "rankstate layout");
_Static_assert(offsetof(nbf_rankstate_t, err_call) == 80, "rankstate layout");
_Static_assert(offsetof(nbf_rankstate_t, err_ms) == 112, "rankstate layout");
_Static_assert(offsetof(nbf_rankstate_t, err_msg) == 128, "rankstate layout");
_Static_assert(sizeof(nbf_rankstate_t) == 640, "rankstate layout");
_Static_assert(sizeof(nbf_rankstate_t) <= NBF_RANKSTATE_PAGE, "one page per rank");

static void init_record(nbf_rankstate_t *rs, int rank) {
  memset(rs, 0, sizeof *rs);
  rs->magic = NBF_RANKSTATE_MAGIC;
  rs->version = NBF_RANKSTATE_VERSION;
  rs->size = sizeof *rs;
  rs->rank = rank;
  rs->err_peer = -1;
  rs->phase = NBF_RS_STARTING;
  rs->phase_ms = nbf_now_ms();
}

int nbf_rankstate_create(int rank, nbf_rankstate_t **rs) {
  *rs = NULL;
  int fd = memfd_create("nbfork-rankstate", MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  if (ftruncate(fd, NBF_RANKSTATE_PAGE) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  void *p = mmap(NULL, NBF_RANKSTATE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  *rs = p;
  init_record(*rs, rank);
  return fd;
}

void nbf_rankstate_unmap(nbf_rankstate_t **rs) {
  if (!rs || !*rs)
    return;
  munmap(*rs, NBF_RANKSTATE_PAGE);
  *rs = NULL;
}

/* Mapped once per process. A process forked from one that tried (the
 * executor before it forks workers, a worker's data loader) tries again;
 * the record's `pid` (the launcher writes the worker's) keeps a child of
 * a rank from writing its parent's record. */
static nbf_rankstate_t *g_self;
static pid_t g_tried_pid;

nbf_rankstate_t *nbf_rankstate_self(void) {
  pid_t me = getpid();
  if (g_tried_pid == me)
    return g_self;
  g_tried_pid = me;
  g_self = NULL;
  long fd = -1;
  if (!nbf_param_raw(NBF_P_NBFORK_RANKSTATE_FD) ||
      nbf_param_long(NBF_P_NBFORK_RANKSTATE_FD, &fd) != 0 || fd < 0 || fd > INT_MAX)
    return NULL;
  struct stat st;
  if (fstat((int)fd, &st) != 0 || st.st_size < NBF_RANKSTATE_PAGE)
    return NULL;
  void *p = mmap(NULL, NBF_RANKSTATE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
  if (p == MAP_FAILED)
    return NULL;
  nbf_rankstate_t *rs = p;
  if (rs->magic != NBF_RANKSTATE_MAGIC || rs->version != NBF_RANKSTATE_VERSION ||
      (rs->pid != 0 && rs->pid != (int32_t)me)) {
    munmap(p, NBF_RANKSTATE_PAGE);
    return NULL;
  }
  /* the programs this rank starts are no ranks of this launch */
  fcntl((int)fd, F_SETFD, FD_CLOEXEC);
  rs->pid = (int32_t)me;
  g_self = rs;
  return rs;
}

static void write_begin(nbf_rankstate_t *rs) {
  atomic_fetch_add_explicit((_Atomic uint32_t *)&rs->gen, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
}

static void write_end(nbf_rankstate_t *rs) {
  atomic_thread_fence(memory_order_release);
  atomic_fetch_add_explicit((_Atomic uint32_t *)&rs->gen, 1, memory_order_relaxed);
}

void nbf_rankstate_phase(nbf_rankstate_t *rs, nbf_rs_phase_t phase) {
  if (!rs)
    return;
  write_begin(rs);
  rs->phase = phase;
  rs->phase_ms = nbf_now_ms();
  write_end(rs);
}

void nbf_rankstate_begin(nbf_rankstate_t *rs, const nbf_rs_call_t *c) {
  if (!rs)
    return;
  write_begin(rs);
  rs->call = *c;
  rs->phase = NBF_RS_COLLECTIVE;
  rs->phase_ms = c->start_ms;
  write_end(rs);
}

void nbf_rankstate_end(nbf_rankstate_t *rs) {
  if (!rs)
    return;
  write_begin(rs);
  rs->done_seq = rs->call.seq;
  rs->done_op = rs->call.op;
  rs->phase = NBF_RS_RUNNING;
  rs->phase_ms = nbf_now_ms();
  write_end(rs);
}

void nbf_rankstate_error(nbf_rankstate_t *rs, int code, int peer, const nbf_rs_call_t *c,
                         const char *msg) {
  if (!rs)
    return;
  write_begin(rs);
  rs->err_code = code;
  rs->err_peer = peer;
  if (c)
    rs->err_call = *c;
  else
    memset(&rs->err_call, 0, sizeof rs->err_call);
  rs->err_ms = nbf_now_ms();
  snprintf(rs->err_msg, sizeof rs->err_msg, "%s", msg ? msg : "");
  write_end(rs);
}

void nbf_rankstate_leaving(nbf_rankstate_t *rs) {
  nbf_rankstate_flag(rs, NBF_RS_LEAVING, 1);
}

void nbf_rankstate_flag(nbf_rankstate_t *rs, unsigned flag, int on) {
  if (!rs)
    return;
  write_begin(rs);
  rs->flags = (uint16_t)(on ? rs->flags | flag : rs->flags & ~flag);
  write_end(rs);
}

void nbf_rankstate_fatal(nbf_rankstate_t *rs) {
  if (!rs)
    return;
  write_begin(rs);
  rs->flags |= NBF_RS_FATAL;
  rs->phase = NBF_RS_EXITED;
  rs->phase_ms = nbf_now_ms();
  write_end(rs);
}

int nbf_rankstate_read(const nbf_rankstate_t *rs, nbf_rankstate_t *out) {
  if (!rs)
    return -1;
  for (int tries = 0; tries < 1000; tries++) {
    uint32_t g0 = atomic_load_explicit((_Atomic uint32_t *)&rs->gen, memory_order_acquire);
    memcpy(out, rs, sizeof *out);
    atomic_thread_fence(memory_order_acquire);
    uint32_t g1 = atomic_load_explicit((_Atomic uint32_t *)&rs->gen, memory_order_relaxed);
    if (g0 == g1 && !(g0 & 1)) {
      out->err_msg[sizeof out->err_msg - 1] = 0;
      return out->magic == NBF_RANKSTATE_MAGIC && out->version == NBF_RANKSTATE_VERSION ? 0 : -1;
    }
    sched_yield();
  }
  out->err_msg[sizeof out->err_msg - 1] = 0;
  return -1;
}

const char *nbf_rs_op_name(int op) {
  static const char *const names[] = {"collective", "all_reduce",     "broadcast",
                                      "all_gather", "reduce_scatter", "barrier"};
  return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "collective";
}

const char *nbf_rs_dtype_name(int dtype) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
  return dtype >= 0 && dtype < (int)(sizeof names / sizeof *names) ? names[dtype] : "?";
}

const char *nbf_rs_phase_name(int phase) {
  static const char *const names[] = {"starting", "rendezvous", "running", "in a collective",
                                      "exited"};
  return phase >= 0 && phase < (int)(sizeof names / sizeof *names) ? names[phase] : "?";
}

char *nbf_rs_call_text(const nbf_rs_call_t *c, char *out, size_t outlen) {
  char root[32] = "";
  if (c->op == NBF_RS_BROADCAST)
    snprintf(root, sizeof root, ", root %d", (int)c->root);
  if (c->op == NBF_RS_BARRIER)
    snprintf(out, outlen, "barrier #%llu", (unsigned long long)c->seq);
  else
    snprintf(out, outlen, "%s #%llu (%s x %llu%s%s)", nbf_rs_op_name(c->op),
             (unsigned long long)c->seq, nbf_rs_dtype_name(c->dtype),
             (unsigned long long)c->count, root, c->device ? ", device" : "");
  return out;
}
