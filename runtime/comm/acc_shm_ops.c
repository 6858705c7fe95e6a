/*
 * acc_shm_ops.c — the collectives through shared memory (acc_shm.h):
 * all-reduce (naive, or reduce-scatter + all-gather, by size),
 * reduce-scatter, broadcast, all-gather, barrier, on the steps and waits
 * of acc_shm_sync.c.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "acc_check.h"
#include "acc_reduce.h"
#include "acc_shm_internal.h"

/* ---- the collectives ---- */

/* Naive all-reduce of one chunk: every member copies its data into its
 * slot, then reduces all slots in member order (so every member computes
 * the same bits). */
static acc_result_t naive_chunk(acc_shm_t *s, call_t *c, void *buf, size_t m, acc_dtype_t dtype,
                                acc_op_t op) {
  unsigned b;
  ACC_CHECK(acc__shm_step_begin(s, c, &b));
  acc_result_t r;
  size_t bytes = m * acc_dtype_size(dtype);
  memcpy(slot(s, s->me, b), buf, bytes);
  acc__shm_post(s);
  if ((r = acc__shm_sync_all(s, c)) != ACC_OK)
    return r;
  const void *in[s->n];
  for (int j = 0; j < s->n; j++)
    in[j] = slot(s, j, b);
  acc_reduce_many(buf, in, s->n, m, dtype, op, op == ACC_AVG ? s->n : 0);
  acc__shm_step_end(s, b);
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
  ACC_CHECK(acc__shm_step_begin(s, c, &b));
  acc_result_t r;
  size_t esz = acc_dtype_size(dtype);
  size_t lo = block_at(m, s->me, s->n) * esz, hi = block_at(m, s->me + 1, s->n) * esz;
  unsigned char *own = slot(s, s->me, b);
  memcpy(own, buf, lo);
  memcpy(own + hi, buf + hi, m * esz - hi);
  acc__shm_post(s);
  if ((r = acc__shm_sync_all(s, c)) != ACC_OK)
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
  acc__shm_post(s);
  if ((r = acc__shm_sync_all(s, c)) != ACC_OK)
    return r;
  for (int j = 0; j < s->n; j++) {
    if (j == s->me)
      continue;
    size_t a = block_at(m, j, s->n) * esz, z = block_at(m, j + 1, s->n) * esz;
    memcpy(buf + a, slot(s, j, b) + a, z - a);
  }
  acc__shm_step_end(s, b);
  return ACC_OK;
}

