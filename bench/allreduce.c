/*
 * bench/allreduce.c — the nbfork side of bench/allreduce.py: forks NPROC
 * ranks on 127.0.0.1 (the environment a launcher sets), and times
 * acc_all_reduce (f32, SUM, in place) at each size, plus memcpy of the
 * same buffer as a bandwidth reference. One JSON object per line on
 * stdout (rank 0):
 *   {"side":"nbfork","algo":"halving-doubling","bytes":1048576,
 *    "iters":100,"median_s":...,"min_s":...}
 *   {"side":"memcpy","bytes":...,"median_s":...}
 *
 *   allreduce [--nproc N] [--algos auto|all|NAME,...] BYTES...
 *
 * `auto` is what acc_all_reduce runs (the runtime's choice per size);
 * `all` also times every Gloo algorithm the shim has, forced through the
 * internal acc__set_allreduce_algo, to show why the choice is what it is.
 * Built by bench/allreduce.py against the build tree's libnbfork.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acc_gloo.h"
#include "nbfork.h"

/* The tests' fork-N-ranks helper (a free MASTER_PORT, tried again when
 * rank 0 finds it taken) and the one monotonic clock, compiled in here
 * because bench/allreduce.py builds this file alone against libnbfork,
 * which does not export them. */
#include "../common/nbf_util.c"
#include "../tests/runtime/rt_spawn.c"

/* Internal runtime calls (exported by libnbfork, declared in
 * runtime/core/acc_internal.h). */
void acc__set_allreduce_algo(acc_t *acc, int algo);
const char *acc__allreduce_algo_name(const acc_t *acc, size_t bytes);

const char *acc__host_path(const acc_t *acc);

/* CPU seconds this process used (user + system): what waiting costs. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void fill(float *buf, size_t n, int rank) {
  for (size_t i = 0; i < n; i++)
    buf[i] = (float)(rank + 1);
}

/* `iters` in-place SUM all-reduces of buf, each checked to have summed
 * every rank's buffer (the proof that a timed call did the work): rank r
 * holds r + 1, so the first call gives world(world + 1)/2 everywhere and
 * each later one multiplies by world. The values stay integers below
 * 2^24, exact in f32 whatever the order of the additions: before one
 * would pass it, the buffer is filled again, outside the timed span.
 * Checks the first, middle and last element after each call, and every
 * element after the last. t[i]: each call's wall seconds (or NULL);
 * *cpu: CPU seconds of the calls and checks, per call (or NULL). */
