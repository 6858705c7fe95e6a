/*
 * nbf_assert.h — the assert macros of the C unit tests of the kernel
 * (tests/kernel/kn_test.h) and the executor (tests/exec/ex_test.h), in
 * the style of libuv's test/task.h: each prints both operands and the
 * place on failure and exits 1.
 */
#ifndef NBF_ASSERT_H
#define NBF_ASSERT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBF_TEST_FAIL(...)                                                                          \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)

#define ASSERT_TRUE(c)                                                                             \
  do {                                                                                             \
    if (!(c))                                                                                      \
      NBF_TEST_FAIL("ASSERT_TRUE(%s) failed", #c);                                                  \
  } while (0)

#define ASSERT_EQ_INT(a, b)                                                                        \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (a_ != b_)                                                                                  \
      NBF_TEST_FAIL("%s == %s failed: %lld != %lld", #a, #b, a_, b_);                               \
  } while (0)

#define ASSERT_NE_INT(a, b)                                                                        \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (a_ == b_)                                                                                  \
      NBF_TEST_FAIL("%s != %s failed: both are %lld", #a, #b, a_);                                  \
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
