/*
 * fuzz_util.h — helpers shared by the libFuzzer harnesses of tests/fuzz:
 * splitting an input into frames, and a private scratch directory for
 * the loaders that read files (removed at exit).
 *
 * Each harness is one file defining LLVMFuzzerTestOneInput; scripts/fuzz.sh
 * builds them (CMake option NBFORK_FUZZ, clang) and runs each on its seed
 * corpus in tests/fuzz/corpus/<harness>/.
 */
#ifndef NBF_FUZZ_UTIL_H
#define NBF_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A piece of the input (not owned). */
typedef struct {
  const uint8_t *data;
  size_t len;
} fz_span_t;

/* Split data at every byte `sep` into at most `max` spans; returns how
 * many (an empty input is one empty span). */
static inline size_t fz_split(const uint8_t *data, size_t size, uint8_t sep, fz_span_t *out,
                              size_t max) {
  size_t n = 0, start = 0;
  for (size_t i = 0; i <= size && n < max; i++) {
    if (i == size || data[i] == sep) {
      out[n].data = data + start;
      out[n].len = i - start;
      n++;
      start = i + 1;
    }
  }
  return n;
}

/* A NUL-terminated copy (caller frees). */
static inline char *fz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    abort();
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

static char fz_dir[512];

static int fz_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void fz_cleanup(void) {
  if (fz_dir[0])
    nftw(fz_dir, fz_rm, 8, FTW_DEPTH | FTW_PHYS);
}

/* This process's scratch directory (made on first use under $TMPDIR or
 * /tmp, removed at exit). */
static inline const char *fz_scratch(void) {
  if (!fz_dir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/nbfork-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fz_dir))
      abort();
    atexit(fz_cleanup);
  }
  return fz_dir;
}

/* Write `len` bytes to `path` (replacing it); aborts on an I/O error,
 * which is the harness's, not a finding. */
static inline void fz_write(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0)
    abort();
}

#endif
