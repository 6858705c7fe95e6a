/* kn_util.c — message ids and dates (see kn_util.h). */
#define _GNU_SOURCE
#include "kn_util.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KN_UUID_POOL 64 /* ids drawn per RAND_bytes call */

/* OpenSSL 3.0's RAND_bytes makes a getpid(2) per call (its fork check):
 * one per message sent. The bytes are drawn for KN_UUID_POOL ids at once
 * instead, from the same generator. Per thread; the kernel never forks
 * without exec, so no child can hand out the same bytes. */
static kn_result_t random16(unsigned char b[16]) {
  static _Thread_local unsigned char pool[16 * KN_UUID_POOL];
  static _Thread_local size_t used = sizeof pool;
  if (used == sizeof pool) {
    if (RAND_bytes(pool, sizeof pool) != 1)
      return KN_ERR_SYSTEM;
    used = 0;
  }
  memcpy(b, pool + used, 16);
  OPENSSL_cleanse(pool + used, 16);
  used += 16;
  return KN_OK;
}

/* Lowercase hex of b[0..n) into out (2n chars, no NUL). */
static char *hex(char *out, const unsigned char *b, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    *out++ = digits[b[i] >> 4];
    *out++ = digits[b[i] & 15];
  }
  return out;
}

kn_result_t kn_uuid4(char out[KN_UUID_LEN + 1]) {
  unsigned char b[16];
  if (random16(b) != KN_OK)
    return KN_ERR_SYSTEM;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  /* 8-4-4-4-12 by hand: snprintf with 16 arguments was the larger part of
   * making a message's header */
  char *p = hex(out, b, 4);
  *p++ = '-';
  p = hex(p, b + 4, 2);
  *p++ = '-';
  p = hex(p, b + 6, 2);
  *p++ = '-';
  p = hex(p, b + 8, 2);
  *p++ = '-';
  p = hex(p, b + 10, 6);
  *p = '\0';
  return KN_OK;
}

/* v as exactly `width` decimal digits (v >= 0, fits) into out. */
static char *digits(char *out, long v, int width) {
  for (int i = width - 1; i >= 0; i--, v /= 10)
    out[i] = (char)('0' + v % 10);
  return out + width;
}

void kn_iso8601_at(const struct timespec *ts, char out[KN_DATE_LEN]) {
  struct tm tm;
  gmtime_r(&ts->tv_sec, &tm);
  /* by hand, not strftime + snprintf: one per message sent */
  char *p = digits(out, tm.tm_year + 1900L, 4);
  *p++ = '-';
  p = digits(p, tm.tm_mon + 1, 2);
  *p++ = '-';
  p = digits(p, tm.tm_mday, 2);
  *p++ = 'T';
  p = digits(p, tm.tm_hour, 2);
  *p++ = ':';
  p = digits(p, tm.tm_min, 2);
  *p++ = ':';
  p = digits(p, tm.tm_sec, 2);
  *p++ = '.';
  p = digits(p, (ts->tv_nsec / 1000) % 1000000, 6);
  *p++ = 'Z';
  *p = '\0';
}

void kn_iso8601_now(char out[KN_DATE_LEN]) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  kn_iso8601_at(&ts, out);
}
