/*
 * rank_faults.c — nbfork-rank-faults, the program test_rankstate.py
 * launches with `nbfork launch`: a loop of all-reduces whose return codes
 * are IGNORED (as a newcomer's training loop does), with one fault:
 *   leave     rank 1 leaves (acc_destroy, return 0) before all-reduce #58,
 *             printing "rank 1 leaves at T" (T: CLOCK_MONOTONIC seconds)
 *   hang      rank 1 stops taking part before all-reduce #58 (spins),
 *             printing "rank 1 hangs at T"
 *   mismatch  rank 1 all-reduces 4095 elements at #4, the others 4096
 *   own3      ranks 1..WORLD-1 exit(3) at once after all-reduce #5
 *   crash     rank 1 dies of SIGSEGV before all-reduce #58
 *   time N C  no fault: N all-reduces of C f32; rank 0 prints the mean
 *             time per call in microseconds ("us_per_call 12.3")
 * Rank 0 prints "rank 0 finished" when its loop ends; a rank whose
 * all-reduce returned an error prints the first one ("error: ...").
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nbfork.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int timing(acc_t *acc, int n, size_t count) {
  float *buf = calloc(count, sizeof *buf);
  for (int i = 0; i < 20; i++) /* warm up: the synchronous mesh connects */
    acc_all_reduce(acc, buf, count, ACC_F32, ACC_SUM);
  double t0 = now_s();
  for (int i = 0; i < n; i++)
    acc_all_reduce(acc, buf, count, ACC_F32, ACC_SUM);
  double dt = now_s() - t0;
  if (acc_rank(acc) == 0)
    printf("us_per_call %.2f\n", dt * 1e6 / n);
  free(buf);
  acc_destroy(&acc);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "leave";
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1;
  if (!strcmp(mode, "time"))
    return timing(acc, argc > 2 ? atoi(argv[2]) : 1000, argc > 3 ? (size_t)atol(argv[3]) : 4096);
  int rank = acc_rank(acc);
  static float buf[4096];
  int told = 0;
  for (int step = 1; step <= 200; step++) {
    if (rank == 1 && step == 58 && !strcmp(mode, "leave")) {
      /* CLOCK_MONOTONIC, as the test's time.monotonic(): leave -> report */
      fprintf(stderr, "rank 1 leaves at %.3f\n", now_s());
      fflush(stderr);
      acc_destroy(&acc);
      return 0;
    }
    if (rank == 1 && step == 58 && !strcmp(mode, "hang")) {
      fprintf(stderr, "rank 1 hangs at %.3f\n", now_s());
      fflush(stderr);
      for (;;)
        usleep(1000);
    }
    if (rank == 1 && step == 58 && !strcmp(mode, "crash"))
      raise(SIGSEGV);
    if (rank > 0 && step == 6 && !strcmp(mode, "own3"))
      exit(3);
    size_t count = rank == 1 && step == 4 && !strcmp(mode, "mismatch") ? 4095 : 4096;
    /* return code ignored, but the first error is shown (with
     * NBFORK_COLLECTIVE_ERRORS=return there is one) */
    if (acc_all_reduce(acc, buf, count, ACC_F32, ACC_SUM) != ACC_OK && !told++)
      fprintf(stderr, "error: %s\n", acc_last_error(acc));
  }
  if (rank == 0)
    printf("rank 0 finished\n");
  acc_destroy(&acc);
  return 0;
}
