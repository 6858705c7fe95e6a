/*
 * test_metrics.c — acc_gather_for_metrics over whole epochs with N
 * processes: the number of gathered samples equals the dataset size
 * exactly and every sample is seen exactly once (padding dropped).
 *   test_metrics gather_for_metrics NPROC
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

static int run_rank(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  const size_t ns[] = {1, 5, 10, 64, 97, 1000};
  const size_t bs[] = {1, 4, 7, 32};
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t b = 0; b < sizeof bs / sizeof *bs; b++)
      for (int shuffle = 0; shuffle <= 1; shuffle++) {
        size_t n = ns[a], B = bs[b];
        acc_sampler_t *s = acc_sampler_new(acc, n, B, shuffle, 99);
        ASSERT_NOT_NULL(s);
        acc_sampler_set_epoch(s, 1);
        size_t nb = acc_sampler_num_batches(s), got = 0;
        int64_t *vals = malloc(B * sizeof *vals), *out = malloc(B * (size_t)world * sizeof *out);
        unsigned *seen = calloc(n, sizeof *seen);
        for (size_t k = 0; k < nb; k++) {
          size_t len;
          const size_t *idx = acc_sampler_batch(s, k, &len);
          for (size_t i = 0; i < len; i++)
            vals[i] = (int64_t)idx[i]; /* "predictions" = sample ids */
          size_t m =
              acc_gather_for_metrics(acc, vals, len, out, k + 1 == nb, acc_sampler_dataset_size(s));
          ASSERT_NE(m, (size_t)-1);
          ASSERT_LE(m, len * (size_t)world);
          for (size_t i = 0; i < m; i++) {
            ASSERT_LT(out[i], (int64_t)n);
            seen[out[i]]++;
          }
          got += m;
        }
        if (got != n)
          NBF_TEST_FAIL("rank %d n=%zu batch=%zu shuffle=%d: gathered %zu samples, want %zu", rank,
                        n, B, shuffle, got, n);
        for (size_t i = 0; i < n; i++)
          if (seen[i] != 1)
            NBF_TEST_FAIL("rank %d n=%zu batch=%zu: sample %zu seen %u times", rank, n, B, i,
                          seen[i]);
        free(vals);
        free(out);
        free(seen);
        acc_sampler_destroy(&s);
      }
  acc_destroy(&acc);
  return 0;
}

/* gather_for_metrics NPROC */
NBF_TEST_P(gather_for_metrics) {
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(0)), .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, run_rank, NULL, NULL), 0);
}

NBF_TEST_MAIN()
