/*
 * test_peer_failure.c — a failed peer never hangs the others: with
 * NBFORK_TIMEOUT_S=5 the surviving ranks get an error (PEER or TIMEOUT,
 * with text) well within the timeout plus a margin, and later calls fail
 * at once.
 *   test_peer_failure killed                (rank 2 of 3 SIGKILLs itself)
 *   test_peer_failure hung                  (rank 2 of 3 stops taking part)
 *   test_peer_failure missing_at_rendezvous (WORLD_SIZE=2, one process)
 *   test_peer_failure shm_killed_leaves_nothing (killed, through shared
 *     memory: the survivors fail at once, /dev/shm is as before)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_internal.h"
#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

#define TIMEOUT_S 5
#define MARGIN_S 3.0
/* "At once": far below TIMEOUT_S (so no timeout was waited for), with
 * room for a loaded 2-core machine. */
#define AT_ONCE_S 2.5

/* All-reduce `buf` (4096 floats) until a call fails (at most `tries`);
 * prints and returns that result, *dt_s = seconds it took. */
static acc_result_t reduce_until_error(acc_t *acc, int rank, float *buf, int tries, double *dt_s) {
  double t0 = rt_now();
  acc_result_t r = ACC_OK;
  for (int it = 0; it < tries && r == ACC_OK; it++)
    r = acc_all_reduce(acc, buf, 4096, ACC_F32, ACC_SUM);
  *dt_s = rt_now() - t0;
  fprintf(stderr, "rank %d: error after %.2f s: %s (%s)\n", rank, *dt_s, acc_strerror(r),
          acc_last_error(acc));
  return r;
}

static int survivor(acc_t *acc, int rank) {
  float buf[4096];
  for (int i = 0; i < 4096; i++)
    buf[i] = 1.0f;
  double dt;
  acc_result_t r = reduce_until_error(acc, rank, buf, 100000, &dt);
  ASSERT_TRUE(r == ACC_ERR_PEER || r == ACC_ERR_TIMEOUT);
  ASSERT_DBL_LT(dt, TIMEOUT_S + MARGIN_S);
  ASSERT_TRUE(strlen(acc_last_error(acc)) > 20);
  /* the group is unusable now: errors at once, never a hang */
  double t0 = rt_now();
  ASSERT_NE(acc_all_reduce(acc, buf, 4, ACC_F32, ACC_SUM), ACC_OK);
  ASSERT_NE(acc_wait_for_everyone(acc), ACC_OK);
  ASSERT_DBL_LT(rt_now() - t0, AT_ONCE_S);
  t0 = rt_now();
  acc_destroy(&acc);
  ASSERT_DBL_LT(rt_now() - t0, AT_ONCE_S);
  return 0;
}

/* Every rank does one all-reduce; then rank 2 fails the way `arg` names
 * ("killed": SIGKILL; "hung": holds its sockets open, sends nothing) and
 * the others must notice. */
static int failing_rank(int rank, int world, void *arg) {
  (void)world;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  /* this test is about the error returned: opt out of the fatal default */
  ASSERT_OK(acc, acc_set_errhandler(acc, ACC_ERRORS_RETURN));
  float x = 1.0f;
  ASSERT_OK(acc, acc_all_reduce(acc, &x, 1, ACC_F32, ACC_SUM));
  if (strcmp((const char *)arg, "shm") == 0) {
    /* the workspaces are anonymous memfds, mapped, with no name */
    ASSERT_EQ_STR(acc__host_path(acc), "shared memory");
    char *maps = NULL;
    size_t n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    ASSERT_NOT_NULL(f);
    ASSERT_TRUE(getdelim(&maps, &n, 0, f) > 0);
    fclose(f);
    ASSERT_CONTAINS(maps, "/memfd:nbfork-shm");
    ASSERT_TRUE(strstr(maps, "/dev/shm/") == NULL);
    free(maps);
    arg = "killed";
  }
  if (rank == 2 && strcmp((const char *)arg, "killed") == 0) {
    usleep(200000);
    raise(SIGKILL);
  }
  if (rank == 2) {
    sleep((unsigned)(TIMEOUT_S + MARGIN_S + 1));
    _exit(0);
  }
  return survivor(acc, rank);
}

static int lonely_rank(int rank, int world, void *arg) {
  (void)rank;
  (void)world;
  (void)arg;
  double t0 = rt_now();
  acc_t *acc = acc_new(NULL); /* rank 1 never comes */
  double dt = rt_now() - t0;
  ASSERT_NULL(acc);
  ASSERT_CONTAINS(acc_last_error(NULL), "acc_new failed (rank 0 of 2"); /* the stderr line */
  ASSERT_DBL_LT(dt, TIMEOUT_S + MARGIN_S);
  ASSERT_DBL_LT(TIMEOUT_S - 1.0, dt);
  return 0;
}

static const rt_spawn_opts_t OPTS = {.world = 3, .deadline_s = 40, .timeout_s = "5"};

/* The two-node cases' collective: the world's all-reduce, or with
 * `hybrid` HYBRID_SHARD's reduction (the node's reduce-scatter, then the
 * replica group's all-reduce of the own block). */
