/* kn_utf8.c — streaming UTF-8 sanitizer and offset conversion (see kn_utf8.h). */
#include "kn_utf8.h"

#include <string.h>

static const unsigned char REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};

/* Length of the valid sequence starting at p (avail bytes), or 0 if the
 * bytes are invalid, or -(needed) if the sequence is valid so far but
 * incomplete. RFC 3629: no overlongs, no surrogates, max U+10FFFF. */
static int seq_len(const unsigned char *p, size_t avail) {
  unsigned char c = p[0];
  int n;
  unsigned char lo = 0x80, hi = 0xBF; /* allowed range for the 2nd byte */
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0;
    if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90;
    if (c == 0xF4)
      hi = 0x8F;
  } else
    return 0;
  for (int i = 1; i < n; i++) {
    if ((size_t)i >= avail)
      return -n;
    unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (p[i] < lo_i || p[i] > hi_i)
      return 0;
  }
  return n;
}

static kn_result_t decode_span(const unsigned char *p, size_t len, bool final, nbf_buf_t *out,
                               size_t *consumed) {
  size_t i = 0, run = 0; /* run: start of the current valid run */
  while (i < len) {
    int n = seq_len(p + i, len - i);
    if (n > 0) {
      i += (size_t)n;
      continue;
    }
    kn_result_t r = kn_buf_add(out, p + run, i - run);
    if (r != KN_OK)
      return r;
    if (n < 0 && !final) { /* incomplete tail: keep it */
      *consumed = i;
      return KN_OK;
    }
    if ((r = kn_buf_add(out, REPLACEMENT, sizeof REPLACEMENT)) != KN_OK)
      return r;
    i += 1;
    run = i;
  }
  *consumed = len;
  return kn_buf_add(out, p + run, i - run);
}

kn_result_t kn_utf8_decode(kn_utf8_decoder_t *d, const unsigned char *in, size_t len, bool final,
                           nbf_buf_t *out) {
  size_t consumed = 0;
  kn_result_t r;
  if (d->npending) {
    /* Complete the pending sequence with at most 3 new bytes. */
    unsigned char tmp[8];
    size_t take = len < 4 ? len : 4;
    memcpy(tmp, d->pending, d->npending);
    if (take)
      memcpy(tmp + d->npending, in, take);
    size_t tlen = d->npending + take;
    int n = seq_len(tmp, tlen);
    if (n < 0 && !final) { /* still incomplete: all of in was taken */
      memcpy(d->pending, tmp, tlen);
      d->npending = tlen;
      return KN_OK;
    }
    size_t used; /* bytes of tmp this step decodes */
    if (n > 0) {
      if ((r = kn_buf_add(out, tmp, (size_t)n)) != KN_OK)
        return r;
      used = (size_t)n;
    } else {
      if ((r = kn_buf_add(out, REPLACEMENT, sizeof REPLACEMENT)) != KN_OK)
        return r;
      used = 1;
    }
    size_t old = d->npending;
    d->npending = 0;
    if (used < old) { /* leftover pending bytes: re-decode them first */
      unsigned char rest[4];
      size_t nrest = old - used;
      memcpy(rest, tmp + used, nrest);
      if ((r = kn_utf8_decode(d, rest, nrest, final && len == 0, out)) != KN_OK)
        return r;
      return kn_utf8_decode(d, in, len, final, out);
    }
    in += used - old;
    len -= used - old;
  }
  if ((r = decode_span(in, len, final, out, &consumed)) != KN_OK)
    return r;
  d->npending = len - consumed;
  if (d->npending)
    memcpy(d->pending, in + consumed, d->npending);
  return KN_OK;
}

size_t kn_utf8_byte_offset(const char *s, size_t len, size_t cp) {
  size_t i = 0, n = 0;
  while (i < len && n < cp) {
    i++;
    while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80)
      i++;
    n++;
  }
  return i;
}

size_t kn_utf8_cp_offset(const char *s, size_t len, size_t b) {
  if (b > len)
    b = len;
  size_t n = 0;
  for (size_t i = 0; i < b; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80)
      n++;
  /* A cut inside a character: that character is not reached. */
  if (b < len && b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80 && n > 0)
    n--;
  return n;
}
