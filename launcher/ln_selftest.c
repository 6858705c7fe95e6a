/*
 * ln_selftest.c — `nbfork test` (Accelerate's `accelerate test`): launch
 * workers that check the rendezvous and every collective for every
 * dtype against values computed locally, then end with
 * "Test is a success!" or the failure.
 *
 * With a GPU (acc_device >= 0) the same checks run again on device
 * buffers, which the runtime hands to NCCL.
 *
 * Rank r contributes v(r, i) = r + 1 + i % 8 (exact in every dtype,
 * f16 and bf16 included, for world sizes up to 64), so each result has a
 * closed form: SUM = W(1 + i%8) + W(W-1)/2, MAX = W + i%8, MIN = 1 + i%8.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ln_cmd.h"
#include "nbfork.h"

#define N 1031 /* odd: no collective gets a size that divides evenly */

/* The GPU path: the same checks on device buffers (NCCL), through the
 * CUDA runtime libnbfork is linked with when built with CUDA, looked up
 * at run time so this file builds without CUDA headers. */
typedef struct {
  int (*malloc_)(void **, size_t);
  int (*free_)(void *);
  int (*memcpy_)(void *, const void *, size_t, int); /* kind 1 = H2D, 2 = D2H */
  void *buf, *all;                                   /* device mirrors; NULL = host path */
} dev_t_;

