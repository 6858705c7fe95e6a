/*
 * test_collectives.c — every collective × dtype × op on host buffers
 * against a serial reference computed in each rank, with N processes.
 *
 *   test_collectives all_reduce|reduce_scatter|broadcast|all_gather|barrier|
 *                    algorithms DTYPE(f32|f64|f16|bf16|i32|i64) OP(sum|avg|max|min) NPROC
 *
 * `algorithms` forces each of the runtime's Gloo all-reduce algorithms in
 * turn (acc__set_allreduce_algo) and checks them, then the runtime's own
 * choice on a 36 MB buffer (the AllreduceOptions ring).
 *
 * Values are small integers (|v| <= 24) so that sums are exact in every
 * dtype whatever order Gloo's ring adds them in; AVG's reference divides
 * the exact sum exactly as the runtime documents (float division rounded
 * to the dtype; integer division truncates).
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "acc_half.h"
#include "acc_internal.h"
#include "acc_reduce.h"
#include "nbf_param.h"
#include "nbfork.h"
#include "rt_collref.h"
#include "rt_spawn.h"
#include "rt_test.h"

typedef struct {
  const char *coll;
  acc_dtype_t dtype;
  acc_op_t op;
} job_t;

static const size_t COUNTS[] = {1, 7, 1031, 300001};

/* Several process groups one after the other in the same processes (fresh
 * store keys each time; the store moves with rank 0's accelerator). */
static int regroup(int rank, int world) {
  for (int g = 0; g < 3; g++) {
    acc_t *acc = acc_new(NULL);
    ASSERT_NOT_NULL(acc);
    int64_t v = rank + g;
    ASSERT_OK(acc, acc_all_reduce(acc, &v, 1, ACC_I64, ACC_SUM));
    ASSERT_EQ(v, (int64_t)world * (world - 1) / 2 + (int64_t)world * g);
    acc_destroy(&acc);
  }
  return 0;
}

/* Repeated all-reduces and all-gathers of one size from buffers whose
 * addresses follow a different pattern on each rank (rank 0 always the
 * same buffer, the others alternating between two): the runtime must
 * make the same choices (mesh, cached algorithm) on every rank anyway. */
static int addresses(int rank, int world) {
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  const size_t n = 3000;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  float *ga = malloc(n * (size_t)world * sizeof *ga), *gb = malloc(n * (size_t)world * sizeof *gb);
  for (int rep = 0; rep < 6; rep++) {
    int alt = rank > 0 && rep % 2;
    float *buf = alt ? b : a, *out = alt ? gb : ga;
    for (size_t i = 0; i < n; i++)
      buf[i] = (float)(rank + rep + (int)(i % 7));
    ASSERT_OK(acc, acc_all_gather(acc, buf, out, n, ACC_F32));
    for (int r = 0; r < world; r++)
      for (size_t i = 0; i < n; i += 101)
        ASSERT_EQ((int)out[(size_t)r * n + i], r + rep + (int)(i % 7));
    ASSERT_OK(acc, acc_all_reduce(acc, buf, n, ACC_F32, ACC_SUM));
    for (size_t i = 0; i < n; i += 101)
      ASSERT_EQ((int)buf[i], world * (world - 1) / 2 + world * (rep + (int)(i % 7)));
  }
  free(a);
  free(b);
  free(ga);
  free(gb);
  acc_destroy(&acc);
  return 0;
}

/* Every collective × dtype × op (× every root) at odd and even sizes
 * around the shared-memory path's limits (one element, fewer elements
 * than ranks, the naive/large threshold, one slot exactly, several
 * slots), in one group; the path (shared memory or Gloo) must be the one
 * NBFORK_SHM_COLLECTIVES asks for. */
static const size_t MATRIX_COUNTS[] = {1, 2, 7, 1031, 4096, 40001, 262144, 300001};