static acc_result_t node_call(acc_t *acc, int hybrid, float *buf) {
  static float out[4096];
  return hybrid ? acc__hybrid_reduce_scatter(acc, buf, out, 4096, ACC_F32, ACC_AVG)
                : acc_all_reduce(acc, buf, 4096, ACC_F32, ACC_SUM);
}

/* Two simulated nodes (NODE_RANK = rank % 2: {0, 2} and {1, 3}); rank 3,
 * not a leader, dies: its leader sees it through shared memory and
 * closes its connections to the other leader, which aborts its own node:
 * every survivor fails at once, none waits for the timeout. With
 * HYBRID_SHARD's reduction (arg "hybrid") rank 3's replica peer, rank 2,
 * loses its Gloo connection too and aborts node 0; each names a world
 * rank. */
static int nodes_rank(int rank, int world, void *arg) {
  (void)world;
  const int hybrid = arg != NULL;
  setenv("NODE_RANK", rank % 2 ? "1" : "0", 1);
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  ASSERT_OK(acc, acc_set_errhandler(acc, ACC_ERRORS_RETURN));
  ASSERT_EQ_STR(acc__host_path(acc), "shared memory + gloo between nodes");
  if (hybrid)
    ASSERT_OK(acc, acc__node_replica_connect(acc));
  static float buf[2 * 4096];
  ASSERT_OK(acc, node_call(acc, hybrid, buf));
  if (rank == 3) {
    usleep(200000);
    raise(SIGKILL);
  }
  double t0 = rt_now();
  acc_result_t r = ACC_OK;
  for (int it = 0; it < 1000000 && r == ACC_OK; it++)
    r = node_call(acc, hybrid, buf);
  double dt = rt_now() - t0;
  fprintf(stderr, "rank %d: error after %.2f s: %s (%s)\n", rank, dt, acc_strerror(r),
          acc_last_error(acc));
  ASSERT_EQ(r, ACC_ERR_PEER);
  ASSERT_DBL_LT(dt, AT_ONCE_S);
  /* rank 2 failed in its replica group (not through its node, which
   * rank 0 may have aborted first): the text names the world rank it
   * lost, not its number in that group (1) */
  if (hybrid && rank == 2 && strstr(acc_last_error(acc), "all-reduce of"))
    ASSERT_CONTAINS(acc_last_error(acc), "connection to rank 3 was lost");
  acc_destroy(&acc);
  return 0;
}

static void two_nodes_rank_3_killed(const char *arg) {
  rt_spawn_opts_t o = OPTS;
  o.world = 4;
  int st[4] = {0};
  rt_spawn(&o, nodes_rank, (void *)arg, st);
  ASSERT_EQ(st[0], 0);
  ASSERT_EQ(st[1], 0);
  ASSERT_EQ(st[2], 0);
  ASSERT_EQ(st[3], -SIGKILL);
}

NBF_TEST(shm_nodes_killed_member_fails_every_node_at_once) {
  two_nodes_rank_3_killed(NULL);
}

NBF_TEST(hybrid_killed_member_fails_every_node_at_once) {
  two_nodes_rank_3_killed("hybrid");
}

NBF_TEST(killed) {
  int st[3] = {0};
  rt_spawn(&OPTS, failing_rank, "killed", st);
  ASSERT_EQ(st[0], 0);
  ASSERT_EQ(st[1], 0);
  ASSERT_EQ(st[2], -SIGKILL);
}

/* The names in /dev/shm, sorted, as one string. */
static char *dev_shm_names(void) {
  struct dirent **list = NULL;
  int n = scandir("/dev/shm", &list, NULL, alphasort);
  size_t cap = 1, at = 0;
  for (int i = 0; i < n; i++)
    cap += strlen(list[i]->d_name) + 1;
  char *out = calloc(1, cap);
  for (int i = 0; i < n; i++) {
    at += (size_t)sprintf(out + at, "%s\n", list[i]->d_name);
    free(list[i]);
  }
  free(list);
  return out;
}

NBF_TEST(shm_killed_leaves_nothing) {
  char *before = dev_shm_names();
  int st[3] = {0};
  double t0 = rt_now();
  rt_spawn(&OPTS, failing_rank, "shm", st);
  ASSERT_EQ(st[0], 0);
  ASSERT_EQ(st[1], 0);
  ASSERT_EQ(st[2], -SIGKILL);
  ASSERT_DBL_LT(rt_now() - t0, TIMEOUT_S); /* the survivors saw the death, no timeout */
  char *after = dev_shm_names();
  ASSERT_EQ_STR(after, before);
  free(before);
  free(after);
}

NBF_TEST(hung) {
  int st[3] = {0};
  rt_spawn(&OPTS, failing_rank, "hung", st);
  ASSERT_EQ(st[0], 0);
  ASSERT_EQ(st[1], 0);
}

NBF_TEST(missing_at_rendezvous) {
  rt_spawn_opts_t o = OPTS;
  int st[3] = {0};
  o.world = 2;
  o.started = 1;
  ASSERT_EQ(rt_spawn(&o, lonely_rank, NULL, st), 0);
}

NBF_TEST_MAIN()
