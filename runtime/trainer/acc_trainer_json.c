/*
 * acc_trainer_json.c — trainer_state.json as Transformers writes it
 * (TrainerState.save_to_json: json.dumps(indent=2, sort_keys=True) + "\n"),
 * with every float in Python's shortest round-trip repr (0.53, not
 * jansson's 0.53000000000000003).
 *
 * jansson formats all reals with one fixed precision (JSON_REAL_PRECISION),
 * and no single precision is right for every value. So the document is
 * built with each real as a placeholder string ("\x01" + its index in a
 * side table) and dumped by jansson, which writes a control byte as the
 * escape \u0001; the placeholders are then replaced by the values' Python
 * repr. Only an opening quote (not one escaped inside a string: `"\"\u0001`
 * is a string of the document's own holding a quote, then the byte) followed
 * by \u0001, digits and the closing quote is a placeholder; a string of the
 * document's own (a path, a metric name) can look like one only if it
 * starts with that byte and digits (acc_metrics_put refuses such names),
 * and the number of replacements is checked.
 * Non-finite values are written as null (Python writes NaN/Infinity,
 * which JSON parsers, jansson's included, refuse to read back).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_trainer_internal.h"
#include "nbf_buf.h"

json_t *tr_json_real(tr_reals_t *r, double v) {
  if (!isfinite(v))
    return json_null();
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 64;
    double *nv = realloc(r->v, cap * sizeof *nv);
    if (!nv)
      return NULL;
    r->v = nv;
    r->cap = cap;
  }
  char key[32];
  snprintf(key, sizeof key, "\x01%zu", r->n);
  r->v[r->n++] = v;
  return json_string(key);
}

void tr_reals_free(tr_reals_t *r) {
  free(r->v);
  *r = (tr_reals_t){0};
}

char *tr_json_dumps(const json_t *o, const tr_reals_t *r) {
  char *raw = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (!raw)
    return NULL;
  static const char mark[] = "\"\\u0001";
  nbf_buf_t b = {0};
  size_t used = 0;
  int oom = 0;
  const char *p = raw;
  for (const char *q; (q = strstr(p, mark));) {
    size_t slashes = 0; /* an odd count before the quote escapes it */
    while (q - slashes > raw && q[-1 - (ptrdiff_t)slashes] == '\\')
      slashes++;
    const char *digits = q + sizeof mark - 1;
    char *end = (char *)digits;
    unsigned long long i = *digits >= '0' && *digits <= '9' ? strtoull(digits, &end, 10) : 0;
    if (slashes % 2 || end == digits || *end != '"') {
      /* text of a string of the document's own (tests/fuzz/fuzz_trainer_state) */
      oom |= nbf_buf_append(&b, p, (size_t)(q + 1 - p));
      p = q + 1;
      continue;
    }
    if (i >= r->n)
      goto bad;
    char num[40];
    tr_float_repr(r->v[i], num, sizeof num);
    oom |= nbf_buf_append(&b, p, (size_t)(q - p)) || nbf_buf_puts(&b, num);
    used++;
    p = end + 1;
  }
  oom |= nbf_buf_puts(&b, p) || nbf_buf_puts(&b, "\n");
  if (used != r->n || oom)
    goto bad;
  free(raw);
  return nbf_buf_take(&b);
bad:
  free(raw);
  nbf_buf_free(&b);
  return NULL;
}