static int matrix_reduce(acc_t *acc, int rank, int world, acc_dtype_t d, acc_op_t op, size_t n) {
  size_t esz = acc_dtype_size(d), total = n * (size_t)world;
  void *buf = malloc(n * esz), *send = malloc(total * esz), *recv = malloc(n * esz);
  for (size_t i = 0; i < n; i++)
    put(buf, d, i, value(rank, i));
  ASSERT_OK(acc, acc_all_reduce(acc, buf, n, d, op));
  for (size_t i = 0; i < n; i++)
    if (get(buf, d, i) != reference(d, op, world, i))
      NBF_TEST_FAIL("all-reduce %d/%d n=%zu rank %d element %zu: got %.9g want %.9g", (int)d,
                    (int)op, n, rank, i, get(buf, d, i), reference(d, op, world, i));
  for (size_t j = 0; j < total; j++)
    put(send, d, j, value(rank, j));
  ASSERT_OK(acc, acc_reduce_scatter(acc, send, recv, n, d, op));
  for (size_t i = 0; i < n; i++) {
    size_t j = (size_t)rank * n + i;
    if (get(recv, d, i) != reference(d, op, world, j))
      NBF_TEST_FAIL("reduce-scatter %d/%d n=%zu rank %d element %zu: got %.9g want %.9g", (int)d,
                    (int)op, n, rank, i, get(recv, d, i), reference(d, op, world, j));
  }
  free(buf);
  free(send);
  free(recv);
  return 0;
}

/* Fails the test unless block r of the all-gather result `recv` holds
 * rank r's value(r, i) for every rank r; `what` names the call. */
static void expect_gathered(const void *recv, acc_dtype_t d, int rank, int world, size_t n,
                            const char *what) {
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < n; i++)
      if (get(recv, d, (size_t)r * n + i) != value(r, i))
        NBF_TEST_FAIL("%s n=%zu rank %d block %d element %zu: got %.9g want %d", what, n, rank, r,
                      i, get(recv, d, (size_t)r * n + i), value(r, i));
}

static int matrix_move(acc_t *acc, int rank, int world, acc_dtype_t d, size_t n) {
  size_t esz = acc_dtype_size(d);
  void *buf = malloc(n * esz), *recv = malloc(n * esz * (size_t)world);
  for (int root = 0; root < world; root++) {
    for (size_t i = 0; i < n; i++)
      put(buf, d, i, value(rank, i));
    ASSERT_OK(acc, acc_broadcast(acc, buf, n, d, root));
    for (size_t i = 0; i < n; i++)
      if (get(buf, d, i) != value(root, i))
        NBF_TEST_FAIL("broadcast n=%zu root %d rank %d element %zu", n, root, rank, i);
  }
  for (size_t i = 0; i < n; i++)
    put(buf, d, i, value(rank, i));
  ASSERT_OK(acc, acc_all_gather(acc, buf, recv, n, d));
  expect_gathered(recv, d, rank, world, n, "all-gather");
  ASSERT_OK(acc, acc_wait_for_everyone(acc));
  free(buf);
  free(recv);
  return 0;
}

/* nodes = 0: every rank on this node; else ranks declared on `nodes`
 * nodes (NODE_RANK = rank % nodes: interleaved, so that nodes hold
 * ranks that are not contiguous and, for odd worlds, unequal counts). */
static int matrix(int rank, int world, int nodes) {
  char node[16];
  snprintf(node, sizeof node, "%d", nodes ? rank % nodes : 0);
  setenv("NODE_RANK", node, 1);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  const char *want = !nbf_param_NBFORK_SHM_COLLECTIVES() ? "gloo"
                     : nodes > 1 ? "shared memory + gloo between nodes"
                                 : "shared memory";
  ASSERT_EQ_STR(acc__host_path(acc), want);
  for (int d = 0; d < 6; d++)
    for (size_t ci = 0; ci < sizeof MATRIX_COUNTS / sizeof *MATRIX_COUNTS; ci++) {
      size_t n = MATRIX_COUNTS[ci];
      for (int op = 0; op < 4; op++)
        if (matrix_reduce(acc, rank, world, (acc_dtype_t)d, (acc_op_t)op, n) != 0)
          return 1;
      if (matrix_move(acc, rank, world, (acc_dtype_t)d, n) != 0)
        return 1;
    }
  acc_destroy(&acc);
  return 0;
}

/* All-gather of n elements, out of place and in place. */
static int check_all_gather(acc_t *acc, int rank, int world, acc_dtype_t d, size_t n) {
  size_t esz = acc_dtype_size(d);
  void *send = malloc(n * esz), *recv = malloc(n * esz * (size_t)world);
  for (size_t i = 0; i < n; i++)
    put(send, d, i, value(rank, i));
  ASSERT_OK(acc, acc_all_gather(acc, send, recv, n, d));
  expect_gathered(recv, d, rank, world, n, "all-gather");
  /* in place: the own block already sits in recv */
  memset(recv, 0, n * esz * (size_t)world);
  memcpy((char *)recv + (size_t)rank * n * esz, send, n * esz);
  ASSERT_OK(acc, acc_all_gather(acc, (char *)recv + (size_t)rank * n * esz, recv, n, d));
  expect_gathered(recv, d, rank, world, n, "in-place all-gather");
  free(send);
  free(recv);
  return 0;
}

