/*
 * acc_idx.c — reader for the IDX format of MNIST / Fashion-MNIST
 * (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"): a 4-byte magic
 * 0x00 0x00 TYPE NDIM, NDIM big-endian uint32 dimensions, then the data
 * in row-major order. Files may be gzip'd (zlib's gzread reads plain
 * files too). Only TYPE 0x08 (unsigned byte) is supported, which is what
 * the (Fashion-)MNIST images (0x00000803) and labels (0x00000801) use.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "nbf_util.h"
#include "nbfork.h"

#define IDX_MAX_BYTES ((size_t)1 << 34) /* 16 GiB: anything larger is corrupt */

/* Read exactly n bytes, the bytes [base, base + n) of `total` (for the
 * message); returns 0, or -1 with a reason in `why`. */
static int read_exact(gzFile f, void *buf, size_t n, size_t base, size_t total, char *why,
                      size_t whylen) {
  unsigned char *p = buf;
  size_t got = 0;
  while (got < n) {
    unsigned chunk = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
    int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int zerr;
      const char *m = gzerror(f, &zerr);
      snprintf(why, whylen, "%s", zerr == Z_ERRNO ? NBF_STRERROR(errno) : m);
      return -1;
    }
    if (r == 0) {
      int zerr;
      const char *m = gzerror(f, &zerr);
      snprintf(why, whylen, "file ends after %zu of %zu bytes%s%s", base + got, total,
               zerr != Z_OK ? ": " : "", zerr != Z_OK ? m : "");
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

/* The `count` data bytes, in a buffer grown as they arrive (1 MiB, then
 * doubling): a corrupt header announcing gigabytes costs no more memory
 * than the file holds (tests/fuzz/fuzz_idx allocated 16 GiB for a 20-byte
 * file). NULL with why, and *oom set when memory ran out. */
static unsigned char *read_data(gzFile f, size_t count, int *oom, char *why, size_t whylen) {
  unsigned char *b = NULL;
  size_t cap = 0;
  *oom = 0;
  while (cap < count) {
    size_t next = cap ? cap * 2 : (size_t)1 << 20;
    next = next < count ? next : count;
    unsigned char *nb = realloc(b, next);
    if (!nb) {
      *oom = 1;
      free(b);
      return NULL;
    }
    b = nb;
    if (read_exact(f, b + cap, next - cap, cap, count, why, whylen) != 0) {
      free(b);
      return NULL;
    }
    cap = next;
  }
  return b;
}

static acc_idx_t *idx_fail(const char *path, gzFile f, acc_idx_t *idx, long offset, uint32_t magic,
                           const char *why) {
  fprintf(stderr,
          "acc_idx_read: %s: %s (at byte offset %ld of the uncompressed file, magic 0x%08x)\n",
          path, why, offset, (unsigned)magic);
  fflush(stderr);
  if (f)
    gzclose(f);
  acc_idx_destroy(&idx);
  return NULL;
}

acc_idx_t *acc_idx_read(const char *path) {
  if (!path || !*path) {
    fprintf(stderr, "acc_idx_read: no path given\n");
    return NULL;
  }
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fprintf(stderr, "acc_idx_read: cannot open %s: %s\n", path,
            errno ? NBF_STRERROR(errno) : "out of memory");
    return NULL;
  }
  gzbuffer(f, 1 << 17);
  char why[256];
  unsigned char hdr[4];
  if (read_exact(f, hdr, 4, 0, 4, why, sizeof why) != 0)
    return idx_fail(path, f, NULL, 0, 0, why);
  uint32_t magic = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
  if (hdr[0] != 0 || hdr[1] != 0)
    return idx_fail(path, f, NULL, 0, magic,
                    "not an IDX file (the magic must start with two zero bytes; expected "
                    "0x00000801 for labels or 0x00000803 for images)");
  if (hdr[2] != 0x08)
    return idx_fail(path, f, NULL, 2, magic,
                    "unsupported IDX data type (only unsigned byte, 0x08, is supported)");
  if (hdr[3] < 1 || hdr[3] > 4)
    return idx_fail(path, f, NULL, 3, magic, "unsupported number of dimensions (need 1..4)");
  acc_idx_t *idx = calloc(1, sizeof *idx);
  if (!idx)
    return idx_fail(path, f, NULL, 4, magic, "out of memory");
  idx->ndim = hdr[3];
  size_t count = 1;
  for (int d = 0; d < idx->ndim; d++) {
    unsigned char b[4];
    if (read_exact(f, b, 4, 0, 4, why, sizeof why) != 0)
      return idx_fail(path, f, idx, 4 + 4L * d, magic, why);
    uint32_t v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    if (v == 0 || v > INT32_MAX) {
      snprintf(why, sizeof why, "dimension %d has the impossible size %u", d, (unsigned)v);
      return idx_fail(path, f, idx, 4 + 4L * d, magic, why);
    }
    idx->dims[d] = (int)v;
    if (count > IDX_MAX_BYTES / v) {
      snprintf(why, sizeof why, "dimensions give more than %zu bytes of data", IDX_MAX_BYTES);
      return idx_fail(path, f, idx, 4 + 4L * d, magic, why);
    }
    count *= v;
  }
  idx->count = count;
  long data_off = 4 + 4L * idx->ndim;
  int oom;
  idx->u8 = read_data(f, count, &oom, why, sizeof why);
  if (!idx->u8 && oom)
    return idx_fail(path, f, idx, data_off, magic, "out of memory for the data");
  if (!idx->u8) {
    char msg[400];
    snprintf(msg, sizeof msg, "truncated or corrupt data (%s)", why);
    return idx_fail(path, f, idx, data_off, magic, msg);
  }
  unsigned char extra;
  int r = gzread(f, &extra, 1);
  if (r != 0) {
    snprintf(why, sizeof why,
             r > 0 ? "more bytes than the header's dimensions announce"
                   : "corrupt compressed data after the last element");
    return idx_fail(path, f, idx, data_off + (long)count, magic, why);
  }
  gzclose(f);
  return idx;
}

void acc_idx_destroy(acc_idx_t **idx_p) {
  if (!idx_p || !*idx_p)
    return;
  free((*idx_p)->u8);
  free(*idx_p);
  *idx_p = NULL;
}
