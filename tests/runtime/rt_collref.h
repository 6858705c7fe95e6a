/*
 * rt_collref.h — the values ranks contribute to collective tests and the
 * serial reference of each op, shared by the host (test_collectives.c)
 * and device (test_nccl.c) collective tests.
 *
 * Values are small integers (|v| <= 24) so that sums are exact in every
 * dtype whatever order the backend adds them in; AVG's reference divides
 * the exact sum as the runtime documents (float division rounded to the
 * dtype; integer division truncates).
 */
#ifndef RT_COLLREF_H
#define RT_COLLREF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "acc_half.h"
#include "nbfork.h"

/* The value rank r holds at element i (small signed integers). */
static inline int value(int r, size_t i) {
  return (int)((i * 7 + (size_t)r * 13) % 37) - 18 + r;
}

static inline void put(void *buf, acc_dtype_t d, size_t i, double v) {
  switch (d) {
  case ACC_F32:
    ((float *)buf)[i] = (float)v;
    break;
  case ACC_F64:
    ((double *)buf)[i] = v;
    break;
  case ACC_F16:
    ((uint16_t *)buf)[i] = acc_f32_to_f16((float)v);
    break;
  case ACC_BF16:
    ((uint16_t *)buf)[i] = acc_f32_to_bf16((float)v);
    break;
  case ACC_I32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case ACC_I64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  }
}

static inline double get(const void *buf, acc_dtype_t d, size_t i) {
  switch (d) {
  case ACC_F32:
    return ((const float *)buf)[i];
  case ACC_F64:
    return ((const double *)buf)[i];
  case ACC_F16:
    return acc_f16_to_f32(((const uint16_t *)buf)[i]);
  case ACC_BF16:
    return acc_bf16_to_f32(((const uint16_t *)buf)[i]);
  case ACC_I32:
    return ((const int32_t *)buf)[i];
  case ACC_I64:
    return (double)((const int64_t *)buf)[i];
  }
  return 0;
}

/* Serial reference of op over ranks 0..world-1 of element `i`, as the
 * dtype stores it. */
static inline double reference(acc_dtype_t d, acc_op_t op, int world, size_t i) {
  long long sum = 0, mx = value(0, i), mn = value(0, i);
  for (int r = 0; r < world; r++) {
    long long v = value(r, i);
    sum += v;
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  unsigned char tmp[8];
  switch (op) {
  case ACC_SUM:
    return (double)sum;
  case ACC_MAX:
    return (double)mx;
  case ACC_MIN:
    return (double)mn;
  case ACC_AVG:
    switch (d) {
    case ACC_F32:
      return (double)((float)sum / (float)world);
    case ACC_F64:
      return (double)sum / (double)world;
    case ACC_I32:
    case ACC_I64:
      return (double)(sum / world);
    default:
      put(tmp, d, 0, (double)((float)sum / (float)world));
      return get(tmp, d, 0);
    }
  }
  return 0;
}

/* "f32".."i64" / "sum".."min" -> the enum, -1 when unknown. */
static inline int parse_dtype(const char *s) {
  static const char *n[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
  for (int i = 0; i < 6; i++)
    if (strcmp(s, n[i]) == 0)
      return i;
  return -1;
}

static inline int parse_op(const char *s) {
  static const char *n[] = {"sum", "avg", "max", "min"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, n[i]) == 0)
      return i;
  return -1;
}

#endif /* RT_COLLREF_H */
