/*
 * test_keep.c — acc_keep: named memory that outlives a cell's re-run
 * (what the shipped notebooks' data cells use to load once per kernel).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbfork.h"
#include "rt_test.h"

NBF_TEST(same_name_and_size_gives_the_kept_block) {
  int fresh = -1;
  float *a = acc_keep("test.a", 1000 * sizeof(float), &fresh);
  ASSERT_NOT_NULL(a);
  ASSERT_EQ(fresh, 1);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(a[i], 0); /* zeroed */
  a[7] = 3.5f;
  float *again = acc_keep("test.a", 1000 * sizeof(float), &fresh);
  ASSERT_TRUE(again == a);
  ASSERT_EQ(fresh, 0);
  ASSERT_TRUE(again[7] == 3.5f);
  ASSERT_TRUE(acc_keep("test.a", 1000 * sizeof(float), NULL) == a); /* fresh may be NULL */
  /* another name is another block */
  int64_t *b = acc_keep("test.b", 16, &fresh);
  ASSERT_NOT_NULL(b);
  ASSERT_TRUE((void *)b != (void *)a);
  ASSERT_EQ(fresh, 1);
  acc_keep_free("test.a");
  acc_keep_free("test.b");
  acc_keep_free("test.none"); /* nothing kept: nothing happens */
}

NBF_TEST(another_size_gives_a_fresh_block) {
  int fresh;
  char *a = acc_keep("test.size", 64, &fresh);
  ASSERT_NOT_NULL(a);
  memset(a, 'x', 64);
  char *b = acc_keep("test.size", 128, &fresh);
  ASSERT_NOT_NULL(b);
  ASSERT_EQ(fresh, 1);
  for (int i = 0; i < 128; i++)
    ASSERT_EQ(b[i], 0);
  acc_keep_free("test.size");
  ASSERT_EQ(acc_keep("test.size", 128, &fresh) != NULL, 1);
  ASSERT_EQ(fresh, 1); /* freed: a new one */
  acc_keep_free("test.size");
}

NBF_TEST(bad_arguments_are_refused) {
  int fresh = 5;
  ASSERT_NULL(acc_keep(NULL, 8, &fresh));
  ASSERT_CONTAINS(acc_last_error(NULL), "acc_keep");
  ASSERT_NULL(acc_keep("", 8, &fresh));
  ASSERT_NULL(acc_keep("test.zero", 0, &fresh));
  ASSERT_CONTAINS(acc_last_error(NULL), "size 0");
  ASSERT_EQ(fresh, 5); /* untouched on failure */
}

/* A forked worker sees the kept block's contents (copy-on-write). */
NBF_TEST(forked_workers_inherit_the_block) {
  int *v = acc_keep("test.fork", sizeof(int), NULL);
  ASSERT_NOT_NULL(v);
  *v = 42;
  pid_t p = fork();
  if (p == 0) {
    int fresh;
    int *w = acc_keep("test.fork", sizeof(int), &fresh);
    _exit(w == v && !fresh && *w == 42 ? 0 : 1);
  }
  int st;
  ASSERT_EQ(waitpid(p, &st, 0), p);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  acc_keep_free("test.fork");
}

NBF_TEST_MAIN()
