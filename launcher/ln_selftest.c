/*
 * ln_selftest.c — `nbfork test` (Accelerate's `accelerate test`): launch
 * workers that check the rendezvous and every collective for every
 * dtype against values computed locally, then end with
 * "Test is a success!" or the failure.
 *
 * Rank r contributes v(r, i) = r + 1 + i % 8 (exact in every dtype,
 * f16 and bf16 included, for world sizes up to 64), so each result has a
 * closed form: SUM = W(1 + i%8) + W(W-1)/2, MAX = W + i%8, MIN = 1 + i%8.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ln_cmd.h"
#include "nbfork.h"

#define N 1031 /* odd: no collective gets a size that divides evenly */

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
 * reduce-scatter. Returns 0 or -1 after printing what differed. */
static int check_dtype(acc_t *acc, acc_dtype_t t) {
  int w = acc_world_size(acc), r = acc_rank(acc), is_int = t == ACC_I32 || t == ACC_I64;
  size_t es = acc_dtype_size(t);
  char *buf = malloc(N * es * (size_t)(w + 1)), *all = buf + N * es;
  int bad = !buf;
  for (int op = ACC_SUM; op <= ACC_MIN && !bad; op++) {
    for (size_t i = 0; i < N; i++)
      put(acc, buf, t, i, r + 1 + (double)(i % 8));
    if (acc_all_reduce(acc, buf, N, t, (acc_op_t)op) != ACC_OK)
      return fprintf(stderr, "rank %d: all_reduce %s %s failed: %s\n", r, DT[t], OP[op],
                     acc_last_error(acc)),
             free(buf), -1;
    for (size_t i = 0; i < N && !bad; i++) {
      double want = expect((acc_op_t)op, w, i, is_int), got = get(acc, buf, t, i);
      if (fabs(got - want) > (t == ACC_F16 || t == ACC_BF16 ? 0.02 * want : 1e-6))
        bad = fprintf(stderr, "rank %d: all_reduce %s %s: element %zu is %g, expected %g\n", r,
                      DT[t], OP[op], i, got, want);
    }
  }
  for (size_t i = 0; i < N && !bad; i++)
    put(acc, buf, t, i, r == 0 ? 3 + (double)(i % 8) : 0);
  bad = bad || acc_broadcast(acc, buf, N, t, 0) != ACC_OK;
  for (size_t i = 0; i < N && !bad; i++)
    if (get(acc, buf, t, i) != 3 + (double)(i % 8))
      bad = fprintf(stderr, "rank %d: broadcast %s: element %zu wrong\n", r, DT[t], i);
  for (size_t i = 0; i < N && !bad; i++)
    put(acc, buf, t, i, r + 1);
  bad = bad || acc_all_gather(acc, buf, all, N, t) != ACC_OK;
  for (size_t i = 0; i < N * (size_t)w && !bad; i++)
    if (get(acc, all, t, i) != (double)(i / N + 1))
      bad = fprintf(stderr, "rank %d: all_gather %s: element %zu wrong\n", r, DT[t], i);
  for (size_t i = 0; i < N * (size_t)w && !bad; i++)
    put(acc, all, t, i, (double)(i / N + 1)); /* block b holds b+1 on every rank */
  bad = bad || acc_reduce_scatter(acc, all, buf, N, t, ACC_SUM) != ACC_OK;
  for (size_t i = 0; i < N && !bad; i++)
    if (get(acc, buf, t, i) != (double)(w * (r + 1)))
      bad = fprintf(stderr, "rank %d: reduce_scatter %s: element %zu is %g, expected %d\n", r,
                    DT[t], i, get(acc, buf, t, i), w * (r + 1));
  if (bad && acc_last_error(acc)[0])
    fprintf(stderr, "rank %d: %s\n", r, acc_last_error(acc));
  free(buf);
  return bad ? -1 : 0;
}

/* The worker body of `nbfork test`. */
int ln_selftest_worker(void) {
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1; /* acc_new said why on stderr */
  int bad = 0;
  for (int t = ACC_F32; t <= ACC_I64 && !bad; t++)
    bad = check_dtype(acc, (acc_dtype_t)t) != 0;
  bad = bad || acc_wait_for_everyone(acc) != ACC_OK;
  if (!bad && acc_is_main_process(acc))
    printf("rendezvous, barrier, all_reduce (sum avg max min), broadcast, all_gather, "
           "reduce_scatter: f32 f64 f16 bf16 i32 i64 correct on %d processes (%s)\n",
           acc_world_size(acc), acc_device(acc) >= 0 ? "GPU" : "CPU, Gloo");
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
