/*
 * acc_rng.h — the runtime's random number generator: xoshiro256**
 * (Blackman & Vigna, "Scrambled linear pseudorandom number generators",
 * 2021), seeded through splitmix64 as its authors recommend. Internal.
 */
#ifndef ACC_RNG_H
#define ACC_RNG_H

#include <stdint.h>

typedef struct {
  uint64_t s[4];
  int has_spare; /* Box-Muller gives normals in pairs */
  double spare;
} acc_rng_t;

/* Seed the 256-bit state from one 64-bit seed (splitmix64 stream). */
void acc_rng_seed(acc_rng_t *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t acc_rng_next(acc_rng_t *r);
/* Uniform double in [0, 1) with 53 random bits. */
double acc_rng_uniform(acc_rng_t *r);
/* Uniform integer in [0, n) without modulo bias (Lemire's method). */
uint64_t acc_rng_below(acc_rng_t *r, uint64_t n);
/* Standard normal (Box-Muller, polar-free form). */
double acc_rng_normal(acc_rng_t *r);

#endif /* ACC_RNG_H */
