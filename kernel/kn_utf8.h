/*
 * kn_utf8.h — UTF-8 for captured output and cursor offsets.
 *
 * Output read from the executor's stdout/stderr pipes arrives in arbitrary
 * chunks; a multi-byte character can be split between two reads. The
 * decoder keeps an incomplete trailing sequence for the next chunk and
 * replaces invalid bytes with U+FFFD, so every published `stream` text is
 * valid UTF-8 (JSON strings must be).
 *
 * Jupyter protocol 5.2+ counts cursor_pos in Unicode code points; the
 * executor wire (nbf_wire.h) counts bytes. The offset helpers convert.
 */
#ifndef KN_UTF8_H
#define KN_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "kn_util.h"

typedef struct kn_utf8_decoder {
  unsigned char pending[4]; /* start of an incomplete sequence */
  size_t npending;
} kn_utf8_decoder_t;

/* Decode len bytes of in (after any bytes pending from the last call) and
 * append valid UTF-8 to out. With final=false an incomplete sequence at
 * the end is kept for the next call; with final=true (end of stream) it is
 * replaced by U+FFFD. Invalid sequences become U+FFFD (one per bad byte).
 * Returns KN_ERR_NOMEM if out cannot grow. */
kn_result_t kn_utf8_decode(kn_utf8_decoder_t *d, const unsigned char *in, size_t len, bool final,
                           nbf_buf_t *out);

/* Byte offset of code point index cp in the NUL-free UTF-8 string s of
 * byte length len; clamped to len. */
size_t kn_utf8_byte_offset(const char *s, size_t len, size_t cp);

/* Code point index of byte offset b in s (len bytes); b clamped to len. A
 * byte offset inside a character counts that character as not reached. */
size_t kn_utf8_cp_offset(const char *s, size_t len, size_t b);

#endif
