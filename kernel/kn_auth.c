/* kn_auth.c — HMAC-SHA256 signing with OpenSSL 3 EVP_MAC (see kn_auth.h). */
#include "kn_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_util.h"

struct kn_auth {
  EVP_MAC *mac;      /* NULL when disabled */
  EVP_MAC_CTX *base; /* initialised with the key; re-initialised per message */
  bool enabled;
};

kn_auth_t *kn_auth_new(const char *scheme, const unsigned char *key, size_t key_len) {
  if (scheme && *scheme && strcmp(scheme, "hmac-sha256") != 0)
    return NULL;
  kn_auth_t *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  if (key_len == 0)
    return a;
  a->enabled = true;
  a->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  if (!a->mac)
    goto err;
  a->base = EVP_MAC_CTX_new(a->mac);
  if (!a->base)
    goto err;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(a->base, key, key_len, params) != 1)
    goto err;
  return a;
err:
  kn_auth_destroy(&a);
  return NULL;
}

void kn_auth_destroy(kn_auth_t **self_p) {
  kn_auth_t *a = NBF_TAKE(self_p);
  if (!a)
    return;
  EVP_MAC_CTX_free(a->base);
  EVP_MAC_free(a->mac);
  free(a);
}

bool kn_auth_enabled(const kn_auth_t *a) {
  return a && a->enabled;
}

kn_result_t kn_auth_sign(const kn_auth_t *a, const kn_span_t *parts, size_t n,
                         char hex[KN_AUTH_HEX_LEN + 1]) {
  hex[0] = '\0';
  if (!kn_auth_enabled(a))
    return KN_OK;
  /* Re-initialised with the key it holds (NULL key: OpenSSL keeps it),
   * not duplicated: EVP_MAC_CTX_dup allocated and freed a context per
   * message. The kernel signs from its main thread only. */
  EVP_MAC_CTX *ctx = a->base;
  if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1)
    return KN_ERR_SYSTEM;
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t mdlen = 0;
  kn_result_t r = KN_ERR_SYSTEM;
  for (size_t i = 0; i < n; i++)
    if (EVP_MAC_update(ctx, parts[i].data, parts[i].len) != 1)
      goto out;
  if (EVP_MAC_final(ctx, md, &mdlen, sizeof md) != 1 || mdlen * 2 != KN_AUTH_HEX_LEN)
    goto out;
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < mdlen; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[KN_AUTH_HEX_LEN] = '\0';
  r = KN_OK;
out:
  return r;
}

kn_result_t kn_auth_verify(const kn_auth_t *a, const kn_span_t *parts, size_t n,
                           const unsigned char *sig, size_t sig_len) {
  if (!kn_auth_enabled(a))
    return KN_OK;
  if (!sig || sig_len != KN_AUTH_HEX_LEN)
    return KN_ERR_AUTH;
  char expect[KN_AUTH_HEX_LEN + 1];
  if (kn_auth_sign(a, parts, n, expect) != KN_OK)
    return KN_ERR_AUTH;
  unsigned char got[KN_AUTH_HEX_LEN];
  for (size_t i = 0; i < KN_AUTH_HEX_LEN; i++) {
    unsigned char c = sig[i];
    got[i] = (c >= 'A' && c <= 'F') ? (unsigned char)(c + 32) : c;
  }
  return CRYPTO_memcmp(expect, got, KN_AUTH_HEX_LEN) == 0 ? KN_OK : KN_ERR_AUTH;
}
