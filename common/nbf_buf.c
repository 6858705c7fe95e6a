/*
 * nbf_buf.c — see nbf_buf.h.
 */
#include "nbf_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nbf_buf_reserve(nbf_buf_t *b, size_t extra) {
  if (extra > (size_t)-1 / 2 - b->len)
    return -1;
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

int nbf_buf_append(nbf_buf_t *b, const void *p, size_t n) {
  if (nbf_buf_reserve(b, n))
    return -1;
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
  return 0;
}

int nbf_buf_puts(nbf_buf_t *b, const char *s) {
  return nbf_buf_append(b, s, strlen(s));
}

int nbf_buf_vprintf(nbf_buf_t *b, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n < 0 || nbf_buf_reserve(b, (size_t)n)) {
    va_end(again);
    return -1;
  }
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
  va_end(again);
  b->len += (size_t)n;
  return 0;
}

int nbf_buf_printf(nbf_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = nbf_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return r;
}

void nbf_buf_consume(nbf_buf_t *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
  }
  if (b->data)
    b->data[b->len] = 0;
}

char *nbf_buf_take(nbf_buf_t *b) {
  char *d = b->data ? b->data : calloc(1, 1);
  b->data = NULL;
  b->len = b->cap = 0;
  return d;
}

void nbf_buf_free(nbf_buf_t *b) {
  if (!b)
    return;
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}
