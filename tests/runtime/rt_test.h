/*
 * rt_test.h — what every runtime test includes: the one test registry
 * (tests/common/nbf_test.h: NBF_TEST / NBF_TEST_P / NBF_TEST_MAIN), the
 * one assert header (tests/common/nbf_assert.h) and the runtime-only
 * assertion below.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <stdlib.h>

#include "nbf_assert.h"
#include "nbf_param.h"
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

/* Whether the host collectives of `world` ranks sum in one order every
 * call, so that results may be compared bit for bit: 2 ranks (a sum of
 * two addends has one value), or shared memory on one node (the default:
 * the members' values are added in member order whatever the buffer's
 * size or algorithm). Gloo's all-reduce of more ranks
 * (NBFORK_SHM_COLLECTIVES=0) does not. */
static inline int rt_fixed_reduction_order(int world) {
  const char *v = getenv("NBFORK_SHM_COLLECTIVES");
  return world <= 2 || !v || !*v || nbf_truthy(v);
}

/* Read up to `cap` bytes of the file `path` into `buf` and return the
 * count, or fail the test naming the file. */
static inline size_t rt_read_file(const char *path, void *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f)
    NBF_TEST_FAIL("cannot read %s", path);
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

/* A rank's run for its parent to compare (the multi-rank GPU tests): a
 * header of hb bytes, then n floats, written to `path`; read back into
 * *head with the floats in a malloc'ed buffer. Fail the test on error. */
static inline void rt_write_run(const char *path, const void *head, size_t hb, const float *p,
                                size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    NBF_TEST_FAIL("cannot write %s", path);
  ASSERT_EQ(fwrite(head, hb, 1, f), 1);
  ASSERT_EQ(fwrite(p, sizeof(float), n, f), n);
  ASSERT_EQ(fclose(f), 0);
}

static inline float *rt_read_run(const char *path, void *head, size_t hb, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    NBF_TEST_FAIL("cannot read %s", path);
  float *p = malloc(n * sizeof(float));
  ASSERT_NOT_NULL(p);
  ASSERT_EQ(fread(head, hb, 1, f), 1);
  ASSERT_EQ(fread(p, sizeof(float), n, f), n);
  fclose(f);
  return p;
}

/* acc_new with ACC_CONFIG_INIT's settings but mixed_precision
 * `precision` ("no", "fp16", "bf16") and gradient_accumulation_steps
 * `accum`; NULL when acc_new fails (the caller asserts, or first sets an
 * error handler on what it got). */
static inline acc_t *rt_acc_new(const char *precision, int accum) {
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.mixed_precision = precision;
  cfg.gradient_accumulation_steps = accum;
  return acc_new(&cfg);
}

/* Read dir/a and dir/b (at most `cap` bytes each, into `ba` and `bb`, or
 * into buffers of its own when they are NULL), fail the test unless they
 * have the same length of more than 100 bytes, and return how many bytes
 * differ; *n gets the length. The resume tests compare an uninterrupted
 * run's parameters with a resumed run's this way. */
static inline size_t rt_compare_files(const char *dir, const char *a, const char *b,
                                      unsigned char *ba, unsigned char *bb, size_t cap, size_t *n) {
  unsigned char *own = ba ? NULL : malloc(2 * cap);
  if (!ba) {
    ASSERT_NOT_NULL(own);
    ba = own, bb = own + cap;
  }
  char pa[512], pb[512];
  snprintf(pa, sizeof pa, "%s/%s", dir, a);
  snprintf(pb, sizeof pb, "%s/%s", dir, b);
  size_t na = rt_read_file(pa, ba, cap), nb = rt_read_file(pb, bb, cap);
  ASSERT_EQ(na, nb);
  ASSERT_GT(na, 100);
  size_t diff = 0;
  for (size_t i = 0; i < na; i++)
    diff += ba[i] != bb[i];
  *n = na;
  free(own);
  return diff;
}

/* The trainer and checkpoint tests' synthetic classification data: n
 * rows of nin features, row i of class i % ncls, the features uniform in
 * [0, 1) (a fixed LCG, so every rank and run sees the same) plus 0.5 on
 * the features j with j % ncls == the class, so a small MLP can learn it. */
static inline void rt_make_data(float *x, int64_t *y, int n, int nin, int ncls) {
  uint32_t s = 12345;
  for (int i = 0; i < n; i++) {
    y[i] = i % ncls;
    for (int j = 0; j < nin; j++) {
      s = s * 1664525u + 1013904223u;
      x[i * nin + j] = (float)((s >> 8) & 0xffff) / 65536.0f + (j % ncls == y[i] ? 0.5f : 0.0f);
    }
  }
}

/* RT_TEST_ASAN: built with AddressSanitizer (gcc's -fsanitize=address or
 * clang's), for the few checks its allocator or address space changes:
 * it reserves terabytes of address space, and freed blocks wait in a
 * quarantine while fresh pages are faulted in. */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define RT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define RT_TEST_ASAN 1
#endif
#endif

#endif /* RT_TEST_H */
