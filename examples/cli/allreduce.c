/*
 * allreduce.c — the smallest distributed program: join the process group
 * (from the environment `nbfork launch`, `srun` or `mpirun` sets), sum
 * each rank's number, print the result, leave. Used by the job scripts in
 * examples/slurm and examples/mpi, the end-to-end tests of the command
 * line and bench/launch_cli.py.
 *
 *   cc allreduce.c $(pkg-config --cflags --libs nbfork) -o allreduce
 *   nbfork launch --num_processes 2 ./allreduce
 *
 * Arguments (for tests): `fail R` makes rank R exit with code 3 after the
 * all-reduce; `sleep` makes every rank wait (for interrupts) after it;
 * `loop N` runs N more all-reduces, 100 ms apart, rank 0 printing "step I"
 * after each (for a link cut mid-run at a step the test chooses).
 */
#include <nbfork.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  acc_t *acc = acc_new(NULL);
  if (!acc)
    return 1; /* acc_new printed why */
  double x = acc_rank(acc) + 1, want = acc_world_size(acc) * (acc_world_size(acc) + 1) / 2.0;
  if (acc_all_reduce(acc, &x, 1, ACC_F64, ACC_SUM) != ACC_OK) {
    fprintf(stderr, "rank %d: all-reduce failed: %s\n", acc_rank(acc), acc_last_error(acc));
    acc_destroy(&acc);
    return 1;
  }
  printf("rank %d of %d (local rank %d of %d): sum %g %s\n", acc_rank(acc), acc_world_size(acc),
         acc_local_rank(acc), acc_local_world_size(acc), x, x == want ? "ok" : "WRONG");
  fflush(stdout);
  if (argc > 2 && !strcmp(argv[1], "fail") && atoi(argv[2]) == acc_rank(acc)) {
    fprintf(stderr, "rank %d fails on purpose\n", acc_rank(acc));
    return 3;
  }
  for (int i = 0; argc > 2 && !strcmp(argv[1], "loop") && i < atoi(argv[2]); i++) {
    usleep(100000);
    if (acc_all_reduce(acc, &x, 1, ACC_F64, ACC_MAX) != ACC_OK) {
      fprintf(stderr, "rank %d: all-reduce %d failed: %s\n", acc_rank(acc), i, acc_last_error(acc));
      acc_destroy(&acc);
      return 1;
    }
    if (acc_rank(acc) == 0) {
      printf("step %d\n", i + 1);
      fflush(stdout);
    }
  }
  if (argc > 1 && !strcmp(argv[1], "sleep"))
    for (;;)
      pause();
  acc_destroy(&acc);
  return x == want ? 0 : 1;
}
