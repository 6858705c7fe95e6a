/*
 * rt_test.h — what every runtime test includes: the one test registry
 * (tests/common/nbf_test.h: NBF_TEST / NBF_TEST_P / NBF_TEST_MAIN), the
 * one assert header (tests/common/nbf_assert.h) and the runtime-only
 * assertion below.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include "nbf_assert.h"
#include "nbf_test.h"
#include "nbfork.h"

/* `expr` (an acc_result_t) is ACC_OK, or fail printing the code, its
 * text and the accelerator's last error (`acc` may be NULL). */
#define ASSERT_OK(acc, expr)                                                                       \
  do {                                                                                             \
    acc_result_t rt_r_ = (expr);                                                                   \
    if (rt_r_ != ACC_OK)                                                                           \
      NBF_TEST_FAIL("%s returned %d (%s): %s", #expr, (int)rt_r_, acc_strerror(rt_r_),             \
                    acc_last_error(acc));                                                          \
  } while (0)

/* The i-th argument of a parameterized case (NBF_TEST_P), or fail naming
 * it. (nbf_test.h's NBF_TEST_ARG puts a do-while statement inside an
 * expression and does not compile.) */
static inline const char *rt_arg(int i) {
  if (i >= nbf_test_argc)
    NBF_TEST_FAIL("missing argument %d", i);
  return nbf_test_argv[i];
}

#endif /* RT_TEST_H */
