/*
 * acc_reduce.c — reduction kernels (see acc_reduce.h). Plain loops the
 * compiler vectorizes; MAX/MIN propagate NaN like torch (a NaN in either
 * input gives NaN).
 */
#include "acc_reduce.h"

#include <stdint.h>
#include <string.h>

#include "acc_half.h"
#include "acc_internal.h"

#define SUM(a, b) ((a) + (b))
#define MAXNAN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define MINNAN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

#define KERNEL(name, T, OP)                                                                        \
  static void name(void *out, const void *in1, const void *in2, size_t n) {                        \
    T *o = out;                                                                                    \
    const T *a = in1, *b = in2;                                                                    \
    for (size_t i = 0; i < n; i++)                                                                 \
      o[i] = OP(a[i], b[i]);                                                                       \
  }

/* Integer sums wrap (two's complement) instead of being undefined. */
#define SUM_WRAP32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define SUM_WRAP64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* sum_<t>, max_<t> and min_<t> of one dtype (a row of acc_reduce_get's table) */
#define KERNELS(t, T, SUM_OP, MAX_OP, MIN_OP)                                                      \
  KERNEL(sum_##t, T, SUM_OP)                                                                       \
  KERNEL(max_##t, T, MAX_OP)                                                                       \
  KERNEL(min_##t, T, MIN_OP)
KERNELS(f32, float, SUM, MAXNAN, MINNAN)
KERNELS(f64, double, SUM, MAXNAN, MINNAN)
KERNELS(i32, int32_t, SUM_WRAP32, MAXI, MINI)
KERNELS(i64, int64_t, SUM_WRAP64, MAXI, MINI)

/* Half types: widen to float, reduce, round back (nearest even). */
#define HALF_KERNEL(name, TOF, FROMF, OP)                                                          \
  static void name(void *out, const void *in1, const void *in2, size_t n) {                        \
    uint16_t *o = out;                                                                             \
    const uint16_t *a = in1, *b = in2;                                                             \
    for (size_t i = 0; i < n; i++) {                                                               \
      float x = TOF(a[i]), y = TOF(b[i]);                                                          \
      o[i] = FROMF(OP(x, y));                                                                      \
    }                                                                                              \
  }
#define HALF_KERNELS(t, TOF, FROMF)                                                                \
  HALF_KERNEL(sum_##t, TOF, FROMF, SUM)                                                            \
  HALF_KERNEL(max_##t, TOF, FROMF, MAXNAN)                                                         \
  HALF_KERNEL(min_##t, TOF, FROMF, MINNAN)
HALF_KERNELS(f16, acc_f16_to_f32, acc_f32_to_f16)
HALF_KERNELS(bf16, acc_bf16_to_f32, acc_f32_to_bf16)

acc_reduce_fn acc_reduce_get(acc_dtype_t dtype, acc_op_t op) {
  /* rows: dtype in enum order; columns: SUM, MAX, MIN */
  static const acc_reduce_fn table[6][3] = {
      {sum_f32, max_f32, min_f32},    {sum_f64, max_f64, min_f64}, {sum_f16, max_f16, min_f16},
      {sum_bf16, max_bf16, min_bf16}, {sum_i32, max_i32, min_i32}, {sum_i64, max_i64, min_i64},
  };
  if (!acc_dtype_valid(dtype) || !acc_op_valid(op))
    return NULL;
  int col = op == ACC_MAX ? 1 : op == ACC_MIN ? 2 : 0; /* AVG = SUM, then divide */
  return table[dtype][col];
}

size_t acc_dtype_size(acc_dtype_t dtype) {
  switch (dtype) {
  case ACC_F32:
  case ACC_I32:
    return 4;
  case ACC_F64:
  case ACC_I64:
    return 8;
  case ACC_F16:
  case ACC_BF16:
    return 2;
  }
  return 0;
}

/* Division by the world size, one function per dtype. For a
 * power-of-two world the reciprocal is exact, and x * (1/w) is then the
 * same correctly rounded value as x / w: a multiply is several times
 * cheaper than a divide (this runs over every gradient after every
 * all-reduce). Half types divide in float and round back; integers
 * truncate. */
#define DIVIDE_FLOAT(name, T)                                                                      \
  static void name(void *buf, size_t count, int world) {                                           \
    T *p = buf;                                                                                    \
    const T w = (T)world;                                                                          \
    if ((world & (world - 1)) == 0) {                                                              \
      const T r = (T)1 / w;                                                                        \
      for (size_t i = 0; i < count; i++)                                                           \
        p[i] *= r;                                                                                 \
    } else {                                                                                       \
      for (size_t i = 0; i < count; i++)                                                           \
        p[i] /= w;                                                                                 \
    }                                                                                              \
  }
#define DIVIDE_HALF(name, TOF, FROMF)                                                              \
  static void name(void *buf, size_t count, int world) {                                           \
    uint16_t *p = buf;                                                                             \
    for (size_t i = 0; i < count; i++)                                                             \
      p[i] = FROMF(TOF(p[i]) / (float)world);                                                      \
  }
#define DIVIDE_INT(name, T)                                                                        \
  static void name(void *buf, size_t count, int world) {                                           \
    T *p = buf;                                                                                    \
    for (size_t i = 0; i < count; i++)                                                             \
      p[i] /= world;                                                                               \
  }

DIVIDE_FLOAT(divide_f32, float)
DIVIDE_FLOAT(divide_f64, double)
DIVIDE_HALF(divide_f16, acc_f16_to_f32, acc_f32_to_f16)
DIVIDE_HALF(divide_bf16, acc_bf16_to_f32, acc_f32_to_bf16)
DIVIDE_INT(divide_i32, int32_t)
DIVIDE_INT(divide_i64, int64_t)

void acc_reduce_divide(void *buf, size_t count, acc_dtype_t dtype, int world) {
  /* in dtype enum order */
  static void (*const divide[])(void *, size_t, int) = {divide_f32,  divide_f64, divide_f16,
                                                        divide_bf16, divide_i32, divide_i64};
  if (world > 1 && acc_dtype_valid(dtype))
    divide[dtype](buf, count, world);
}

/* ---- many inputs (acc_reduce_many) ---- */

enum { RM_BLOCK = 1024 }; /* elements per block: 8 KiB of f64/i64, in L1 */
enum { FOLD_BLOCK = 4096 }; /* elements per block folded into out: 32 KiB of f64/i64 at most */

/* Half inputs: widen each block to f32, fold with the f32 kernel, divide,
 * round once. */
static void reduce_many_half(uint16_t *out, const void *const *in, int n, size_t count,
                             acc_op_t op, int divide_by, int bf16) {
  acc_reduce_fn f = acc_reduce_get(ACC_F32, op);
  float acc[RM_BLOCK], x[RM_BLOCK];
  for (size_t at = 0; at < count; at += RM_BLOCK) {
    size_t m = count - at < RM_BLOCK ? count - at : RM_BLOCK;
    for (int j = 0; j < n; j++) {
      const uint16_t *h = (const uint16_t *)in[j] + at;
      float *dst = j ? x : acc;
      if (bf16)
        for (size_t i = 0; i < m; i++)
          dst[i] = acc_bf16_to_f32(h[i]);
      else
        for (size_t i = 0; i < m; i++)
          dst[i] = acc_f16_to_f32(h[i]);
      if (j)
        f(acc, acc, x, m);
    }
    if (divide_by > 1)
      for (size_t i = 0; i < m; i++)
        acc[i] /= (float)divide_by;
    if (bf16)
      for (size_t i = 0; i < m; i++)
        out[at + i] = acc_f32_to_bf16(acc[i]);
    else
      for (size_t i = 0; i < m; i++)
        out[at + i] = acc_f32_to_f16(acc[i]);
  }
}

/* out's bytes overlap those of an input folded after the first pass
 * (in[2..]): folding in place would read what it already overwrote. */
static int overlaps_later(const void *out, const void *const *in, int n, size_t bytes) {
  uintptr_t a = (uintptr_t)out, z = a + bytes;
  for (int j = 2; j < n; j++) {
    uintptr_t b = (uintptr_t)in[j];
    if (b < z && a < b + bytes)
      return 1;
  }
  return 0;
}

void acc_reduce_many(void *out, const void *const *in, int n, size_t count, acc_dtype_t dtype,
                     acc_op_t op, int divide_by) {
  if (dtype == ACC_F16 || dtype == ACC_BF16) {
    reduce_many_half(out, in, n, count, op, divide_by, dtype == ACC_BF16);
    return;
  }
  acc_reduce_fn f = acc_reduce_get(dtype, op);
  size_t esz = acc_dtype_size(dtype);
  if (!f || !esz)
    return;
  if (n >= 2 && !overlaps_later(out, in, n, count * esz)) {
    /* fold straight into out: one pass less over the data; with AVG, a
     * block at a time so that the division finds it still in L1 instead
     * of reading and writing the whole output again (the same operations
     * on every element, so the same bits as dividing afterwards:
     * tests/runtime/test_reduce.c) */
    size_t step = divide_by > 1 ? FOLD_BLOCK : count;
    for (size_t at = 0; at < count; at += step) {
      size_t m = count - at < step ? count - at : step, off = at * esz;
      char *o = (char *)out + off;
      f(o, (const char *)in[0] + off, (const char *)in[1] + off, m);
      for (int j = 2; j < n; j++)
        f(o, o, (const char *)in[j] + off, m);
      if (divide_by > 1)
        acc_reduce_divide(o, m, dtype, divide_by);
    }
    return;
  }
  uint64_t block[RM_BLOCK]; /* RM_BLOCK elements of up to 8 bytes */
  for (size_t at = 0; at < count; at += RM_BLOCK) {
    size_t m = count - at < RM_BLOCK ? count - at : RM_BLOCK, off = at * esz;
    if (n == 1)
      memcpy(block, (const char *)in[0] + off, m * esz);
    else
      f(block, (const char *)in[0] + off, (const char *)in[1] + off, m);
    for (int j = 2; j < n; j++)
      f(block, block, (const char *)in[j] + off, m);
    if (divide_by > 1)
      acc_reduce_divide(block, m, dtype, divide_by);
    memcpy((char *)out + off, block, m * esz);
  }
}
