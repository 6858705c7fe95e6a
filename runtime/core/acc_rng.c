/*
 * acc_rng.c — xoshiro256** seeded by splitmix64 (see acc_rng.h), and the
 * public seeding calls acc_set_seed / acc_rand_uniform / acc_rand_normal.
 */
#include "acc_rng.h"

#include <math.h>
#include <stdlib.h>

#include "acc_internal.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

void acc_rng_seed(acc_rng_t *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
  r->has_spare = 0;
  r->spare = 0;
}

uint64_t acc_rng_next(acc_rng_t *r) {
  uint64_t *s = r->s;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double acc_rng_uniform(acc_rng_t *r) {
  return (double)(acc_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t acc_rng_below(acc_rng_t *r, uint64_t n) {
  if (n == 0)
    return 0;
  /* Lemire, "Fast random integer generation in an interval" (2019). */
  __uint128_t m = (__uint128_t)acc_rng_next(r) * n;
  uint64_t l = (uint64_t)m;
  if (l < n) {
    uint64_t t = -n % n;
    while (l < t) {
      m = (__uint128_t)acc_rng_next(r) * n;
      l = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

double acc_rng_normal(acc_rng_t *r) {
  if (r->has_spare) {
    r->has_spare = 0;
    return r->spare;
  }
  double u1 = 1.0 - acc_rng_uniform(r); /* (0, 1]: log never sees 0 */
  double u2 = acc_rng_uniform(r);
  double rad = sqrt(-2.0 * log(u1));
  double th = 2.0 * M_PI * u2;
  r->spare = rad * sin(th);
  r->has_spare = 1;
  return rad * cos(th);
}

/* ---- public API ---- */

/* The RNG used when no accelerator is given (acc == NULL). Seeded with
 * PyTorch's default seed so unseeded runs are reproducible as in torch. */
#define ACC_DEFAULT_SEED 67280421310721ULL
static acc_rng_t g_rng;
static int g_rng_ready;

static acc_rng_t *rng_of(acc_t *acc) {
  if (acc)
    return &acc->rng;
  if (!g_rng_ready) {
    acc_rng_seed(&g_rng, ACC_DEFAULT_SEED);
    g_rng_ready = 1;
  }
  return &g_rng;
}

void acc_set_seed(acc_t *acc, unsigned long long seed, int per_rank) {
  unsigned long long s = seed + (per_rank && acc ? (unsigned long long)acc->rank : 0ULL);
  acc_rng_seed(rng_of(acc), s);
  srand((unsigned)s);
}

double acc_rand_uniform(acc_t *acc) {
  return acc_rng_uniform(rng_of(acc));
}

double acc_rand_normal(acc_t *acc) {
  return acc_rng_normal(rng_of(acc));
}

acc_rng_t *acc__rng(acc_t *acc) {
  return rng_of(acc);
}
