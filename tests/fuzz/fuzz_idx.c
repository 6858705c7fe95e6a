/*
 * fuzz_idx — the IDX (MNIST format) reader, runtime/core/acc_idx.c
 * acc_idx_read, from a file in a scratch directory.
 *
 * Input: a mode byte (bit 0: the file is gzip'd by the harness, so the
 * parser behind the decompression runs; else the bytes are the file), then
 * the file's content. A tensor that reads must be consistent: 1..4
 * dimensions, positive, their product the element count.
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include <zlib.h>

#include "nbfork.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  static char path[600];
  if (!path[0])
    snprintf(path, sizeof path, "%s/data.idx", fz_scratch());
  if (data[0] & 1) {
    gzFile g = gzopen(path, "wb1");
    if (!g || (size > 1 && gzwrite(g, data + 1, (unsigned)(size - 1)) <= 0) || gzclose(g) != Z_OK)
      abort();
  } else {
    fz_write(path, data + 1, size - 1);
  }
  acc_idx_t *idx = acc_idx_read(path);
  if (idx) {
    size_t count = 1;
    if (idx->ndim < 1 || idx->ndim > 4 || !idx->u8)
      abort();
    for (int d = 0; d < idx->ndim; d++) {
      if (idx->dims[d] < 1)
        abort();
      count *= (size_t)idx->dims[d];
    }
    if (count != idx->count)
      abort();
    volatile unsigned char sink = idx->u8[count - 1]; /* all of it is there */
    (void)sink;
    acc_idx_destroy(&idx);
  }
  return 0;
}
