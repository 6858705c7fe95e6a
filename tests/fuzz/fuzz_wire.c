/*
 * fuzz_wire — the kernel's wire decoder (kernel/kn_message.c kn_msg_parse
 * with kn_auth.c's HMAC-SHA256 check), as the kernel's sockets feed it.
 *
 * Input: a mode byte, then the multipart frames separated by '\n'.
 *   mode % 3 == 0: signed with the fixed key, the frames as given (random
 *                  signatures: the verifier must refuse them cleanly);
 *   mode % 3 == 1: the harness signs the 4 frames after the delimiter with
 *                  the fixed key, so the JSON parsing behind the check runs;
 *   mode % 3 == 2: no key (signatures are not checked).
 * A message that parses is serialized again and must parse again to the
 * same type (the kernel replies with what it parsed).
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include "kn_message.h"

#define MAX_FRAMES 64

static const unsigned char key[] = "0123456789abcdef-fuzz-key";

/* Replace the signature frame with the real one when there is room. */
static void sign(const kn_auth_t *a, fz_span_t *f, size_t n, char hex[KN_AUTH_HEX_LEN + 1]) {
  size_t d = 0, dlen = strlen(KN_DELIMITER);
  while (d < n && !(f[d].len == dlen && memcmp(f[d].data, KN_DELIMITER, dlen) == 0))
    d++;
  if (d == n || n - d < 6)
    return;
  kn_span_t parts[4];
  for (int i = 0; i < 4; i++)
    parts[i] = (kn_span_t){f[d + 2 + i].data, f[d + 2 + i].len};
  if (kn_auth_sign(a, parts, 4, hex) != KN_OK)
    abort();
  f[d + 1] = (fz_span_t){(const uint8_t *)hex, strlen(hex)};
}

/* serialize(parse(x)) parses again, to a message of the same type. */
static void round_trip(const kn_msg_t *m, const kn_auth_t *a) {
  kn_frames_t out = {0};
  if (kn_msg_serialize(m, a, &out) != KN_OK)
    abort();
  kn_span_t *sp = calloc(out.n + 1, sizeof *sp);
  if (!sp)
    abort();
  for (size_t i = 0; i < out.n; i++)
    sp[i] = (kn_span_t){out.v[i].data, out.v[i].len};
  kn_msg_t *again = NULL;
  char why[256];
  if (kn_msg_parse(sp, out.n, a, &again, why, sizeof why) != KN_OK) {
    fprintf(stderr, "fuzz_wire: a serialized message does not parse: %s\n", why);
    abort();
  }
  if (strcmp(kn_msg_type(m), kn_msg_type(again)) != 0 || strcmp(kn_msg_id(m), kn_msg_id(again)))
    abort();
  kn_msg_destroy(&again);
  free(sp);
  kn_frames_clear(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  static kn_auth_t *keyed, *open;
  if (!keyed) {
    keyed = kn_auth_new("hmac-sha256", key, sizeof key - 1);
    open = kn_auth_new("hmac-sha256", NULL, 0);
    if (!keyed || !open)
      abort();
  }
  int mode = data[0] % 3;
  const kn_auth_t *a = mode == 2 ? open : keyed;
  fz_span_t f[MAX_FRAMES];
  size_t n = fz_split(data + 1, size - 1, '\n', f, MAX_FRAMES);
  char hex[KN_AUTH_HEX_LEN + 1];
  if (mode == 1)
    sign(a, f, n, hex);
  kn_span_t sp[MAX_FRAMES];
  for (size_t i = 0; i < n; i++)
    sp[i] = (kn_span_t){f[i].data, f[i].len};
  kn_msg_t *m = NULL;
  char why[128];
  size_t why_len = 1 + data[0] % sizeof why; /* short buffers too */
  kn_result_t r = kn_msg_parse(sp, n, a, &m, why, why_len);
  if (r == KN_OK) {
    round_trip(m, a);
    kn_msg_destroy(&m);
  } else if (m) {
    abort(); /* a failure leaves nothing */
  }
  return 0;
}
