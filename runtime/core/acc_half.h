/*
 * acc_half.h — IEEE 754 binary16 (fp16) and bfloat16 conversions, done in
 * software so they work on every CPU. Float -> half rounds to nearest,
 * ties to even, like CUDA's __float2half_rn and torch. Internal.
 */
#ifndef ACC_HALF_H
#define ACC_HALF_H

#include <stdint.h>
#include <string.h>

/* The bits of a float and back (memcpy: no aliasing rules broken; the
 * compiler turns it into a register move). */
static inline uint32_t acc_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float acc_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float acc_bf16_to_f32(uint16_t h) {
  return acc_bits_f32((uint32_t)h << 16);
}

static inline uint16_t acc_f32_to_bf16(float f) {
  uint32_t u = acc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep sign */
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static inline float acc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400u));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return acc_bits_f32(u);
}

static inline uint16_t acc_f32_to_f16(float f) {
  uint32_t u = acc_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN */
    return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* below the smallest normal half (2^-14) */
    if (a < 0x33000000u) /* below half of the smallest subnormal: zero */
      return sign;
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    int shift = (int)(126 - e); /* 14 + 1 + (112 - e) + ... */
    /* value = m * 2^(e-150); subnormal half unit = 2^-24 -> q = m >> (126-e) */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
      q++;
    return (uint16_t)(sign | q);
  }
  /* normal: rebias exponent, round mantissa to 10 bits (nearest even) */
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  r -= (uint32_t)(127 - 15) << 23;
  return (uint16_t)(sign | (r >> 13));
}

#endif /* ACC_HALF_H */
