/*
 * test_rng.c — seeding and the runtime RNG (xoshiro256** / splitmix64).
 *   test_rng determinism|distribution|per_rank
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

NBF_TEST(determinism) {
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  double a[100], b[100];
  acc_set_seed(acc, 42, 0);
  int r1 = rand();
  for (int i = 0; i < 100; i++)
    a[i] = acc_rand_uniform(acc);
  acc_set_seed(acc, 42, 0);
  ASSERT_EQ(rand(), r1); /* libc's rand() is seeded too */
  for (int i = 0; i < 100; i++)
    b[i] = acc_rand_uniform(acc);
  ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
  acc_set_seed(acc, 43, 0);
  ASSERT_TRUE(acc_rand_uniform(acc) != a[0]);
  acc_destroy(&acc);
  /* the config seed is applied at creation */
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.seed = 42;
  acc = acc_new(&cfg);
  ASSERT_TRUE(acc_rand_uniform(acc) == a[0]);
  acc_destroy(&acc);
}

NBF_TEST(distribution) {
  acc_set_seed(NULL, 7, 0);
  const int N = 200000;
  double s = 0, s2 = 0, n1 = 0, n2 = 0;
  for (int i = 0; i < N; i++) {
    double u = acc_rand_uniform(NULL);
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
    s += u;
    s2 += u * u;
    double z = acc_rand_normal(NULL);
    n1 += z;
    n2 += z * z;
  }
  ASSERT_NEAR(s / N, 0.5, 0.005);
  ASSERT_NEAR(s2 / N - (s / N) * (s / N), 1.0 / 12, 0.002);
  ASSERT_NEAR(n1 / N, 0.0, 0.01);
  ASSERT_NEAR(n2 / N, 1.0, 0.02);
}

static int per_rank_fn(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  double v[2][4];
  acc_set_seed(acc, 5, 0);
  v[0][0] = acc_rand_uniform(acc);
  acc_set_seed(acc, 5, 1);
  v[1][0] = acc_rand_uniform(acc);
  double all[2][4];
  ASSERT_OK(acc, acc_all_gather(acc, v[0], all[0], 1, ACC_F64));
  ASSERT_OK(acc, acc_all_gather(acc, v[1], all[1], 1, ACC_F64));
  ASSERT_TRUE(all[0][0] == all[0][1]); /* same seed everywhere */
  ASSERT_TRUE(all[1][0] != all[1][1]); /* seed + rank */
  ASSERT_TRUE(all[1][0] == all[0][0]); /* rank 0: seed + 0 */
  (void)rank;
  (void)world;
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(per_rank) {
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 30};
  ASSERT_EQ(rt_spawn(&o, per_rank_fn, NULL, NULL), 0);
}

NBF_TEST_MAIN()
