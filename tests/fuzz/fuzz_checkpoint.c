/*
 * fuzz_checkpoint — the checkpoint loader, runtime/model/acc_checkpoint.c
 * acc_load_state (header, CRC-32, section table, records, the checks
 * against the live model, optimizer and registered objects, and the
 * apply step), one process, from files in a scratch directory.
 *
 * Input: a flag byte, a 2-byte little-endian length L, then L bytes for
 * the shared file (nbfork_state.bin) and the rest for the rank file
 * (nbfork_rank0.bin). Flags:
 *   bit 0 / bit 1: the shared / rank bytes are a payload (the section
 *                  table) that the harness wraps in a valid header with
 *                  its CRC, so the parsing behind the CRC check runs;
 *                  otherwise they are the whole file;
 *   bit 2: load into the model; bit 3: with an optimizer, bit 4: AdamW
 *          (else SGD with momentum).
 * The model is 6-5-3 (53 parameters), one object "counter" (4 bytes) is
 * registered.
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include <zlib.h>

#include "nbfork.h"

static acc_t *acc;
static acc_mlp_t *model;
static acc_optim_t *sgd, *adam;
static int counter;

static void setup(void) {
  acc = acc_new(NULL);
  const int sizes[] = {6, 5, 3};
  model = acc ? acc_mlp_new(acc, sizes, 2, 4) : NULL;
  if (!model)
    abort();
  size_t np = acc_mlp_num_params(model);
  sgd = acc_sgd_new(acc_mlp_params(model), acc_mlp_grads(model), np, 0.1f, 0.9f, 0.0f);
  adam = acc_adamw_new(acc_mlp_params(model), acc_mlp_grads(model), np, 0.1f, 0.9f, 0.99f, 1e-8f,
                       0.0f);
  if (!sgd || !adam || acc_register_for_checkpointing(acc, "counter", &counter, 4) != ACC_OK)
    abort();
}

/* Write `path`: the bytes as they are, or wrapped as a payload of `kind`. */
static void put_file(const char *path, const uint8_t *p, size_t n, int wrap, uint32_t kind) {
  if (!wrap) {
    fz_write(path, p, n);
    return;
  }
  unsigned char *b = malloc(40 + n);
  if (!b)
    abort();
  uint32_t ver = 1, bom = 0x01020304u, rank = 0, zero = 0;
  uint64_t plen = n;
  uint32_t crc = (uint32_t)crc32(crc32(0L, NULL, 0), p, (uInt)n);
  memcpy(b, "NBFSTATE", 8);
  memcpy(b + 8, &ver, 4);
  memcpy(b + 12, &bom, 4);
  memcpy(b + 16, &kind, 4);
  memcpy(b + 20, &rank, 4);
  memcpy(b + 24, &plen, 8);
  memcpy(b + 32, &crc, 4);
  memcpy(b + 36, &zero, 4);
  if (n)
    memcpy(b + 40, p, n);
  fz_write(path, b, 40 + n);
  free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3)
    return 0;
  if (!acc)
    setup();
  static char dir[600], spath[700], rpath[700];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s", fz_scratch());
    snprintf(spath, sizeof spath, "%s/nbfork_state.bin", dir);
    snprintf(rpath, sizeof rpath, "%s/nbfork_rank0.bin", dir);
  }
  int flags = data[0];
  size_t l = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3;
  size -= 3;
  if (l > size)
    l = size;
  put_file(spath, data, l, flags & 1, 0);
  put_file(rpath, data + l, size - l, flags & 2, 1);
  acc_optim_t *opt = flags & 8 ? (flags & 16 ? adam : sgd) : NULL;
  acc_result_t r = acc_load_state(acc, dir, flags & 4 ? model : NULL, opt);
  if (r != ACC_OK && !*acc_last_error(acc))
    abort(); /* every refusal says why */
  return 0;
}