/* Every Gloo all-reduce algorithm of the runtime, forced, on n elements. */
static int forced_algorithms(acc_t *acc, int rank, int world, acc_dtype_t d, acc_op_t op,
                             size_t n) {
  size_t esz = acc_dtype_size(d);
  for (int a = 1; a <= 5; a++) {
    acc__set_allreduce_algo(acc, a);
    void *buf = malloc(n * esz);
    /* twice: the first all-reduce of a buffer runs on the
     * asynchronous mesh, repeated ones the forced algorithm */
    for (int rep = 0; rep < 3; rep++) {
      for (size_t i = 0; i < n; i++)
        put(buf, d, i, value(rank, i));
      ASSERT_OK(acc, acc_all_reduce(acc, buf, n, d, op));
      for (size_t i = 0; i < n; i++)
        if (get(buf, d, i) != reference(d, op, world, i))
          NBF_TEST_FAIL("%s, %zu elements, call %d: element %zu: got %.9g want %.9g",
                        acc__allreduce_algo_name(acc, n * esz), n, rep, i, get(buf, d, i),
                        reference(d, op, world, i));
    }
    free(buf);
  }
  acc__set_allreduce_algo(acc, 0);
  return 0;
}

static int run_rank(int rank, int world, void *arg) {
  const job_t *job = arg;
  if (strcmp(job->coll, "matrix") == 0)
    return matrix(rank, world, 0);
  if (strcmp(job->coll, "matrix_nodes") == 0)
    return matrix(rank, world, 2);
  if (strcmp(job->coll, "regroup") == 0)
    return regroup(rank, world);
  if (strcmp(job->coll, "addresses") == 0)
    return addresses(rank, world);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_rank(acc), rank);
  ASSERT_EQ(acc_world_size(acc), world);
  acc_dtype_t d = job->dtype;
  size_t esz = acc_dtype_size(d);
  for (size_t ci = 0; ci < sizeof COUNTS / sizeof *COUNTS; ci++) {
    size_t n = COUNTS[ci];
    if (strcmp(job->coll, "all_reduce") == 0) {
      void *buf = malloc(n * esz);
      for (size_t i = 0; i < n; i++)
        put(buf, d, i, value(rank, i));
      ASSERT_OK(acc, acc_all_reduce(acc, buf, n, d, job->op));
      for (size_t i = 0; i < n; i++) {
        double want = reference(d, job->op, world, i), got = get(buf, d, i);
        if (want != got)
          NBF_TEST_FAIL("rank %d count %zu element %zu: got %.9g want %.9g", rank, n, i, got, want);
      }
      free(buf);
    } else if (strcmp(job->coll, "reduce_scatter") == 0) {
      size_t total = n * (size_t)world;
      void *send = malloc(total * esz), *recv = malloc(n * esz);
      for (size_t j = 0; j < total; j++)
        put(send, d, j, value(rank, j));
      ASSERT_OK(acc, acc_reduce_scatter(acc, send, recv, n, d, job->op));
      for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)rank * n + i;
        double want = reference(d, job->op, world, j), got = get(recv, d, i);
        if (want != got)
          NBF_TEST_FAIL("rank %d count %zu element %zu: got %.9g want %.9g", rank, n, i, got, want);
      }
      free(send);
      free(recv);
    } else if (strcmp(job->coll, "broadcast") == 0) {
      for (int root = 0; root < world; root++) {
        void *buf = malloc(n * esz);
        for (size_t i = 0; i < n; i++)
          put(buf, d, i, value(rank, i));
        ASSERT_OK(acc, acc_broadcast(acc, buf, n, d, root));
        for (size_t i = 0; i < n; i++)
          if (get(buf, d, i) != value(root, i))
            NBF_TEST_FAIL("rank %d root %d element %zu: got %.9g want %d", rank, root, i,
                          get(buf, d, i), value(root, i));
        free(buf);
      }
    } else if (strcmp(job->coll, "all_gather") == 0) {
      if (check_all_gather(acc, rank, world, d, n) != 0)
        return 1;
    } else if (strcmp(job->coll, "algorithms") == 0) {
      if (forced_algorithms(acc, rank, world, d, job->op, n) != 0)
        return 1;
    } else if (strcmp(job->coll, "barrier") == 0) {
      for (int k = 0; k < 20; k++)
        ASSERT_OK(acc, acc_wait_for_everyone(acc));
    } else {
      NBF_TEST_FAIL("unknown collective %s", job->coll);
    }
  }
  if (strcmp(job->coll, "algorithms") == 0) { /* the runtime's choice for a large buffer */
    const size_t big = 9u << 20;
    float *buf = malloc(big * sizeof(float));
    for (size_t i = 0; i < big; i++)
      buf[i] = (float)value(rank, i);
    ASSERT_OK(acc, acc_all_reduce(acc, buf, big, ACC_F32, ACC_SUM));
    for (size_t i = 0; i < big; i += 997)
      ASSERT_EQ((long long)buf[i], (long long)reference(ACC_F32, ACC_SUM, world, i));
    if (rank == 0)
      printf("36 MiB buffer: %s\n", acc__allreduce_algo_name(acc, big * sizeof(float)));
    free(buf);
  }
  /* bad arguments are refused without communicating */
  ASSERT_EQ(acc_all_reduce(acc, NULL, 4, d, ACC_SUM), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_all_reduce(acc, acc, 1, (acc_dtype_t)42, ACC_SUM), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_broadcast(acc, acc, 1, d, world), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_OK(acc, acc_wait_for_everyone(acc));
  acc_destroy(&acc);
  ASSERT_NULL(acc);
  return 0;
}

