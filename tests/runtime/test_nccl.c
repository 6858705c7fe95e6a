/*
 * test_nccl.c — collectives on CUDA device buffers through NCCL and the
 * stream contract (acc_set_stream). The GPU cases exit 77 (ctest SKIP)
 * when nbfork was built without CUDA or no GPU is visible. They run 2
 * ranks whatever the GPU count: with one GPU the ranks share it, each
 * with its own NCCL_HOSTID (NBFORK_SHARE_GPU), since NCCL refuses two
 * ranks on one device within a host.
 *
 *   test_nccl all_reduce | stream_order | set_stream_arguments
 *   test_nccl collective COLL DTYPE OP NPROC   (COLL: all_reduce,
 *             reduce_scatter, broadcast, all_gather)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_nccl.h"
#include "nbfork.h"
#include "rt_collref.h"
#include "rt_cudart.h"
#include "rt_spawn.h"
#include "rt_test.h"

static int sum_rank(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_TRUE(acc_device(acc) >= 0);
  const size_t n = 1 << 20;
  float *h = malloc(n * sizeof(float)), *d = NULL;
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank + 1);
  ASSERT_EQ(p_malloc((void **)&d, n * sizeof(float)), 0);
  ASSERT_EQ(p_memcpy(d, h, n * sizeof(float), 1 /* H2D */), 0);
  ASSERT_OK(acc, acc_all_reduce(acc, d, n, ACC_F32, ACC_SUM));
  ASSERT_EQ(p_memcpy(h, d, n * sizeof(float), 2 /* D2H */), 0);
  float want = (float)(world * (world + 1) / 2);
  for (size_t i = 0; i < n; i += 4099)
    ASSERT_NEAR(h[i], want, 0);
  p_free(d);
  free(h);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(all_reduce) {
  int ngpu = rt_gpu_ranks(2);
  rt_spawn_opts_t o = {
      .world = ngpu > 2 ? (ngpu > 8 ? 8 : ngpu) : 2, .deadline_s = 120, .timeout_s = "60"};
  ASSERT_EQ(rt_spawn(&o, sum_rank, NULL, NULL), 0);
  printf("nccl all_reduce: %d ranks on %d GPU(s)\n", o.world, ngpu);
}

/* Each rank enqueues, on `stream`, ~5 ms of large memsets and then the
 * memset that writes the buffer to reduce, and calls acc_all_reduce at
 * once: only an all-reduce ordered after the stream sees 0x01010101 on
 * every rank (unordered, NCCL's stream reads the zeros written before). */
static void memset_then_reduce(acc_t *acc, void *stream, int world, int32_t *d, size_t n, void *big,
                               size_t big_bytes) {
  ASSERT_EQ(p_memset(d, 0, n * sizeof(int32_t)), 0);
  ASSERT_EQ(p_device_synchronize(), 0);
  ASSERT_OK(acc, acc_set_stream(acc, stream));
  ASSERT_TRUE(acc_get_stream(acc) == stream);
  for (int k = 0; k < 20; k++)
    ASSERT_EQ(p_memset_async(big, k, big_bytes, stream), 0);
  ASSERT_EQ(p_memset_async(d, 0x01, n * sizeof(int32_t), stream), 0);
  ASSERT_OK(acc, acc_all_reduce(acc, d, n, ACC_I32, ACC_SUM));
  /* blocking: the result is there without synchronizing the stream */
  int32_t *h = malloc(n * sizeof(int32_t));
  ASSERT_EQ(p_memcpy(h, d, n * sizeof(int32_t), 2), 0);
  for (size_t i = 0; i < n; i += 1021)
    if (h[i] != world * 0x01010101)
      NBF_TEST_FAIL("stream %p, element %zu: %#x, want %#x: the all-reduce did not wait for "
                    "the memset on the caller's stream",
                    stream, i, (unsigned)h[i], (unsigned)(world * 0x01010101));
  free(h);
}

