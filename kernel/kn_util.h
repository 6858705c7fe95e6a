/*
 * kn_util.h — small helpers shared by the kernel files: ids, clocks, and
 * byte buffers.
 */
#ifndef KN_UTIL_H
#define KN_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kn_result.h"

#define KN_UUID_LEN 36 /* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", no NUL */
#define KN_DATE_LEN 32 /* "2024-05-01T12:34:56.123456Z" + NUL fits */

/* Random (version 4) UUID, lowercase hex, into out[KN_UUID_LEN + 1]. Uses
 * OpenSSL's RAND_bytes. Returns KN_ERR_SYSTEM if the RNG fails. */
kn_result_t kn_uuid4(char out[KN_UUID_LEN + 1]);

/* Current UTC time as ISO 8601 with microseconds and a "Z" timezone (the
 * Jupyter messaging spec's header.date), into out[KN_DATE_LEN]. */
void kn_iso8601_now(char out[KN_DATE_LEN]);

/* Monotonic clock in milliseconds (CLOCK_MONOTONIC). */
int64_t kn_now_ms(void);

/* A growable byte buffer. Zero-initialise ({0}) before use. */
typedef struct kn_buf {
  unsigned char *data;
  size_t len;
  size_t cap;
} kn_buf_t;

/* Append n bytes. KN_ERR_NOMEM on allocation failure (buffer unchanged). */
kn_result_t kn_buf_append(kn_buf_t *b, const void *p, size_t n);
/* Drop the first n bytes (n <= len). */
void kn_buf_consume(kn_buf_t *b, size_t n);
/* Free the storage and zero the struct. NULL-safe. */
void kn_buf_free(kn_buf_t *b);

/* Duplicate a string; NULL on allocation failure or NULL input. */
char *kn_strdup(const char *s);

#endif