/* COLLECTIVE DTYPE OP NPROC (one ctest per combination, added by
 * CMakeLists.txt). */
static void run_job(const char *coll) {
  const char *dt = nbf_test_arg(0), *op = nbf_test_arg(1);
  job_t job = {coll, (acc_dtype_t)parse_dtype(dt), (acc_op_t)parse_op(op)};
  if ((int)job.dtype < 0 || (int)job.op < 0)
    NBF_TEST_FAIL("bad dtype %s or op %s", dt, op);
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(2)), .deadline_s = 90};
  ASSERT_EQ(rt_spawn(&o, run_rank, &job, NULL), 0);
}

/* Many ranks on this node: launch to the first all-reduce grows about
 * linearly (the store exchange is O(N) messages, no full mesh). Before
 * (Gloo's full mesh: N^2 store reads, N^2/2 connections) 48 ranks took
 * 6.3 s and 64 took 17.9 s on the 2-vCPU test VM; now 0.2 s and 0.4 s for
 * 64 and 128. The bound leaves room for a loaded machine. */
/* One accelerator whose host collectives take `path` ("shared memory" or
 * "gloo"): the sum of the ranks, checked; 0 (a failure exits). */
static int sum_ranks_on(int rank, int world, const char *path) {
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ_STR(acc__host_path(acc), path);
  int64_t v = rank;
  ASSERT_OK(acc, acc_all_reduce(acc, &v, 1, ACC_I64, ACC_SUM));
  ASSERT_EQ(v, (int64_t)world * (world - 1) / 2);
  acc_destroy(&acc);
  return 0;
}

static int rendezvous_rank(int rank, int world, void *arg) {
  (void)arg;
  return sum_ranks_on(rank, world, "shared memory");
}

NBF_TEST_P(rendezvous) {
  int n = atoi(nbf_test_arg(0));
  rt_spawn_opts_t o = {.world = n, .deadline_s = 100};
  double t0 = rt_now();
  ASSERT_EQ(rt_spawn(&o, rendezvous_rank, NULL, NULL), 0);
  double dt = rt_now() - t0;
  printf("%d ranks: %.3f s from the first fork to the last exit\n", n, dt);
  ASSERT_DBL_LT(dt, n / 8.0);
}

/* Half types are accumulated in f32 and rounded once: rank 0 holds 256,
 * the others 1. In bf16 (8-bit significand: steps of 2 above 256) a
 * pairwise sum rounds 256 + 1 back to 256 at every step; in f32 the sum
 * is 256 + (N-1), rounded once: 258 for 3 ranks. f16 (steps of 0.25 at
 * 256) holds 258 either way; its case checks the same f32 path with
 * 2048 + 1 + 1 (steps of 2 above 2048). Shared memory only (Gloo's
 * kernels fold two at a time, in the dtype). */
