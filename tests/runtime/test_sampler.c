/*
 * test_sampler.c — DistributedSampler + even_batches semantics, checked
 * for every rank of simulated worlds (acc__sampler_new_for).
 *   test_sampler coverage|padding|shuffle|single
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "rt_test.h"

/* Every index 0..n-1 appears, padding is cycled from the start of the
 * global order, ranks hold the same number of full batches, and the
 * concatenation of one round's batches rank-major is the global order. */
static void check(size_t n, size_t b, int world, int shuffle, int epoch) {
  acc_sampler_t **s = calloc((size_t)world, sizeof *s);
  for (int r = 0; r < world; r++) {
    s[r] = acc__sampler_new_for(r, world, n, b, shuffle, 1234);
    ASSERT_NOT_NULL(s[r]);
    acc_sampler_set_epoch(s[r], epoch);
  }
  size_t nb = acc_sampler_num_batches(s[0]);
  size_t round = b * (size_t)world;
  size_t total = (n + round - 1) / round * round;
  ASSERT_EQ(nb * round, total);
  size_t *global = malloc(total * sizeof *global);
  for (size_t k = 0; k < nb; k++)
    for (int r = 0; r < world; r++) {
      ASSERT_EQ(acc_sampler_num_batches(s[r]), nb);
      ASSERT_EQ(acc_sampler_dataset_size(s[r]), n);
      size_t len = 0;
      const size_t *idx = acc_sampler_batch(s[r], k, &len);
      ASSERT_NOT_NULL(idx);
      ASSERT_EQ(len, b);
      memcpy(global + (k * (size_t)world + (size_t)r) * b, idx, b * sizeof *idx);
    }
  size_t len = 99;
  ASSERT_NULL(acc_sampler_batch(s[0], nb, &len));
  ASSERT_EQ(len, 0);
  /* the first n positions are a permutation of 0..n-1 */
  unsigned char *seen = calloc(n, 1);
  for (size_t i = 0; i < n; i++) {
    ASSERT_LT(global[i], n);
    if (seen[global[i]])
      NBF_TEST_FAIL("n=%zu b=%zu world=%d: index %zu appears twice among the first n", n, b, world,
                    global[i]);
    seen[global[i]] = 1;
  }
  if (!shuffle)
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(global[i], i);
  /* padding repeats the global order from its start */
  for (size_t i = n; i < total; i++)
    ASSERT_EQ(global[i], global[i % n]);
  ASSERT_LT(total - n, round); /* padding only in the last round */
  free(seen);
  free(global);
  for (int r = 0; r < world; r++)
    acc_sampler_destroy(&s[r]);
  ASSERT_NULL(s[0]);
  free(s);
}

NBF_TEST(coverage) {
  const size_t ns[] = {1, 2, 5, 7, 8, 64, 100, 1000, 10000};
  const size_t bs[] = {1, 2, 3, 16, 64};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
    for (size_t j = 0; j < sizeof bs / sizeof *bs; j++)
      for (int w = 1; w <= 4; w++)
        check(ns[i], bs[j], w, 0, 0);
}

NBF_TEST(padding) {
  /* n=10, b=4, world=2: padded global order 0..9,0..5 (16 = 2 rounds);
   * rank 0 gets global batches 0 and 2, rank 1 batches 1 and 3 */
  acc_sampler_t *s0 = acc__sampler_new_for(0, 2, 10, 4, 0, 0);
  acc_sampler_t *s1 = acc__sampler_new_for(1, 2, 10, 4, 0, 0);
  size_t len;
  const size_t want0[2][4] = {{0, 1, 2, 3}, {8, 9, 0, 1}};
  const size_t want1[2][4] = {{4, 5, 6, 7}, {2, 3, 4, 5}};
  ASSERT_EQ(acc_sampler_num_batches(s0), 2);
  for (size_t k = 0; k < 2; k++) {
    const size_t *a = acc_sampler_batch(s0, k, &len), *b = acc_sampler_batch(s1, k, &len);
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(a[i], want0[k][i]);
      ASSERT_EQ(b[i], want1[k][i]);
    }
  }
  acc_sampler_destroy(&s0);
  acc_sampler_destroy(&s1);
  /* padding larger than n: n=3, b=4, world=3 -> 12 = 0,1,2 cycled */
  check(3, 4, 3, 0, 0);
  ASSERT_NULL(acc__sampler_new_for(0, 1, 0, 4, 0, 0));
  ASSERT_NULL(acc__sampler_new_for(0, 1, 4, 0, 0, 0));
}

NBF_TEST(shuffle) {
  for (int e = 0; e < 3; e++)
    for (int w = 1; w <= 3; w++)
      check(1000, 32, w, 1, e);
  /* same (seed, epoch) -> same order on every rank and every run;
   * another epoch -> another order */
  acc_sampler_t *a = acc__sampler_new_for(0, 1, 500, 10, 1, 7);
  acc_sampler_t *b = acc__sampler_new_for(0, 1, 500, 10, 1, 7);
  size_t len;
  acc_sampler_set_epoch(a, 3);
  acc_sampler_set_epoch(b, 3);
  ASSERT_TRUE(memcmp(acc_sampler_batch(a, 0, &len), acc_sampler_batch(b, 0, &len),
                     10 * sizeof(size_t)) == 0);
  size_t first[10];
  memcpy(first, acc_sampler_batch(a, 0, &len), sizeof first);
  acc_sampler_set_epoch(b, 4);
  ASSERT_TRUE(memcmp(first, acc_sampler_batch(b, 0, &len), sizeof first) != 0);
  int identity = 1;
  for (int i = 0; i < 10; i++)
    identity &= first[i] == (size_t)i;
  ASSERT_TRUE(!identity);
  acc_sampler_destroy(&a);
  acc_sampler_destroy(&b);
}

NBF_TEST(single) {
  /* the public constructor with acc == NULL is one process */
  acc_sampler_t *s = acc_sampler_new(NULL, 10, 3, 0, 0);
  ASSERT_NOT_NULL(s);
  ASSERT_EQ(acc_sampler_num_batches(s), 4);
  size_t len;
  const size_t *last = acc_sampler_batch(s, 3, &len);
  ASSERT_EQ(len, 3);
  ASSERT_EQ(last[0], 9);
  ASSERT_EQ(last[1], 0);
  ASSERT_EQ(last[2], 1);
  acc_sampler_destroy(&s);
  acc_sampler_destroy(&s); /* NULL-safe */
}

NBF_TEST_MAIN()
