/*
 * nbf_assert.h — the assert macros of every C unit test (kernel,
 * executor, launcher, runtime), in the style of libuv's test/task.h: each
 * prints the place, the expression and both operands on failure and
 * exits 1. NBF_TEST_SKIP exits 77 (ctest SKIP_RETURN_CODE).
 */
#ifndef NBF_ASSERT_H
#define NBF_ASSERT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBF_TEST_FAIL(...)                                                                          \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    fflush(stderr);                                                                                \
    exit(1);                                                                                       \
  } while (0)

#define NBF_TEST_SKIP(...)                                                                         \
  do {                                                                                             \
    fprintf(stderr, "SKIP: ");                                                                     \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(77);                                                                                      \
  } while (0)

#define ASSERT_TRUE(c)                                                                             \
  do {                                                                                             \
    if (!(c))                                                                                      \
      NBF_TEST_FAIL("ASSERT_TRUE(%s) failed", #c);                                                  \
  } while (0)

#define NBF_CMP_(a, op, b, T, fmt)                                                                  \
  do {                                                                                             \
    T nbf_a_ = (a), nbf_b_ = (b);                                                                  \
    if (!(nbf_a_ op nbf_b_))                                                                       \
      NBF_TEST_FAIL("%s %s %s failed: " fmt " vs " fmt, #a, #op, #b, nbf_a_, nbf_b_);               \
  } while (0)

#define ASSERT_EQ(a, b) NBF_CMP_(a, ==, b, long long, "%lld")
#define ASSERT_NE(a, b) NBF_CMP_(a, !=, b, long long, "%lld")
#define ASSERT_LT(a, b) NBF_CMP_(a, <, b, long long, "%lld")
#define ASSERT_LE(a, b) NBF_CMP_(a, <=, b, long long, "%lld")
#define ASSERT_GT(a, b) NBF_CMP_(a, >, b, long long, "%lld")
#define ASSERT_GE(a, b) NBF_CMP_(a, >=, b, long long, "%lld")
#define ASSERT_EQ_U(a, b) NBF_CMP_(a, ==, b, unsigned long long, "%llu")
#define ASSERT_DBL_LT(a, b) NBF_CMP_(a, <, b, double, "%.9g")
#define ASSERT_DBL_LE(a, b) NBF_CMP_(a, <=, b, double, "%.9g")

#define ASSERT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double nbf_a_ = (a), nbf_b_ = (b), nbf_t_ = (tol);                                             \
    if (!(fabs(nbf_a_ - nbf_b_) <= nbf_t_))                                                        \
      NBF_TEST_FAIL("%s ~= %s (tol %g) failed: %.9g vs %.9g", #a, #b, nbf_t_, nbf_a_, nbf_b_);      \
  } while (0)

#define ASSERT_NULL(p)                                                                             \
  do {                                                                                             \
    const void *nbf_p_ = (p);                                                                      \
    if (nbf_p_ != NULL)                                                                            \
      NBF_TEST_FAIL("%s is %p, expected NULL", #p, nbf_p_);                                         \
  } while (0)

#define ASSERT_NOT_NULL(p)                                                                         \
  do {                                                                                             \
    if ((p) == NULL)                                                                               \
      NBF_TEST_FAIL("%s is NULL", #p);                                                              \
  } while (0)

#define ASSERT_EQ_STR(a, b)                                                                        \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                         \
      NBF_TEST_FAIL("%s == %s failed: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",                \
                   b_ ? b_ : "(null)");                                                            \
  } while (0)

#define ASSERT_NE_STR(a, b)                                                                        \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (a_ && b_ && strcmp(a_, b_) == 0)                                                           \
      NBF_TEST_FAIL("%s != %s failed: both are \"%s\"", #a, #b, a_);                                \
  } while (0)

/* `hay` contains `needle` (both printed on failure). */
#define ASSERT_CONTAINS(hay, needle)                                                               \
  do {                                                                                             \
    const char *h_ = (hay), *n_ = (needle);                                                        \
    if (!h_ || !n_ || !strstr(h_, n_))                                                             \
      NBF_TEST_FAIL("%s contains %s failed:\n--- text:\n%s\n--- does not contain:\n%s", #hay,       \
                   #needle, h_ ? h_ : "(null)", n_ ? n_ : "(null)");                               \
  } while (0)

#define ASSERT_NOT_CONTAINS(hay, needle)                                                           \
  do {                                                                                             \
    const char *h_ = (hay), *n_ = (needle);                                                        \
    if (h_ && n_ && strstr(h_, n_))                                                                \
      NBF_TEST_FAIL("%s lacks %s failed:\n--- text:\n%s\n--- contains:\n%s", #hay, #needle, h_,     \
                   n_);                                                                            \
  } while (0)

#define ASSERT_EQ_MEM(a, alen, b, blen)                                                            \
  do {                                                                                             \
    size_t al_ = (alen), bl_ = (blen);                                                             \
    if (al_ != bl_ || memcmp((a), (b), al_) != 0)                                                  \
      NBF_TEST_FAIL("%s == %s failed: \"%.*s\" (%zu bytes) != \"%.*s\" (%zu bytes)", #a, #b,        \
                   (int)al_, (const char *)(a), al_, (int)bl_, (const char *)(b), bl_);            \
  } while (0)

#endif