static int dev_open(dev_t_ *d, size_t bytes_buf, size_t bytes_all) {
  memset(d, 0, sizeof *d);
  d->malloc_ = (int (*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
  d->free_ = (int (*)(void *))dlsym(RTLD_DEFAULT, "cudaFree");
  d->memcpy_ = (int (*)(void *, const void *, size_t, int))dlsym(RTLD_DEFAULT, "cudaMemcpy");
  if (!d->malloc_ || !d->free_ || !d->memcpy_ || d->malloc_(&d->buf, bytes_buf) ||
      d->malloc_(&d->all, bytes_all))
    return -1;
  return 0;
}

static void dev_close(dev_t_ *d) {
  if (d->free_ && d->buf)
    d->free_(d->buf);
  if (d->free_ && d->all)
    d->free_(d->all);
  memset(d, 0, sizeof *d);
}

/* Where a collective reads and writes: the host buffer, or (GPU path)
 * its device mirror after copying the host bytes in. */
static void *stage_in(const dev_t_ *d, void *dev, const void *host, size_t bytes) {
  if (!d || !dev)
    return (void *)host;
  d->memcpy_(dev, host, bytes, 1);
  return dev;
}

static void stage_out(const dev_t_ *d, void *host, const void *dev, size_t bytes) {
  if (d && dev)
    d->memcpy_(host, dev, bytes, 2);
}

static double get(const acc_t *acc, const void *b, acc_dtype_t t, size_t i) {
  float f;
  switch (t) {
  case ACC_F32:
    return ((const float *)b)[i];
  case ACC_F64:
    return ((const double *)b)[i];
  case ACC_I32:
    return ((const int32_t *)b)[i];
  case ACC_I64:
    return (double)((const int64_t *)b)[i];
  case ACC_F16:
    acc_from_f16(acc, &f, (const uint16_t *)b + i, 1);
    return f;
  default:
    acc_from_bf16(acc, &f, (const uint16_t *)b + i, 1);
    return f;
  }
}

static void put(const acc_t *acc, void *b, acc_dtype_t t, size_t i, double v) {
  float f = (float)v;
  switch (t) {
  case ACC_F32:
    ((float *)b)[i] = f;
    break;
  case ACC_F64:
    ((double *)b)[i] = v;
    break;
  case ACC_I32:
    ((int32_t *)b)[i] = (int32_t)v;
    break;
  case ACC_I64:
    ((int64_t *)b)[i] = (int64_t)v;
    break;
  case ACC_F16:
    acc_to_f16(acc, (uint16_t *)b + i, &f, 1);
    break;
  default:
    acc_to_bf16(acc, (uint16_t *)b + i, &f, 1);
    break;
  }
}

static double expect(acc_op_t op, int w, size_t i, int is_int) {
  double base = (double)(i % 8);
  double sum = w * (1 + base) + w * (w - 1) / 2.0;
  switch (op) {
  case ACC_SUM:
    return sum;
  case ACC_AVG:
    return is_int ? floor(sum / w) : sum / w;
  case ACC_MAX:
    return w + base;
  default:
    return 1 + base;
  }
}

static const char *const DT[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
static const char *const OP[] = {"sum", "avg", "max", "min"};

/* One dtype through all-reduce (every op), broadcast, all-gather and
 * reduce-scatter; on device mirrors when d is not NULL. Returns 0 or -1
 * after printing what differed. */
static int check_dtype(acc_t *acc, acc_dtype_t t, const dev_t_ *d) {
  int w = acc_world_size(acc), r = acc_rank(acc), is_int = t == ACC_I32 || t == ACC_I64;
  size_t es = acc_dtype_size(t), nb = N * es, na = nb * (size_t)w;
  char *buf = malloc(nb + na), *all = buf + nb;
  int bad = !buf;
  void *db = d ? d->buf : NULL, *da = d ? d->all : NULL;
  for (int op = ACC_SUM; op <= ACC_MIN && !bad; op++) {
    for (size_t i = 0; i < N; i++)
      put(acc, buf, t, i, r + 1 + (double)(i % 8));
    if (acc_all_reduce(acc, stage_in(d, db, buf, nb), N, t, (acc_op_t)op) != ACC_OK)
      return fprintf(stderr, "rank %d: all_reduce %s %s failed: %s\n", r, DT[t], OP[op],
                     acc_last_error(acc)),
             free(buf), -1;
    stage_out(d, buf, db, nb);
    for (size_t i = 0; i < N && !bad; i++) {
      double want = expect((acc_op_t)op, w, i, is_int), got = get(acc, buf, t, i);
      if (fabs(got - want) > (t == ACC_F16 || t == ACC_BF16 ? 0.02 * want : 1e-6))
        bad = fprintf(stderr, "rank %d: all_reduce %s %s: element %zu is %g, expected %g\n", r,
                      DT[t], OP[op], i, got, want);
    }
  }
  for (size_t i = 0; i < N && !bad; i++)
    put(acc, buf, t, i, r == 0 ? 3 + (double)(i % 8) : 0);
  bad = bad || acc_broadcast(acc, stage_in(d, db, buf, nb), N, t, 0) != ACC_OK;
  stage_out(d, buf, db, nb);
  for (size_t i = 0; i < N && !bad; i++)
    if (get(acc, buf, t, i) != 3 + (double)(i % 8))
      bad = fprintf(stderr, "rank %d: broadcast %s: element %zu wrong\n", r, DT[t], i);
  for (size_t i = 0; i < N && !bad; i++)
    put(acc, buf, t, i, r + 1);
  bad = bad ||
        acc_all_gather(acc, stage_in(d, db, buf, nb), stage_in(d, da, all, na), N, t) != ACC_OK;
  stage_out(d, all, da, na);
  for (size_t i = 0; i < N * (size_t)w && !bad; i++)
    if (get(acc, all, t, i) != (double)(i / N + 1))
      bad = fprintf(stderr, "rank %d: all_gather %s: element %zu wrong\n", r, DT[t], i);
  for (size_t i = 0; i < N * (size_t)w && !bad; i++)
    put(acc, all, t, i, (double)(i / N + 1)); /* block b holds b+1 on every rank */
  bad = bad || acc_reduce_scatter(acc, stage_in(d, da, all, na), stage_in(d, db, buf, nb), N, t,
                                  ACC_SUM) != ACC_OK;
  stage_out(d, buf, db, nb);
  for (size_t i = 0; i < N && !bad; i++)
    if (get(acc, buf, t, i) != (double)(w * (r + 1)))
      bad = fprintf(stderr, "rank %d: reduce_scatter %s: element %zu is %g, expected %d\n", r,
                    DT[t], i, get(acc, buf, t, i), w * (r + 1));
  if (bad && acc_last_error(acc)[0])
    fprintf(stderr, "rank %d: %s\n", r, acc_last_error(acc));
  free(buf);
  return bad ? -1 : 0;
}

/* Every dtype on the host (Gloo) and, with a GPU, on the device (NCCL). */
static int check_all(acc_t *acc, const char **gpu_path) {
  int bad = 0;
  for (int t = ACC_F32; t <= ACC_I64 && !bad; t++)
    bad = check_dtype(acc, (acc_dtype_t)t, NULL) != 0;
  *gpu_path = "(no GPU)";
  if (bad || acc_device(acc) < 0)
    return bad;
  dev_t_ d;
  size_t most = N * sizeof(double) * (size_t)acc_world_size(acc);
  if (dev_open(&d, N * sizeof(double), most) != 0) {
    fprintf(stderr, "rank %d: cannot allocate device buffers for the GPU path\n", acc_rank(acc));
    dev_close(&d);
    return 1;
  }
  for (int t = ACC_F32; t <= ACC_I64 && !bad; t++)
    bad = check_dtype(acc, (acc_dtype_t)t, &d) != 0;
  dev_close(&d);
  *gpu_path = "and GPU buffers (NCCL)";
  return bad;
}

/* The worker body of `nbfork test`. */
int ln_selftest_worker(void) {
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1; /* acc_new said why on stderr */
  const char *gpu_path = "";
  int bad = check_all(acc, &gpu_path);
  bad = bad || acc_wait_for_everyone(acc) != ACC_OK;
  if (!bad && acc_is_main_process(acc))
    printf("rendezvous, barrier, all_reduce (sum avg max min), broadcast, all_gather, "
           "reduce_scatter: f32 f64 f16 bf16 i32 i64 correct on %d processes, host buffers "
           "(Gloo) %s\n",
           acc_world_size(acc), gpu_path);
  acc_destroy(&acc);
  return bad;
}

int ln_cmd_test(int argc, char **argv) {
  /* the launch options of `nbfork launch`, with the check as PROGRAM */
  char **args = calloc((size_t)argc + 1, sizeof *args);
  if (!args)
    return LN_EXIT_FAILED;
  for (int i = 1; i < argc; i++)
    args[i - 1] = argv[i];
  args[argc - 1] = "nbfork-selftest";
  ln_cli_t c;
  ln_cli_init(&c);
  int prog = ln_cmd_settings("test", &c, argc, args);
  if (prog >= 0 && prog != argc - 1) {
    fprintf(stderr, "nbfork test: error: takes launch options only (e.g. --num_processes 2)\n");
    prog = -1;
  }
  free(args);
  if (prog < 0)
    return LN_EXIT_USAGE;
  if (!ln_cli_given(&c, "num_processes") && c.o.num_processes * c.o.num_nodes < 2)
    c.o.num_processes = 2; /* a collective check needs two ranks */
  printf("Running: nbfork test with %d process%s per machine\n", c.o.num_processes,
         c.o.num_processes == 1 ? "" : "es");
  fflush(stdout);
  int rc = ln_cmd_run(&c, ln_selftest_worker);
  printf("%s\n", rc == 0 ? "Test is a success!" : "Test failed: see the errors above.");
  return rc;
}
