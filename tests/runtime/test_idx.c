/*
 * test_idx.c — the IDX reader on the real Fashion-MNIST files
 * (Debian dataset-fashion-mnist) and on broken files.
 *   test_idx fashion_mnist_labels|fashion_mnist_images|plain_file|
 *            bad_magic|truncated|trailing|missing
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "nbfork.h"
#include "rt_test.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static char g_dir[256];

/* The files are removed by each case; the directory goes at exit. */
static void remove_dir(void) {
  rmdir(g_dir);
}

static const char *tmp_path(const char *name) {
  static char p[512];
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/nbfork-idx-XXXXXX");
    ASSERT_NOT_NULL(mkdtemp(g_dir));
    atexit(remove_dir);
  }
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  return p;
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* Run acc_idx_read with stderr captured into `msg`. */
static acc_idx_t *read_capturing(const char *path, char *msg, size_t msglen) {
  fflush(stderr);
  int saved = dup(2);
  FILE *cap = tmpfile();
  dup2(fileno(cap), 2);
  acc_idx_t *idx = acc_idx_read(path);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(cap);
  size_t n = fread(msg, 1, msglen - 1, cap);
  msg[n] = 0;
  fclose(cap);
  fprintf(stderr, "(captured) %s", msg);
  return idx;
}

/* Write `len` bytes to `path`, check that acc_idx_read refuses the file
 * and return what it printed (valid until the next call). */
static const char *refused(const char *path, const void *data, size_t len) {
  static char msg[2048];
  write_file(path, data, len);
  ASSERT_NULL(read_capturing(path, msg, sizeof msg));
  return msg;
}

static void need(const char *path) {
  if (access(path, R_OK) != 0)
    NBF_TEST_SKIP("%s not installed (Debian package dataset-fashion-mnist)", path);
}

/* Fashion-MNIST's file `name` (skipping where the package is missing),
 * checked to hold `ndim` dimensions `dims` and their product of items. */
static acc_idx_t *read_fmnist(const char *name, int ndim, const int *dims) {
  char p[512];
  snprintf(p, sizeof p, "%s%s", FMNIST, name);
  need(p);
  acc_idx_t *idx = acc_idx_read(p);
  ASSERT_NOT_NULL(idx);
  ASSERT_EQ(idx->ndim, ndim);
  size_t count = 1;
  for (int d = 0; d < ndim; d++) {
    ASSERT_EQ(idx->dims[d], dims[d]);
    count *= (size_t)dims[d];
  }
  ASSERT_EQ(idx->count, count);
  return idx;
}

NBF_TEST(fashion_mnist_labels) {
  acc_idx_t *idx = read_fmnist("t10k-labels-idx1-ubyte.gz", 1, (const int[]){10000});
  int per_class[10] = {0};
  for (size_t i = 0; i < idx->count; i++) {
    ASSERT_LT(idx->u8[i], 10);
    per_class[idx->u8[i]]++;
  }
  for (int c = 0; c < 10; c++)
    ASSERT_EQ(per_class[c], 1000); /* the test set is balanced */
  /* first labels of t10k: 9 (ankle boot), 2, 1, 1, 6 */
  ASSERT_EQ(idx->u8[0], 9);
  ASSERT_EQ(idx->u8[1], 2);
  ASSERT_EQ(idx->u8[2], 1);
  acc_idx_destroy(&idx);
  ASSERT_NULL(idx);
  acc_idx_destroy(&idx); /* NULL-safe */
}

NBF_TEST(fashion_mnist_images) {
  acc_idx_t *idx = read_fmnist("t10k-images-idx3-ubyte.gz", 3, (const int[]){10000, 28, 28});
  unsigned long long sum = 0;
  unsigned mx = 0;
  for (size_t i = 0; i < idx->count; i++) {
    sum += idx->u8[i];
    mx = idx->u8[i] > mx ? idx->u8[i] : mx;
  }
  ASSERT_EQ(mx, 255);
  double mean = (double)sum / (double)idx->count / 255.0;
  ASSERT_NEAR(mean, 0.2868, 0.01); /* Fashion-MNIST pixel mean ~0.286 */
  acc_idx_destroy(&idx);
}

