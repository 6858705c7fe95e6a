#include "ex_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(ex_buf_t *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1)
    cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d)
    return -1;
  b->data = d;
  b->cap = cap;
  return 0;
}

int ex_buf_append(ex_buf_t *b, const char *s, size_t n) {
  if (reserve(b, n))
    return -1;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
  return 0;
}

int ex_buf_puts(ex_buf_t *b, const char *s) {
  return ex_buf_append(b, s, strlen(s));
}

int ex_buf_printf(ex_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || reserve(b, (size_t)n))
    return -1;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

char *ex_buf_take(ex_buf_t *b) {
  char *d = b->data;
  if (!d)
    d = calloc(1, 1);
  b->data = NULL;
  b->len = b->cap = 0;
  return d;
}

void ex_buf_free(ex_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}