static int half_rank(int rank, int world, void *arg) {
  (void)arg;
  (void)world;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ_STR(acc__host_path(acc), "shared memory");
  const size_t n = 100000; /* naive and reduce-scatter + all-gather */
  uint16_t *b = malloc(n * 2), *h = malloc(n * 2);
  for (size_t len = 1000; len <= n; len *= 100) {
    for (size_t i = 0; i < len; i++) {
      b[i] = acc_f32_to_bf16(rank == 0 ? 256.0f : 1.0f);
      h[i] = acc_f32_to_f16(rank == 0 ? 2048.0f : 1.0f);
    }
    ASSERT_OK(acc, acc_all_reduce(acc, b, len, ACC_BF16, ACC_SUM));
    ASSERT_OK(acc, acc_all_reduce(acc, h, len, ACC_F16, ACC_SUM));
    for (size_t i = 0; i < len; i++) {
      ASSERT_EQ((int)acc_bf16_to_f32(b[i]), 258);
      ASSERT_EQ((int)acc_f16_to_f32(h[i]), 2050);
    }
  }
  free(b);
  free(h);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(half_types_accumulate_in_f32) {
  rt_spawn_opts_t o = {.world = 3, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, half_rank, NULL, NULL), 0);
}

/* Differential: the shared-memory all-reduce (naive, then reduce-scatter
 * + all-gather by slots, the own block reduced and copied out in fused
 * pieces) gives the bits of acc_reduce_many over the whole buffers in
 * member order, the order contract, for values whose sums round (random
 * floats, integers that wrap), at sizes around the naive limit, the
 * pieces and several slots. */
static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static void fill_random(void *buf, acc_dtype_t d, size_t n, int rank, int call) {
  for (size_t i = 0; i < n; i++) {
    uint64_t h = mix(((uint64_t)call << 40) ^ ((uint64_t)rank << 32) ^ i);
    if (d == ACC_I32)
      ((int32_t *)buf)[i] = (int32_t)(uint32_t)h;
    else /* [-1000, 1000) with every mantissa bit used */
      put(buf, d, i, ((double)(h >> 11) / 9007199254740992.0 - 0.5) * 2000.0);
  }
}

static int order_rank(int rank, int world, void *arg) {
  (void)arg;
  static const size_t counts[] = {3, 16385, 65536 + 5, 3 * 262144 + 1};
  static const acc_dtype_t dts[] = {ACC_F32, ACC_F64, ACC_F16, ACC_BF16, ACC_I32};
  static const acc_op_t ops[] = {ACC_SUM, ACC_AVG, ACC_MAX};
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ_STR(acc__host_path(acc), "shared memory");
  int call = 0;
  for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
    for (size_t di = 0; di < sizeof dts / sizeof *dts; di++)
      for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++, call++) {
        size_t n = counts[ci], bytes = n * acc_dtype_size(dts[di]);
        unsigned char *buf = malloc(bytes), *want = malloc(bytes), *all = malloc(bytes * world);
        const void *in[8];
        for (int r = 0; r < world; r++) {
          fill_random(all + (size_t)r * bytes, dts[di], n, r, call);
          in[r] = all + (size_t)r * bytes;
        }
        memcpy(buf, in[rank], bytes);
        ASSERT_OK(acc, acc_all_reduce(acc, buf, n, dts[di], ops[oi]));
        acc_reduce_many(want, in, world, n, dts[di], ops[oi], ops[oi] == ACC_AVG ? world : 0);
        for (size_t i = 0; i < n; i++)
          if (memcmp(buf + i * acc_dtype_size(dts[di]), want + i * acc_dtype_size(dts[di]),
                     acc_dtype_size(dts[di])) != 0)
            NBF_TEST_FAIL("dtype %d op %d n=%zu rank %d element %zu: got %.17g want %.17g",
                          (int)dts[di], (int)ops[oi], n, rank, i, get(buf, dts[di], i),
                          get(want, dts[di], i));
        free(buf);
        free(want);
        free(all);
      }
  acc_destroy(&acc);
  return 0;
}

NBF_TEST_P(order_bit_equal_to_one_shot_reduction) {
  rt_spawn_opts_t o = {.world = atoi(nbf_test_arg(0)), .deadline_s = 120};
  ASSERT_TRUE(o.world >= 2 && o.world <= 8);
  ASSERT_EQ(rt_spawn(&o, order_rank, NULL, NULL), 0);
}

