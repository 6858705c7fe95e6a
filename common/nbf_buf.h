/*
 * nbf_buf.h — the one growable byte buffer of nbfork (generated source,
 * messages, partial lines read from pipes). Zero-initialise ({0}) before
 * use. `data` is NUL-terminated whenever it is not NULL, so text can be
 * used as a string; binary data may hold NULs (use `len`).
 *
 * Functions that grow return 0, or -1 when memory ran out (the buffer
 * then keeps what it had). Part of nbfork_common; not installed.
 */
#ifndef NBF_BUF_H
#define NBF_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct nbf_buf {
  char *data; /* NULL until the first append */
  size_t len; /* bytes held, without the terminating NUL */
  size_t cap; /* bytes allocated */
} nbf_buf_t;

/* Make room for `extra` more bytes (and the NUL). 0 or -1. */
int nbf_buf_reserve(nbf_buf_t *b, size_t extra);
int nbf_buf_append(nbf_buf_t *b, const void *p, size_t n);
int nbf_buf_puts(nbf_buf_t *b, const char *s);
int nbf_buf_printf(nbf_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int nbf_buf_vprintf(nbf_buf_t *b, const char *fmt, va_list ap);
/* Drop the first n bytes (n > len drops all). */
void nbf_buf_consume(nbf_buf_t *b, size_t n);
/* Hand the string to the caller (caller frees; "" for an empty buffer,
 * NULL only when out of memory); the buffer is reset. */
char *nbf_buf_take(nbf_buf_t *b);
/* Free the storage and zero the struct. NULL-safe. */
void nbf_buf_free(nbf_buf_t *b);

#endif
