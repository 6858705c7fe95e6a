/*
 * ex_test.h — a tiny test registry for the executor's unit tests, in the
 * style of libuv's test/task.h: `EX_TEST(name) { ... }` defines a case,
 * each case is its own ctest test (`test_exec_unit NAME`; the CMake file
 * finds the names by scanning for EX_TEST), and the assert macros print
 * both operands on failure.
 */
#ifndef EX_TEST_H
#define EX_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/nbf_assert.h"

#define EX_TEST_FAIL NBF_TEST_FAIL

typedef void (*ex_test_fn)(void);
typedef struct ex_test_case {
  const char *name;
  ex_test_fn fn;
  struct ex_test_case *next;
} ex_test_case_t;

/* Cases register themselves before main (constructor), in file order. */
extern ex_test_case_t *ex_test_list;
#define EX_TEST(name)                                                                              \
  static void test_##name(void);                                                                   \
  static ex_test_case_t case_##name = {#name, test_##name, NULL};                                  \
  __attribute__((constructor)) static void register_##name(void) {                                 \
    ex_test_case_t **p = &ex_test_list;                                                            \
    while (*p)                                                                                     \
      p = &(*p)->next;                                                                             \
    *p = &case_##name;                                                                             \
  }                                                                                                \
  static void test_##name(void)

/* main(): `PROG NAME` runs one case, `PROG` runs all, `PROG --list`
 * prints the names. Exit 77 from a case = SKIP. */
#define EX_TEST_MAIN()                                                                             \
  ex_test_case_t *ex_test_list;                                                                    \
  int main(int argc, char **argv) {                                                                \
    int ran = 0;                                                                                   \
    for (ex_test_case_t *t = ex_test_list; t; t = t->next) {                                       \
      if (argc > 1 && strcmp(argv[1], "--list") == 0) {                                            \
        printf("%s\n", t->name);                                                                   \
        continue;                                                                                  \
      }                                                                                            \
      if (argc > 1 && strcmp(argv[1], t->name) != 0)                                               \
        continue;                                                                                  \
      t->fn();                                                                                     \
      printf("ok %s\n", t->name);                                                                  \
      ran++;                                                                                       \
    }                                                                                              \
    if (argc > 1 && strcmp(argv[1], "--list") == 0)                                                \
      return 0;                                                                                    \
    if (!ran) {                                                                                    \
      fprintf(stderr, "no test named '%s' (--list shows them)\n", argc > 1 ? argv[1] : "");        \
      return 1;                                                                                    \
    }                                                                                              \
    return 0;                                                                                      \
  }

#endif