static int stream_rank(int rank, int world, void *arg) {
  (void)rank, (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_TRUE(acc_device(acc) >= 0);
  const size_t n = 1 << 20, big_bytes = (size_t)512 << 20;
  int32_t *d = NULL;
  void *big = NULL, *stream = NULL;
  ASSERT_EQ(p_malloc((void **)&d, n * sizeof(int32_t)), 0);
  ASSERT_EQ(p_malloc(&big, big_bytes), 0);
  ASSERT_EQ(p_stream_create(&stream, 1 /* cudaStreamNonBlocking */), 0);
  /* warm up: the first collective creates the communicator, whose set-up
   * outlasts the ~5 ms of memsets, so an unordered all-reduce would pass
   * it; the cases below each run on a ready communicator */
  ASSERT_OK(acc, acc_all_reduce(acc, d, n, ACC_I32, ACC_SUM));
  ASSERT_EQ(p_device_synchronize(), 0);
  memset_then_reduce(acc, stream, world, d, n, big, big_bytes);
  memset_then_reduce(acc, NULL, world, d, n, big, big_bytes); /* the default stream */
  ASSERT_OK(acc, acc_set_stream(acc, NULL));
  p_stream_destroy(stream);
  p_free(big);
  p_free(d);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(stream_order) {
  rt_gpu_ranks(2);
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 120, .timeout_s = "60"};
  ASSERT_EQ(rt_spawn(&o, stream_rank, NULL, NULL), 0);
}

/* Runs everywhere: the contract's argument errors. */
NBF_TEST(set_stream_arguments) {
  ASSERT_EQ(acc_set_stream(NULL, NULL), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(strstr(acc_last_error(NULL), "acc is NULL") != NULL);
  ASSERT_TRUE(acc_get_stream(NULL) == NULL);
  setenv("ACCELERATE_USE_CPU", "1", 1);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_TRUE(acc_get_stream(acc) == NULL);
  ASSERT_OK(acc, acc_set_stream(acc, NULL));
  acc_destroy(&acc);
}

typedef struct {
  const char *coll;
  acc_dtype_t dtype;
  acc_op_t op;
} job_t;

static void *to_device(const void *h, size_t bytes) {
  void *d = NULL;
  ASSERT_EQ(p_malloc(&d, bytes ? bytes : 1), 0);
  if (h)
    ASSERT_EQ(p_memcpy(d, h, bytes, 1), 0);
  return d;
}

static void from_device(void *h, void *d, size_t bytes) {
  ASSERT_EQ(p_memcpy(h, d, bytes, 2), 0);
  p_free(d);
}

/* One collective on device buffers of n elements against the host
 * reference (rt_collref.h). */
static void check_one(acc_t *acc, const job_t *job, int rank, int world, size_t n) {
  const acc_dtype_t d = job->dtype;
  const size_t esz = acc_dtype_size(d), total = n * (size_t)world;
  void *h = malloc(total * esz), *out = malloc(total * esz);
  for (size_t i = 0; i < total; i++)
    put(h, d, i, value(rank, i));
  if (strcmp(job->coll, "all_reduce") == 0) {
    void *dv = to_device(h, n * esz);
    ASSERT_OK(acc, acc_all_reduce(acc, dv, n, d, job->op));
    from_device(out, dv, n * esz);
    for (size_t i = 0; i < n; i++)
      if (get(out, d, i) != reference(d, job->op, world, i))
        NBF_TEST_FAIL("count %zu element %zu: got %.9g want %.9g", n, i, get(out, d, i),
                      reference(d, job->op, world, i));
  } else if (strcmp(job->coll, "reduce_scatter") == 0) {
    void *ds = to_device(h, total * esz), *dr = to_device(NULL, n * esz);
    ASSERT_OK(acc, acc_reduce_scatter(acc, ds, dr, n, d, job->op));
    p_free(ds);
    from_device(out, dr, n * esz);
    for (size_t i = 0; i < n; i++) {
      size_t j = (size_t)rank * n + i;
      if (get(out, d, i) != reference(d, job->op, world, j))
        NBF_TEST_FAIL("count %zu element %zu: got %.9g want %.9g", n, i, get(out, d, i),
                      reference(d, job->op, world, j));
    }
  } else if (strcmp(job->coll, "broadcast") == 0) {
    for (int root = 0; root < world; root++) {
      void *dv = to_device(h, n * esz);
      ASSERT_OK(acc, acc_broadcast(acc, dv, n, d, root));
      from_device(out, dv, n * esz);
      for (size_t i = 0; i < n; i++)
        if (get(out, d, i) != value(root, i))
          NBF_TEST_FAIL("root %d element %zu: got %.9g want %d", root, i, get(out, d, i),
                        value(root, i));
    }
  } else if (strcmp(job->coll, "all_gather") == 0) {
    void *ds = to_device(h, n * esz), *dr = to_device(NULL, total * esz);
    ASSERT_OK(acc, acc_all_gather(acc, ds, dr, n, d));
    p_free(ds);
    from_device(out, dr, total * esz);
    for (int r = 0; r < world; r++)
      for (size_t i = 0; i < n; i++)
        if (get(out, d, (size_t)r * n + i) != value(r, i))
          NBF_TEST_FAIL("block %d element %zu: got %.9g want %d", r, i,
                        get(out, d, (size_t)r * n + i), value(r, i));
  } else {
    NBF_TEST_FAIL("unknown collective %s", job->coll);
  }
  free(h);
  free(out);
}

static int collective_rank(int rank, int world, void *arg) {
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_TRUE(acc_device(acc) >= 0);
  static const size_t counts[] = {1, 7, 1031, 300001};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
    check_one(acc, arg, rank, world, counts[c]);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(collective) {
  const char *coll = nbf_test_arg(0), *dt = nbf_test_arg(1), *op = nbf_test_arg(2);
  job_t job = {coll, (acc_dtype_t)parse_dtype(dt), (acc_op_t)parse_op(op)};
  if ((int)job.dtype < 0 || (int)job.op < 0)
    NBF_TEST_FAIL("bad dtype %s or op %s", dt, op);
  int world = atoi(nbf_test_arg(3));
  rt_gpu_ranks(world);
  rt_spawn_opts_t o = {.world = world, .deadline_s = 110, .timeout_s = "60"};
  ASSERT_EQ(rt_spawn(&o, collective_rank, &job, NULL), 0);
}

NBF_TEST_MAIN()