/* Waiting that yields: this rank, pinned to CPU 0 when `one_cpu` (both
 * ranks then share it, so a rank that waits by spinning or polling holds
 * the CPU its peer needs and is switched out), joins a group whose host
 * path must be `path` and runs 200 all-reduces of 4 KiB, checked. */
static acc_t *two_hundred_all_reduces(int rank, int world, int one_cpu, const char *path) {
  if (one_cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  }
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ_STR(acc__host_path(acc), path);
  float buf[1024];
  for (int k = 0; k < 200; k++) {
    for (size_t i = 0; i < 1024; i++)
      buf[i] = (float)value(rank, i);
    ASSERT_OK(acc, acc_all_reduce(acc, buf, 1024, ACC_F32, ACC_SUM));
    for (size_t i = 0; i < 1024; i++)
      ASSERT_EQ((long long)buf[i], (long long)reference(ACC_F32, ACC_SUM, world, i));
  }
  return acc;
}

/* Gloo's synchronous mesh (acc_gloo_poll.h), NBFORK_SHM_COLLECTIVES=0.
 * "one_cpu": a polling rank is preempted, so the governor must sleep in
 * blocking reads for a while (some calls slept) and probe again later
 * (more than one polled). "off", with NBFORK_GLOO_BUSY_POLL=0: no call
 * may poll. Prints the counts. */
static int poll_rank(int rank, int world, void *arg) {
  const char *how = arg;
  int one_cpu = strcmp(how, "one_cpu") == 0;
  acc_t *acc = two_hundred_all_reduces(rank, world, one_cpu, "gloo");
  long polled, slept;
  acc__gloo_poll_counts(acc, &polled, &slept);
  printf("rank %d (%s): %ld collectives polled, %ld slept\n", rank, how, polled, slept);
  ASSERT_GT(polled + slept, 150); /* the synchronous mesh ran them */
  if (one_cpu) {
    ASSERT_GT(slept, 0);
    ASSERT_GT(polled, 1);
  } else {
    ASSERT_EQ(polled, 0);
  }
  acc_destroy(&acc);
  return 0;
}

/* The same on shared memory, on one CPU: a spin that yields to the peer
 * is switched out, so later waits sleep at once (some did); on two CPUs
 * with nothing else runnable none need to, which a loaded test machine
 * cannot promise: not asserted. */
static int shm_spin_rank(int rank, int world, void *arg) {
  (void)arg;
  acc_t *acc = two_hundred_all_reduces(rank, world, 1, "shared memory");
  long at_once = acc__shm_waits_slept_at_once(acc);
  printf("rank %d: %ld waits slept at once\n", rank, at_once);
  ASSERT_GT(at_once, 0);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(shm_spin_backs_off_when_switched_out) {
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 100};
  ASSERT_EQ(rt_spawn(&o, shm_spin_rank, NULL, NULL), 0);
}

NBF_TEST_P(gloo_poll) {
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 100};
  ASSERT_EQ(rt_spawn(&o, poll_rank, (void *)nbf_test_arg(0), NULL), 0);
}

/* One rank cannot create its workspace (its file size limit is below the
 * workspace's: ftruncate fails with EFBIG): every rank learns it from the
 * verdict and the whole group runs on Gloo's mesh, correctly. */
static int fallback_rank(int rank, int world, void *arg) {
  (void)arg;
  if (rank == 1) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 << 20, 1 << 20};
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
  }
  return sum_ranks_on(rank, world, "gloo");
}

NBF_TEST(rank_without_workspace_makes_everyone_use_gloo) {
  rt_spawn_opts_t o = {.world = 3, .deadline_s = 60};
  ASSERT_EQ(rt_spawn(&o, fallback_rank, NULL, NULL), 0);
}

#define COLLECTIVE_CASE(name)                                                                      \
  NBF_TEST_P(name) {                                                                               \
    run_job(#name);                                                                                \
  }
COLLECTIVE_CASE(all_reduce)
COLLECTIVE_CASE(reduce_scatter)
COLLECTIVE_CASE(broadcast)
COLLECTIVE_CASE(all_gather)
COLLECTIVE_CASE(barrier)
COLLECTIVE_CASE(algorithms)
COLLECTIVE_CASE(regroup)
COLLECTIVE_CASE(addresses)
COLLECTIVE_CASE(matrix)
COLLECTIVE_CASE(matrix_nodes)

NBF_TEST_MAIN()
