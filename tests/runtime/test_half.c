/*
 * test_half.c — fp16/bf16 conversions used by the f16/bf16 reductions.
 *   test_half f16_roundtrip|f16_rounding|bf16_rounding
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acc_half.h"
#include "rt_test.h"

/* Every half that is not NaN converts to float and back unchanged; NaNs
 * stay NaN. */
NBF_TEST(f16_roundtrip) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = acc_f16_to_f32((uint16_t)h);
    uint16_t back = acc_f32_to_f16(f);
    int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (is_nan) {
      ASSERT_TRUE(isnan(f));
      ASSERT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
    } else if (back != h) {
      NBF_TEST_FAIL("half 0x%04x -> %.9g -> 0x%04x", (unsigned)h, f, (unsigned)back);
    }
  }
}

/* Reference rounding: nearest representable half, ties to even, by
 * brute force over all finite halves of the right sign. */
static uint16_t ref_f16(float f) {
  if (isnan(f))
    return 0x7e00;
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (a >= 65520.0)
    return sign | 0x7c00;
  uint16_t best = 0;
  double bd = INFINITY;
  for (uint16_t h = 0; h < 0x7c00; h++) {
    double v = acc_f16_to_f32(h);
    double d = fabs(v - a);
    if (d < bd || (d == bd && !(h & 1))) {
      bd = d;
      best = h;
    }
  }
  return sign | best;
}

NBF_TEST(f16_rounding) {
  ASSERT_EQ(acc_f32_to_f16(1.0f), 0x3c00);
  ASSERT_EQ(acc_f32_to_f16(-2.0f), 0xc000);
  ASSERT_EQ(acc_f32_to_f16(65504.0f), 0x7bff);
  ASSERT_EQ(acc_f32_to_f16(65519.0f), 0x7bff);
  ASSERT_EQ(acc_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  ASSERT_EQ(acc_f32_to_f16(INFINITY), 0x7c00);
  ASSERT_EQ(acc_f32_to_f16(5.9604645e-08f), 0x0001);     /* smallest subnormal */
  ASSERT_EQ(acc_f32_to_f16(2.9802322e-08f), 0x0000);     /* exactly half of it: tie to even */
  ASSERT_EQ(acc_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
  ASSERT_EQ(acc_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even (up) */
  ASSERT_EQ(acc_f32_to_f16(-0.0f), 0x8000);
  /* pseudo-random floats across the half range against brute force */
  uint32_t x = 12345;
  for (int i = 0; i < 3000; i++) {
    x = x * 1664525u + 1013904223u;
    float f;
    uint32_t bits = (x & 0x807fffffu) | ((uint32_t)(100 + (x >> 23) % 45) << 23);
    memcpy(&f, &bits, 4);
    uint16_t got = acc_f32_to_f16(f), want = ref_f16(f);
    if (got != want)
      NBF_TEST_FAIL("f32 %.9g (0x%08x): got 0x%04x want 0x%04x", f, (unsigned)bits, got, want);
  }
}

NBF_TEST(bf16_rounding) {
  ASSERT_EQ(acc_f32_to_bf16(1.0f), 0x3f80);
  ASSERT_EQ(acc_f32_to_bf16(-3.0f), 0xc040);
  float f;
  uint32_t u = 0x3f808000u; /* 1 + 2^-8: a tie, rounds to even (1.0) */
  memcpy(&f, &u, 4);
  ASSERT_EQ(acc_f32_to_bf16(f), 0x3f80);
  u = 0x3f818000u; /* tie above an odd value: rounds up */
  memcpy(&f, &u, 4);
  ASSERT_EQ(acc_f32_to_bf16(f), 0x3f82);
  u = 0x3f808001u; /* just above the tie */
  memcpy(&f, &u, 4);
  ASSERT_EQ(acc_f32_to_bf16(f), 0x3f81);
  ASSERT_TRUE(isnan(acc_bf16_to_f32(acc_f32_to_bf16(NAN))));
  ASSERT_EQ(acc_f32_to_bf16(INFINITY), 0x7f80);
  for (uint32_t h = 0; h < 65536; h++) {
    float v = acc_bf16_to_f32((uint16_t)h);
    if (!isnan(v))
      ASSERT_EQ(acc_f32_to_bf16(v), h);
  }
}

NBF_TEST_MAIN()
