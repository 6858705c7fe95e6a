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

kn_result_t kn_uuid4(char out[KN_UUID_LEN + 1]) {
  unsigned char b[16];
  if (random16(b) != KN_OK)
    return KN_ERR_SYSTEM;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  snprintf(out, KN_UUID_LEN + 1,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return KN_OK;
}

void kn_iso8601_now(char out[KN_DATE_LEN]) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  char base[24];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, KN_DATE_LEN, "%.19s.%06dZ", base, (int)(ts.tv_nsec / 1000) % 1000000);
}
