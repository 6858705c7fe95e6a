/*
 * ex_buf — a growable byte buffer for building generated source and
 * messages. Functions return 0, or -1 when memory ran out (the buffer
 * then keeps what it had).
 */
#ifndef EX_BUF_H
#define EX_BUF_H

#include <stddef.h>

typedef struct {
  char *data; /* NUL-terminated while len < cap */
  size_t len, cap;
} ex_buf_t;

int ex_buf_append(ex_buf_t *b, const char *s, size_t n);
int ex_buf_puts(ex_buf_t *b, const char *s);
int ex_buf_printf(ex_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the string to the caller (caller frees); the buffer is reset. */
char *ex_buf_take(ex_buf_t *b);
void ex_buf_free(ex_buf_t *b);

#endif