static int check_rounds(acc_t *acc, float *buf, size_t n, int rank, int world, const char *name,
                        int iters, double *t, double *cpu) {
  const float first = (float)(world * (world + 1) / 2);
  float want = 0;
  double c = 0;
  for (int i = 0; i < iters; i++) {
    if (want == 0 || want * (float)world >= 16777216.0f) {
      fill(buf, n, rank); /* untimed; the call below then gives `first` */
      want = 0;
    }
    double c0 = cpu_now(), t0 = rt_now();
    acc_result_t r = acc_all_reduce(acc, buf, n, ACC_F32, ACC_SUM);
    if (t)
      t[i] = rt_now() - t0;
    c += cpu_now() - c0;
    if (r != ACC_OK) {
      fprintf(stderr, "all-reduce failed: %s\n", acc_last_error(acc));
      return 1;
    }
    want = want == 0 ? first : want * (float)world;
    if (buf[0] != want || buf[n / 2] != want || buf[n - 1] != want) {
      fprintf(stderr, "%s: call %d: wrong sum %g (want %g)\n", name, i, buf[0], want);
      return 1;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (buf[i] != want) {
      fprintf(stderr, "%s: element %zu: wrong sum %g (want %g)\n", name, i, buf[i], want);
      return 1;
    }
  if (cpu)
    *cpu = c / iters;
  return 0;
}

static int iters_for(size_t bytes) {
  if (bytes <= 64 * 1024)
    return 400;
  if (bytes <= 2 * 1024 * 1024)
    return 100;
  if (bytes <= 32 * 1024 * 1024)
    return 20;
  return 10;
}

typedef struct {
  int nalgos;
  int algos[8];
  int nsizes;
  size_t sizes[16];
} plan_t;

static int rank_main(int rank_unused, int world_unused, void *arg) {
  (void)rank_unused;
  (void)world_unused;
  const plan_t *p = arg;
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1;
  int rank = acc_rank(acc), world = acc_world_size(acc);
  for (int s = 0; s < p->nsizes; s++) {
    size_t bytes = p->sizes[s], n = bytes / sizeof(float);
    float *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    int iters = iters_for(bytes);
    double *t = malloc((size_t)iters * sizeof *t);
    for (int a = 0; a < p->nalgos; a++) {
      acc__set_allreduce_algo(acc, p->algos[a]);
      const char *name = acc__allreduce_algo_name(acc, bytes);
      if (check_rounds(acc, buf, n, rank, world, name, 4, NULL, NULL) != 0)
        return 1; /* first call correct, then warm-up */
      acc_wait_for_everyone(acc);
      double cpu;
      if (check_rounds(acc, buf, n, rank, world, name, iters, t, &cpu) != 0)
        return 1;
      qsort(t, (size_t)iters, sizeof *t, cmp_dbl);
      if (rank == 0)
        printf("{\"side\":\"nbfork\",\"path\":\"%s\",\"algo\":\"%s\",\"forced\":%d,"
               "\"bytes\":%zu,\"iters\":%d,\"median_s\":%.9g,\"min_s\":%.9g,\"p10_s\":%.9g,"
               "\"p90_s\":%.9g,\"cpu_s\":%.9g}\n",
               acc__host_path(acc), name, p->algos[a] != 0, bytes, iters, t[iters / 2], t[0],
               t[iters / 10], t[iters * 9 / 10], cpu);
      fflush(stdout);
    }
    if (rank == 0) { /* memcpy reference: same buffer size, after the others */
      float *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
      memset(dst, 0, bytes);
      for (int i = 0; i < iters; i++) {
        double t0 = rt_now();
        memcpy(dst, buf, bytes);
        __asm__ volatile("" ::"r"(dst) : "memory");
        t[i] = rt_now() - t0;
      }
      if (memcmp(dst, buf, bytes) != 0) {
        fprintf(stderr, "memcpy: the copy differs\n");
        return 1;
      }
      qsort(t, (size_t)iters, sizeof *t, cmp_dbl);
      printf("{\"side\":\"memcpy\",\"bytes\":%zu,\"iters\":%d,\"median_s\":%.9g,\"min_s\":%.9g}\n",
             bytes, iters, t[iters / 2], t[0]);
      fflush(stdout);
      free(dst);
    }
    acc_wait_for_everyone(acc);
    free(t);
    free(buf);
  }
  acc_destroy(&acc);
  return 0;
}

static int parse_algo(const char *s) {
  for (int a = 0; a <= (int)ACC_GLOO_BCUBE; a++)
    if (strcmp(s, acc_gloo_algo_name((acc_gloo_algo_t)a)) == 0)
      return a;
  return -1;
}

int main(int argc, char **argv) {
  plan_t p = {0};
  int nproc = 2;
  const char *algos = "auto";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nproc") && i + 1 < argc)
      nproc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--algos") && i + 1 < argc)
      algos = argv[++i];
    else if (p.nsizes < 16)
      p.sizes[p.nsizes++] = strtoull(argv[i], NULL, 10);
  }
  if (p.nsizes == 0 || nproc < 2) {
    fprintf(stderr, "usage: allreduce [--nproc N>=2] [--algos auto|all|NAME,...] BYTES...\n");
    return 2;
  }
  if (!strcmp(algos, "all")) {
    for (int a = 0; a <= (int)ACC_GLOO_BCUBE; a++)
      p.algos[p.nalgos++] = a;
  } else {
    char *copy = strdup(algos), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && p.nalgos < 8;
         tok = strtok_r(NULL, ",", &save)) {
      int a = parse_algo(tok);
      if (a < 0) {
        fprintf(stderr, "unknown algorithm '%s'\n", tok);
        return 2;
      }
      p.algos[p.nalgos++] = a;
    }
    free(copy);
  }
  /* deadline and NBFORK_TIMEOUT_S: the benchmark's own (300 s is the
   * runtime's default); rt_spawn's are for tests. */
  rt_spawn_opts_t o = {.world = nproc, .deadline_s = 3600, .timeout_s = "300"};
  return rt_spawn(&o, rank_main, &p, NULL);
}
