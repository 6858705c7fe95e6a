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

#define KN_TEST_FAIL(...)                                                                          \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)

#define ASSERT_TRUE(c)                                                                             \
  do {                                                                                             \
    if (!(c))                                                                                      \
      KN_TEST_FAIL("ASSERT_TRUE(%s) failed", #c);                                                  \
  } while (0)

#define ASSERT_EQ_INT(a, b)                                                                        \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (a_ != b_)                                                                                  \
      KN_TEST_FAIL("%s == %s failed: %lld != %lld", #a, #b, a_, b_);                               \
  } while (0)

#define ASSERT_EQ_STR(a, b)                                                                        \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                         \
      KN_TEST_FAIL("%s == %s failed: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",                \
                   b_ ? b_ : "(null)");                                                            \
  } while (0)

#define ASSERT_EQ_MEM(a, alen, b, blen)                                                            \
  do {                                                                                             \
    size_t al_ = (alen), bl_ = (blen);                                                             \
    if (al_ != bl_ || memcmp((a), (b), al_) != 0)                                                  \
      KN_TEST_FAIL("%s == %s failed: \"%.*s\" (%zu bytes) != \"%.*s\" (%zu bytes)", #a, #b,        \
                   (int)al_, (const char *)(a), al_, (int)bl_, (const char *)(b), bl_);            \
  } while (0)

typedef void (*kn_test_fn)(void);
typedef struct kn_test_case {
  const char *name;
  kn_test_fn fn;
} kn_test_case_t;

#endif
