/*
 * test_reduce.c — acc_reduce_many, the shared-memory collectives' fold:
 * its AVG (the fold and the division a block at a time, while the block
 * is in L1) is proven bit-equal to the plain path it replaced, the whole
 * fold in `in` order followed by acc_reduce_divide over the whole output.
 *   test_reduce avg_equals_fold_then_divide|avg_in_place_equals_fold_then_divide
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acc_reduce.h"
#include "rt_test.h"

enum { MAXN = 8, MAXCOUNT = 3 * 4096 + 5 };

/* Inputs of every magnitude and sign (a fixed LCG): sums that round, and
 * quotients by 3, 5, 6, 7 that are inexact. */
static void fill(void *p, size_t count, acc_dtype_t dt, uint32_t seed) {
  for (size_t i = 0; i < count; i++) {
    seed = seed * 1664525u + 1013904223u;
    double v = ((double)(seed >> 8) / (1 << 24) - 0.5) * (double)(1u << (seed & 15));
    switch (dt) {
    case ACC_F32: ((float *)p)[i] = (float)v; break;
    case ACC_F64: ((double *)p)[i] = v; break;
    case ACC_I32: ((int32_t *)p)[i] = (int32_t)(v * 1000); break;
    default: ((int64_t *)p)[i] = (int64_t)(v * 1e6); break;
    }
  }
}

/* The reference: fold in[0..n-1] in order over the whole count, then
 * divide the whole output. */
static void reference(void *out, void *const *in, int n, size_t count, acc_dtype_t dt) {
  acc_reduce_fn f = acc_reduce_get(dt, ACC_SUM);
  f(out, in[0], in[1], count);
  for (int j = 2; j < n; j++)
    f(out, out, in[j], count);
  acc_reduce_divide(out, count, dt, n);
}

/* Every dtype with a plain kernel × 2..8 inputs × counts around the block
 * size; out a separate buffer, or (in_place) the first input. */
static void check_avg(int in_place) {
  static const acc_dtype_t dts[] = {ACC_F32, ACC_F64, ACC_I32, ACC_I64};
  static const size_t counts[] = {1, 15, 4095, 4096, 4097, MAXCOUNT};
  void *in[MAXN];
  for (int j = 0; j < MAXN; j++)
    in[j] = malloc(MAXCOUNT * 8);
  void *want = malloc(MAXCOUNT * 8), *got = malloc(MAXCOUNT * 8), *first = malloc(MAXCOUNT * 8);
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (int n = 2; n <= MAXN; n++)
      for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        size_t count = counts[c], bytes = count * acc_dtype_size(dts[d]);
        for (int j = 0; j < n; j++)
          fill(in[j], count, dts[d], 7u * (uint32_t)j + (uint32_t)c + 1);
        memcpy(first, in[0], bytes);
        reference(want, in, n, count, dts[d]);
        memcpy(in[0], first, bytes);
        void *out = in_place ? in[0] : got;
        acc_reduce_many(out, (const void *const *)in, n, count, dts[d], ACC_AVG, n);
        if (memcmp(out, want, bytes) != 0)
          NBF_TEST_FAIL("dtype %d, %d inputs, %zu elements: AVG differs from fold then divide",
                        (int)dts[d], n, count);
      }
  for (int j = 0; j < MAXN; j++)
    free(in[j]);
  free(want);
  free(got);
  free(first);
}

NBF_TEST(avg_equals_fold_then_divide) {
  check_avg(0);
}

NBF_TEST(avg_in_place_equals_fold_then_divide) {
  check_avg(1);
}

NBF_TEST_MAIN()
