/*
 * nbf_test.h — the test registry of every C unit test, in the style of
 * libuv's test/test-list.h: `NBF_TEST(name) { ... }` defines a case and
 * each case is its own ctest test. tests/CMakeLists.txt's
 * nbf_unit_tests() finds the names by scanning the source for lines that
 * start with `NBF_TEST(`, so the list is kept in one place.
 *
 * `NBF_TEST_P(name)` defines a case that takes arguments (a dtype, a
 * world size...): the scan skips it and the module's CMake file adds one
 * ctest test per argument set. Inside a case, nbf_test_arg(i) (or
 * nbf_test_argc/nbf_test_argv) gives the arguments after the case name.
 *
 * main() (NBF_TEST_MAIN): `PROG NAME [ARGS...]` runs one case, `PROG`
 * runs every case without arguments, `PROG --list` prints the names.
 * A case that exits 77 is a SKIP (NBF_TEST_SKIP, ctest SKIP_RETURN_CODE).
 */
#ifndef NBF_TEST_H
#define NBF_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_assert.h"

typedef struct nbf_test_case {
  const char *name;
  void (*fn)(void);
  int takes_args;
  struct nbf_test_case *next;
} nbf_test_case_t;

extern nbf_test_case_t *nbf_test_list;
extern int nbf_test_argc;
extern char **nbf_test_argv;

/* Cases register themselves before main (constructor), in file order. */
#define NBF_TEST_DEFINE_(name, args)                                                               \
  static void test_##name(void);                                                                   \
  static nbf_test_case_t case_##name = {#name, test_##name, args, NULL};                           \
  __attribute__((constructor)) static void register_##name(void) {                                 \
    nbf_test_case_t **p = &nbf_test_list;                                                          \
    while (*p)                                                                                     \
      p = &(*p)->next;                                                                             \
    *p = &case_##name;                                                                             \
  }                                                                                                \
  static void test_##name(void)

#define NBF_TEST(name) NBF_TEST_DEFINE_(name, 0)
#define NBF_TEST_P(name) NBF_TEST_DEFINE_(name, 1)

/* The i-th argument of a parameterized case, or fail naming it. */
static inline const char *nbf_test_arg(int i) {
  if (i >= nbf_test_argc)
    NBF_TEST_FAIL("missing argument %d", i);
  return nbf_test_argv[i];
}

#define NBF_TEST_MAIN()                                                                            \
  nbf_test_case_t *nbf_test_list;                                                                  \
  int nbf_test_argc;                                                                               \
  char **nbf_test_argv;                                                                            \
  int main(int argc, char **argv) {                                                                \
    int list = argc > 1 && strcmp(argv[1], "--list") == 0, ran = 0;                                \
    nbf_test_argc = argc > 2 ? argc - 2 : 0;                                                       \
    nbf_test_argv = argv + 2;                                                                      \
    for (nbf_test_case_t *t = nbf_test_list; t; t = t->next) {                                     \
      if (list) {                                                                                  \
        printf("%s%s\n", t->name, t->takes_args ? " ARGS..." : "");                                \
        continue;                                                                                  \
      }                                                                                            \
      if (argc > 1 ? strcmp(argv[1], t->name) != 0 : t->takes_args)                                \
        continue;                                                                                  \
      t->fn();                                                                                     \
      printf("ok %s\n", t->name);                                                                  \
      fflush(stdout);                                                                              \
      ran++;                                                                                       \
    }                                                                                              \
    if (list)                                                                                      \
      return 0;                                                                                    \
    if (!ran) {                                                                                    \
      fprintf(stderr, "no test named '%s' (--list shows them)\n", argc > 1 ? argv[1] : "");        \
      return 1;                                                                                    \
    }                                                                                              \
    return 0;                                                                                      \
  }

#endif