NBF_TEST(plain_file) {
  unsigned char f[4 + 8 + 6] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  const char *p = tmp_path("plain.idx");
  write_file(p, f, sizeof f);
  acc_idx_t *idx = acc_idx_read(p);
  ASSERT_NOT_NULL(idx);
  ASSERT_EQ(idx->ndim, 2);
  ASSERT_EQ(idx->dims[0], 2);
  ASSERT_EQ(idx->dims[1], 3);
  ASSERT_EQ(idx->count, 6);
  ASSERT_EQ(idx->u8[5], 6);
  acc_idx_destroy(&idx);
  unlink(p);
  /* the same, gzip'd by zlib */
  p = tmp_path("plain.idx.gz");
  gzFile g = gzopen(p, "wb");
  gzwrite(g, f, sizeof f);
  gzclose(g);
  idx = acc_idx_read(p);
  ASSERT_NOT_NULL(idx);
  ASSERT_EQ(idx->count, 6);
  acc_idx_destroy(&idx);
  unlink(p);
}

NBF_TEST(bad_magic) {
  const char *msg;
  const char *p = tmp_path("bad.idx");
  msg = refused(p, "GIF89a..........", 16);
  ASSERT_CONTAINS(msg, p);
  ASSERT_CONTAINS(msg, "not an IDX file");
  ASSERT_CONTAINS(msg, "magic 0x47494638");
  unsigned char f[] = {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0}; /* float data */
  msg = refused(p, f, sizeof f);
  ASSERT_CONTAINS(msg, "unsupported IDX data type");
  unsigned char z[] = {0, 0, 8, 1, 0, 0, 0, 0}; /* zero-length dimension */
  msg = refused(p, z, sizeof z);
  ASSERT_CONTAINS(msg, "dimension 0");
  unlink(p);
}

NBF_TEST(truncated) {
  const char *msg;
  const char *src = FMNIST "t10k-labels-idx1-ubyte.gz";
  need(src);
  FILE *f = fopen(src, "rb");
  unsigned char buf[2000];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ASSERT_EQ(n, sizeof buf);
  const char *p = tmp_path("trunc.gz");
  msg = refused(p, buf, sizeof buf); /* a gzip stream cut short */
  ASSERT_CONTAINS(msg, "truncated or corrupt");
  ASSERT_CONTAINS(msg, "magic 0x00000801");
  /* header announcing more data than there is (plain file) */
  unsigned char h[] = {0, 0, 8, 1, 0, 0, 0, 100, 1, 2, 3};
  msg = refused(p, h, sizeof h);
  ASSERT_CONTAINS(msg, "3 of 100 bytes");
  unlink(p);
}

NBF_TEST(trailing) {
  const char *msg;
  unsigned char h[] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3};
  const char *p = tmp_path("trailing.idx");
  msg = refused(p, h, sizeof h);
  ASSERT_CONTAINS(msg, "more bytes than the header");
  unlink(p);
}

/* A header announcing 16 GiB in a 20-byte file (tests/fuzz/fuzz_idx found
 * the reader allocating the announced size first: corpus/idx/
 * oom-16gib-header): refused as truncated. In a child whose address space
 * is limited to 1 GiB more than it uses, so allocating the announced size
 * would fail as "out of memory" (not under AddressSanitizer, which
 * reserves terabytes of address space). */
NBF_TEST(huge_header_small_file) {
  static const unsigned char h[] = {0, 0, 8, 3, 0, 0, 0x40, 0, 0, 0x10,
                                    0, 0, 0, 0, 0, 1, 1,    2, 3, 4};
  const char *p = tmp_path("huge.idx");
  const char *msg = refused(p, h, sizeof h);
  ASSERT_CONTAINS(msg, "file ends after 4 of 17179869184 bytes");
#ifndef RT_TEST_ASAN
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1)
      _exit(2);
    fclose(f);
    struct rlimit rl = {(rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (1ul << 30), RLIM_INFINITY};
    rl.rlim_max = rl.rlim_cur;
    if (setrlimit(RLIMIT_AS, &rl) != 0)
      _exit(2);
    char m[2048];
    acc_idx_t *idx = read_capturing(p, m, sizeof m);
    _exit(!idx && strstr(m, "file ends after 4 of 17179869184 bytes") ? 0 : 1);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
#endif
  unlink(p);
}

NBF_TEST(missing) {
  char msg[2048];
  ASSERT_NULL(read_capturing("/nonexistent/nothing.gz", msg, sizeof msg));
  ASSERT_CONTAINS(msg, "/nonexistent/nothing.gz");
  ASSERT_CONTAINS(msg, "No such file");
  ASSERT_NULL(read_capturing(NULL, msg, sizeof msg));
}

NBF_TEST_MAIN()
