/*
 * rt_assert.h — tiny assertions for the runtime tests (after libuv's
 * test/task.h): on failure they print file:line, the expression and BOTH
 * operands, then exit(1). RT_SKIP() exits with 77 (ctest SKIP_RETURN_CODE).
 */
#ifndef RT_ASSERT_H
#define RT_ASSERT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_FAIL(...)                                                                               \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                          \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    fflush(stderr);                                                                                \
    exit(1);                                                                                       \
  } while (0)

#define RT_SKIP(...)                                                                               \
  do {                                                                                             \
    fprintf(stderr, "SKIP: ");                                                                     \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(77);                                                                                      \
  } while (0)

#define ASSERT_TRUE(e)                                                                             \
  do {                                                                                             \
    if (!(e))                                                                                      \
      RT_FAIL("expected true: %s", #e);                                                            \
  } while (0)

#define RT_CMP(a, op, b, T, fmt)                                                                   \
  do {                                                                                             \
    T rt_a_ = (a), rt_b_ = (b);                                                                    \
    if (!(rt_a_ op rt_b_))                                                                         \
      RT_FAIL("%s %s %s: " fmt " vs " fmt, #a, #op, #b, rt_a_, rt_b_);                             \
  } while (0)

#define ASSERT_EQ(a, b) RT_CMP(a, ==, b, long long, "%lld")
#define ASSERT_NE(a, b) RT_CMP(a, !=, b, long long, "%lld")
#define ASSERT_LT(a, b) RT_CMP(a, <, b, long long, "%lld")
#define ASSERT_LE(a, b) RT_CMP(a, <=, b, long long, "%lld")
#define ASSERT_GT(a, b) RT_CMP(a, >, b, long long, "%lld")
#define ASSERT_GE(a, b) RT_CMP(a, >=, b, long long, "%lld")
#define ASSERT_EQ_U(a, b) RT_CMP(a, ==, b, unsigned long long, "%llu")
#define ASSERT_DBL_LT(a, b) RT_CMP(a, <, b, double, "%.9g")
#define ASSERT_DBL_LE(a, b) RT_CMP(a, <=, b, double, "%.9g")

#define ASSERT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double rt_a_ = (a), rt_b_ = (b), rt_t_ = (tol);                                                \
    if (!(fabs(rt_a_ - rt_b_) <= rt_t_))                                                           \
      RT_FAIL("%s ~= %s (tol %g): %.9g vs %.9g", #a, #b, rt_t_, rt_a_, rt_b_);                     \
  } while (0)

#define ASSERT_STREQ(a, b)                                                                         \
  do {                                                                                             \
    const char *rt_a_ = (a), *rt_b_ = (b);                                                         \
    if (!rt_a_ || !rt_b_ || strcmp(rt_a_, rt_b_) != 0)                                             \
      RT_FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b, rt_a_ ? rt_a_ : "(null)",                      \
              rt_b_ ? rt_b_ : "(null)");                                                           \
  } while (0)

#define ASSERT_CONTAINS(hay, needle)                                                               \
  do {                                                                                             \
    const char *rt_h_ = (hay), *rt_n_ = (needle);                                                  \
    if (!rt_h_ || !strstr(rt_h_, rt_n_))                                                           \
      RT_FAIL("%s contains %s: \"%s\" does not contain \"%s\"", #hay, #needle,                     \
              rt_h_ ? rt_h_ : "(null)", rt_n_);                                                    \
  } while (0)

#define ASSERT_NOT_NULL(p)                                                                         \
  do {                                                                                             \
    if ((p) == NULL)                                                                               \
      RT_FAIL("%s is NULL", #p);                                                                   \
  } while (0)

#define ASSERT_NULL(p)                                                                             \
  do {                                                                                             \
    const void *rt_p_ = (p);                                                                       \
    if (rt_p_ != NULL)                                                                             \
      RT_FAIL("%s is %p, expected NULL", #p, rt_p_);                                               \
  } while (0)

/* ACC_OK or fail with the accelerator's last error. */
#define ASSERT_OK(acc, expr)                                                                       \
  do {                                                                                             \
    acc_result_t rt_r_ = (expr);                                                                   \
    if (rt_r_ != ACC_OK)                                                                           \
      RT_FAIL("%s returned %d (%s): %s", #expr, (int)rt_r_, acc_strerror(rt_r_),                   \
              acc_last_error(acc));                                                                \
  } while (0)

#endif /* RT_ASSERT_H */