acc_result_t acc_shm_all_reduce(acc_shm_t *s, void *buf, size_t count, acc_dtype_t dtype,
                                acc_op_t op, char *err, size_t errlen) {
  call_t c = acc__shm_call_start(s, "all-reduce", err, errlen, SHM_ALL_REDUCE,
                                 (uint32_t)dtype << 8 | op, -1, count * acc_dtype_size(dtype));
  acc_result_t r = acc__shm_check_abort(s, &c);
  size_t esz = acc_dtype_size(dtype), per = ACC_SHM_SLOT / esz;
  int naive = count * esz <= ACC_SHM_NAIVE_MAX;
  for (size_t at = 0; r == ACC_OK && at < count; at += per) {
    size_t m = count - at < per ? count - at : per;
    unsigned char *p = (unsigned char *)buf + at * esz;
    r = naive ? naive_chunk(s, &c, p, m, dtype, op) : rsag_chunk(s, &c, p, m, dtype, op);
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
  ACC_CHECK(acc__shm_step_begin(s, c, &b));
  acc_result_t r;
  size_t esz = acc_dtype_size(dtype), piece = m * esz;
  unsigned char *own = slot(s, s->me, b);
  for (int j = 0; j < s->n; j++)
    if (j != s->me)
      memcpy(own + (size_t)j * piece, send + ((size_t)j * count + at) * esz, piece);
  acc__shm_post(s);
  if ((r = acc__shm_sync_all(s, c)) != ACC_OK)
    return r;
  const void *in[s->n];
  for (int j = 0; j < s->n; j++)
    in[j] = j == s->me ? (const void *)(send + ((size_t)s->me * count + at) * esz)
                       : (const void *)(slot(s, j, b) + (size_t)s->me * piece);
  acc_reduce_many(recv + at * esz, in, s->n, m, dtype, op, op == ACC_AVG ? s->n : 0);
  acc__shm_step_end(s, b);
  return ACC_OK;
}

acc_result_t acc_shm_reduce_scatter(acc_shm_t *s, const void *send, void *recv, size_t count,
                                    acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen) {
  call_t c = acc__shm_call_start(s, "reduce-scatter", err, errlen, SHM_REDUCE_SCATTER,
                                 (uint32_t)dtype << 8 | op, -1, count * acc_dtype_size(dtype));
  acc_result_t r = acc__shm_check_abort(s, &c);
  size_t esz = acc_dtype_size(dtype), per = ACC_SHM_SLOT / esz / (size_t)s->n;
  for (size_t at = 0; r == ACC_OK && at < count; at += per) {
    size_t m = count - at < per ? count - at : per;
    r = rs_chunk(s, &c, send, recv, count, at, m, dtype, op);
  }
  return r;
}

acc_result_t acc_shm_broadcast(acc_shm_t *s, void *buf, size_t bytes, int root, char *err,
                               size_t errlen) {
  call_t c = acc__shm_call_start(s, "broadcast", err, errlen, SHM_BROADCAST, 0, root, bytes);
  acc_result_t r = acc__shm_check_abort(s, &c);
  for (size_t at = 0; r == ACC_OK && at < bytes; at += ACC_SHM_SLOT) {
    size_t m = bytes - at < ACC_SHM_SLOT ? bytes - at : ACC_SHM_SLOT;
    unsigned b = s->step & 1;
    if (s->me == root) {
      if ((r = acc__shm_step_begin(s, &c, &b)) != ACC_OK)
        break;
      memcpy(slot(s, root, b), (unsigned char *)buf + at, m);
    } else {
      if ((r = acc__shm_wait_one(s, root, s->t + 1, c.deadline, err, errlen)) != ACC_OK ||
          (r = acc__shm_verify(s, &c, root)) != ACC_OK)
        break;
      memcpy((unsigned char *)buf + at, slot(s, root, b), m);
    }
    acc__shm_post(s);
    acc__shm_step_end(s, b);
  }
  return r;
}

acc_result_t acc_shm_all_gather(acc_shm_t *s, const void *send, void *recv, size_t bytes, char *err,
                                size_t errlen) {
  call_t c = acc__shm_call_start(s, "all-gather", err, errlen, SHM_ALL_GATHER, 0, -1, bytes);
  acc_result_t r = acc__shm_check_abort(s, &c);
  unsigned char *out = recv;
  for (size_t at = 0; r == ACC_OK && at < bytes; at += ACC_SHM_SLOT) {
    size_t m = bytes - at < ACC_SHM_SLOT ? bytes - at : ACC_SHM_SLOT;
    unsigned b;
    if ((r = acc__shm_step_begin(s, &c, &b)) != ACC_OK)
      break;
    memcpy(slot(s, s->me, b), (const unsigned char *)send + at, m);
    acc__shm_post(s);
    if ((r = acc__shm_sync_all(s, &c)) != ACC_OK)
      break;
    for (int j = 0; j < s->n; j++) {
      unsigned char *dst = out + (size_t)j * bytes + at;
      if (j != s->me)
        memcpy(dst, slot(s, j, b), m);
      else if (dst != (const unsigned char *)send + at) /* not in place */
        memcpy(dst, (const unsigned char *)send + at, m);
    }
    acc__shm_step_end(s, b);
  }
  return r;
}

acc_result_t acc_shm_barrier(acc_shm_t *s, int leaving, char *err, size_t errlen) {
  call_t c =
      acc__shm_call_start(s, "barrier", err, errlen, leaving ? SHM_LEAVE : SHM_BARRIER, 0, -1, 0);
  acc_result_t r = acc__shm_check_abort(s, &c);
  if (r != ACC_OK)
    return r;
  acc__shm_post(s);
  return acc__shm_sync_all(s, &c);
}
