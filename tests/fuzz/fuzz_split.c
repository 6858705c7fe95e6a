/*
 * fuzz_split — the executor's cell splitter and classifier
 * (kernel/exec/ex_split.c: ex_split, ex_split_is_complete,
 * ex_split_is_pragma, ex_split_defines_function).
 *
 * Input: a flag byte (bit 0: a C++/CUDA cell, EX_SPLIT_CXX; bit 1: no
 * known type names from earlier cells), then the cell's text. Every
 * chunk of a successful split must be well formed: its text non-NULL, its
 * line and column at least 1, its declarators named, a function's name,
 * signature and body present; a failed split holds nothing.
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include "ex_split.h"

/* Earlier cells' typedef names: those starting with an upper-case T. */
static int is_type(const char *name, void *ctx) {
  (void)ctx;
  return name[0] == 'T';
}

static void check(const ex_split_t *sp) {
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (!k->text || k->line < 1 || k->col < 1 || k->kind > EX_CHUNK_VERBATIM)
      abort();
    if (k->name)
      (void)ex_split_defines_function(sp, k->name);
    (void)ex_split_is_pragma(k->text);
    for (size_t d = 0; d < k->ndecls; d++)
      if (!k->decls[d].name || !k->decls[d].declarator)
        abort();
    if (k->kind == EX_CHUNK_FUNCTION && (!k->body || !k->signature || !k->name))
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  char *src = fz_cstr(data + 1, size - 1);
  int flags = data[0] & 1 ? EX_SPLIT_CXX : 0;
  ex_split_t sp = {0};
  char err[256];
  ex_result_t r = ex_split(src, flags, data[0] & 2 ? NULL : is_type, NULL, &sp, err, sizeof err);
  if (r == EX_OK) {
    check(&sp);
    ex_split_free(&sp);
  } else if (sp.count || sp.chunks) {
    abort(); /* `out` holds nothing after a failure */
  }
  (void)ex_split_is_complete(src);
  (void)ex_split_is_pragma(src);
  free(src);
  return 0;
}
