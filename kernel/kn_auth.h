/*
 * kn_auth.h — message authentication (Jupyter messaging spec, "The Wire
 * Protocol"): signature = hex(HMAC-SHA256(key, header || parent_header ||
 * metadata || content)) over the exact serialized frames, lowercase hex.
 * An empty key disables signing: the signature frame is empty and is not
 * checked.
 *
 * Ownership: kn_auth_new copies the key; the caller keeps its buffer.
 * Not thread-safe: use one kn_auth_t per thread.
 */
#ifndef KN_AUTH_H
#define KN_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_result.h"

#define KN_AUTH_HEX_LEN 64 /* hex digits of an HMAC-SHA256 */

typedef struct kn_auth kn_auth_t;

/* One frame of bytes (not owned). */
typedef struct kn_span {
  const unsigned char *data;
  size_t len;
} kn_span_t;

/* New authenticator for scheme ("hmac-sha256"; NULL or "" means that too)
 * and key (key_len bytes, 0 = signing disabled). Returns NULL for an
 * unknown scheme or if OpenSSL cannot provide HMAC-SHA256. Caller owns the
 * result; free with kn_auth_destroy. */
kn_auth_t *kn_auth_new(const char *scheme, const unsigned char *key, size_t key_len);

/* Free *self_p and set it to NULL. NULL-safe. */
void kn_auth_destroy(kn_auth_t **self_p);

/* true when a key is set (messages are signed and checked). */
bool kn_auth_enabled(const kn_auth_t *a);

/* Sign n parts (normally the 4 JSON frames) into hex[KN_AUTH_HEX_LEN + 1],
 * NUL-terminated lowercase hex; hex = "" when signing is disabled. Returns
 * KN_ERR_SYSTEM if OpenSSL fails. Reuses one OpenSSL context: a kn_auth_t
 * signs and verifies from one thread at a time (the kernel's main loop). */
kn_result_t kn_auth_sign(const kn_auth_t *a, const kn_span_t *parts, size_t n,
                         char hex[KN_AUTH_HEX_LEN + 1]);

/* Check the received signature sig (sig_len bytes, hex, case-insensitive)
 * against the n parts, in constant time (CRYPTO_memcmp). Returns KN_OK,
 * or KN_ERR_AUTH when missing or wrong. Always KN_OK when disabled. */
kn_result_t kn_auth_verify(const kn_auth_t *a, const kn_span_t *parts, size_t n,
                           const unsigned char *sig, size_t sig_len);

#endif
