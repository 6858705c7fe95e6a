/*
 * kn_test.h — a tiny test registry in the style of libuv's test/task.h:
 * each case is its own ctest test (`test_kernel_unit NAME`), and the
 * assert macros print both operands on failure.
 */
#ifndef KN_TEST_H
#define KN_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/nbf_assert.h"

typedef void (*kn_test_fn)(void);
typedef struct kn_test_case {
  const char *name;
  kn_test_fn fn;
} kn_test_case_t;

#endif
