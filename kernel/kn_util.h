/*
 * kn_util.h — small helpers shared by the kernel files: message ids and
 * dates. The clock (nbf_now_ms), the byte buffer (nbf_buf_t) and error
 * text (NBF_STRERROR) are the shared ones of nbfork_common.
 */
#ifndef KN_UTIL_H
#define KN_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kn_result.h"
#include "nbf_buf.h"
#include "nbf_util.h"

#define KN_UUID_LEN 36 /* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", no NUL */
#define KN_DATE_LEN 32 /* "2024-05-01T12:34:56.123456Z" + NUL fits */

/* Random (version 4) UUID, lowercase hex, into out[KN_UUID_LEN + 1]. Uses
 * OpenSSL's RAND_bytes (drawn for 64 ids at a time, per thread). Returns
 * KN_ERR_SYSTEM if the RNG fails. */
kn_result_t kn_uuid4(char out[KN_UUID_LEN + 1]);

/* Current UTC time as ISO 8601 with microseconds and a "Z" timezone (the
 * Jupyter messaging spec's header.date), into out[KN_DATE_LEN]. */
void kn_iso8601_now(char out[KN_DATE_LEN]);

/* The same for the time *ts (CLOCK_REALTIME; years 0-9999), e.g.
 * "2024-05-01T12:34:56.123456Z". */
void kn_iso8601_at(const struct timespec *ts, char out[KN_DATE_LEN]);

/* nbf_buf_append in the kernel's result terms: KN_OK, or KN_ERR_NOMEM
 * (the buffer then keeps what it had). */
static inline kn_result_t kn_buf_add(nbf_buf_t *b, const void *p, size_t n) {
  return nbf_buf_append(b, p, n) == 0 ? KN_OK : KN_ERR_NOMEM;
}

#endif
