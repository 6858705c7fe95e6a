/*
 * test_kernel_unit.c — unit tests of the kernel's testable pieces:
 * authentication (fixed HMAC vectors), message framing, connection-file
 * errors, UTF-8 stream decoding, history, and request handlers through a
 * mock transport (no sockets, no executor).
 *
 * Usage: test_kernel_unit NAME   (one case; ctest runs each as its own test)
 *        test_kernel_unit        (all cases)
 */
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "../common/nbf_test.h"
#include "kn_auth.h"
#include "kn_connection.h"
#include "kn_handlers.h"
#include "kn_history.h"
#include "kn_kernel.h"
#include "kn_message.h"
#include "kn_transport.h"
#include "kn_utf8.h"
#include "kn_util.h"

/* ------------------------------------------------------------------ auth */

static kn_span_t span(const char *s, size_t n) {
  kn_span_t sp = {(const unsigned char *)s, n};
  return sp;
}

/* Expected digests computed once with Python's hmac module:
 *   h = hmac.new(KEY, digestmod=hashlib.sha256)
 *   for p in PARTS: h.update(p)
 *   h.hexdigest()
 * (/usr/bin/python3, Debian 12). The third is the well-known
 * HMAC_SHA256("key", "The quick brown fox jumps over the lazy dog"). */
NBF_TEST(auth_vectors) {
  char hex[KN_AUTH_HEX_LEN + 1];
  const char *k1 = "secret-key";
  kn_auth_t *a = kn_auth_new("hmac-sha256", (const unsigned char *)k1, strlen(k1));
  ASSERT_TRUE(a && kn_auth_enabled(a));
  const char *h = "{\"msg_id\":\"1\",\"msg_type\":\"kernel_info_request\"}";
  kn_span_t p1[4] = {span(h, strlen(h)), span("{}", 2), span("{}", 2), span("{}", 2)};
  ASSERT_EQ(kn_auth_sign(a, p1, 4, hex), KN_OK);
  ASSERT_EQ_STR(hex, "d24613c901272087168eb7a17b371d2f54d14044dca08737846f4baf86191b6a");
  kn_auth_destroy(&a);
  ASSERT_TRUE(a == NULL);

  /* key with NUL and 0xff bytes, 100 bytes (longer than the SHA-256 block) */
  unsigned char k2[100];
  for (int i = 0; i < 20; i++)
    memcpy(k2 + 5 * i, "k\0ey\xff", 5);
  a = kn_auth_new("hmac-sha256", k2, sizeof k2);
  kn_span_t p2[4] = {span("a", 1), span("", 0), span("\xe2\x82\xac", 3),
                     span("{\"code\":\"x\"}", 12)};
  ASSERT_EQ(kn_auth_sign(a, p2, 4, hex), KN_OK);
  ASSERT_EQ_STR(hex, "984c161a783ae5183c5249f8470ef9adacaf2d55fed61e832ce1f72c4d6bbb53");
  kn_auth_destroy(&a);

  a = kn_auth_new(NULL, (const unsigned char *)"key", 3);
  const char *fox = "The quick brown fox jumps over the lazy dog";
  kn_span_t p3[1] = {span(fox, strlen(fox))};
  ASSERT_EQ(kn_auth_sign(a, p3, 1, hex), KN_OK);
  ASSERT_EQ_STR(hex, "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
  kn_auth_destroy(&a);
}

/* kn_auth_sign reuses its context (re-initialised per message): many
 * signatures in a row, of different parts, of a failed verify between,
 * each equal to the one a fresh kn_auth_t gives. */
NBF_TEST(auth_sign_reused_context_equals_fresh) {
  const char *key = "secret-key";
  kn_auth_t *a = kn_auth_new("hmac-sha256", (const unsigned char *)key, strlen(key));
  ASSERT_TRUE(a);
  const char *texts[] = {"{\"msg_id\":\"1\"}", "", "{}", "\xe2\x82\xac", "{\"code\":\"1\"}"};
  for (int round = 0; round < 20; round++) {
    kn_span_t p[4];
    for (int i = 0; i < 4; i++) {
      const char *t = texts[(round + i * 3) % 5];
      p[i] = span(t, strlen(t));
    }
    char got[KN_AUTH_HEX_LEN + 1], want[KN_AUTH_HEX_LEN + 1];
    ASSERT_EQ(kn_auth_sign(a, p, (size_t)(1 + round % 4), got), KN_OK);
    kn_auth_t *fresh = kn_auth_new("hmac-sha256", (const unsigned char *)key, strlen(key));
    ASSERT_EQ(kn_auth_sign(fresh, p, (size_t)(1 + round % 4), want), KN_OK);
    kn_auth_destroy(&fresh);
    ASSERT_EQ_STR(got, want);
    if (round % 3 == 0) /* a rejected signature leaves nothing behind */
      ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)want, 63), KN_ERR_AUTH);
  }
  kn_auth_destroy(&a);
}

NBF_TEST(auth_verify) {
  const char *key = "secret-key";
  kn_auth_t *a = kn_auth_new("hmac-sha256", (const unsigned char *)key, strlen(key));
  const char *h = "{\"msg_id\":\"1\",\"msg_type\":\"kernel_info_request\"}";
  kn_span_t p[4] = {span(h, strlen(h)), span("{}", 2), span("{}", 2), span("{}", 2)};
  const char *good = "d24613c901272087168eb7a17b371d2f54d14044dca08737846f4baf86191b6a";
  const char *upper = "D24613C901272087168EB7A17B371D2F54D14044DCA08737846F4BAF86191B6A";
  const char *bad = "d24613c901272087168eb7a17b371d2f54d14044dca08737846f4baf86191b6b";
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)good, 64), KN_OK);
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)upper, 64), KN_OK);
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)bad, 64), KN_ERR_AUTH);
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)good, 63), KN_ERR_AUTH);
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)"", 0), KN_ERR_AUTH);
  p[3] = span("{ }", 3); /* same JSON, other bytes: signatures cover bytes */
  ASSERT_EQ(kn_auth_verify(a, p, 4, (const unsigned char *)good, 64), KN_ERR_AUTH);
  kn_auth_destroy(&a);

  ASSERT_TRUE(kn_auth_new("hmac-md5", (const unsigned char *)"k", 1) == NULL);
  kn_auth_t *off = kn_auth_new("hmac-sha256", NULL, 0);
  ASSERT_TRUE(off && !kn_auth_enabled(off));
  char hex[KN_AUTH_HEX_LEN + 1];
  ASSERT_EQ(kn_auth_sign(off, p, 4, hex), KN_OK);
  ASSERT_EQ_STR(hex, "");
  ASSERT_EQ(kn_auth_verify(off, p, 4, NULL, 0), KN_OK);
  kn_auth_destroy(&off);
}

/* --------------------------------------------------------------- message */

static kn_span_t *spans_of(const kn_frames_t *f) {
  kn_span_t *s = calloc(f->n, sizeof *s);
  for (size_t i = 0; i < f->n; i++)
    s[i] = (kn_span_t){f->v[i].data, f->v[i].len};
  return s;
}

/* kn_msg_serialize_cached gives the frames kn_msg_serialize gives, for
 * messages sharing a parent header, after the parent changes, with no
 * parent, and back to the first (a new text, not a stale one). */
NBF_TEST(message_serialize_cached_equals_uncached) {
  kn_auth_t *a = kn_auth_new("hmac-sha256", (const unsigned char *)"k", 1);
  json_t *p1 = json_pack("{s:s, s:s, s:s}", "msg_id", "p-1", "msg_type", "execute_request",
                         "date", "2024-01-01T00:00:00.000000Z");
  json_t *p2 = json_pack("{s:s, s:s}", "msg_id", "p-2", "msg_type", "kernel_info_request");
  json_t *parents[] = {p1, p1, p2, NULL, p2, p1, p1};
  kn_dump_cache_t cache = {0};
  for (size_t i = 0; i < sizeof parents / sizeof parents[0]; i++) {
    kn_msg_t *m = kn_msg_new("status", "sess", "user", parents[i],
                             json_pack("{s:s, s:i}", "execution_state", "busy", "i", (int)i));
    ASSERT_TRUE(m);
    kn_frames_t want = {0}, got = {0};
    ASSERT_EQ(kn_msg_serialize(m, a, &want), KN_OK);
    ASSERT_EQ(kn_msg_serialize_cached(m, a, &cache, &got), KN_OK);
    ASSERT_EQ(got.n, want.n);
    for (size_t j = 0; j < want.n; j++)
      ASSERT_EQ_MEM(got.v[j].data, got.v[j].len, want.v[j].data, want.v[j].len);
    kn_frames_clear(&want);
    kn_frames_clear(&got);
    kn_msg_destroy(&m);
  }
  kn_dump_cache_clear(&cache);
  ASSERT_TRUE(cache.obj == NULL && cache.text == NULL);
  json_decref(p1);
  json_decref(p2);
  kn_auth_destroy(&a);
}

NBF_TEST(message_roundtrip) {
  kn_auth_t *a = kn_auth_new("hmac-sha256", (const unsigned char *)"k", 1);
  json_t *parent = json_pack("{s:s, s:s}", "msg_id", "p-1", "msg_type", "execute_request");
  kn_msg_t *m = kn_msg_new(
      "execute_reply", "sess", "user", parent,
      json_pack("{s:s, s:i, s:s}", "status", "ok", "execution_count", 3, "text", "h\xc3\xa9llo"));
  json_decref(parent);
  ASSERT_TRUE(m);
  kn_frames_push(&m->ids, "id-1", 4);
  kn_frames_push(&m->ids, "\0\x01\x02", 3);
  kn_frames_push(&m->buffers, "BUF", 3);
  ASSERT_EQ_STR(kn_msg_type(m), "execute_reply");
  ASSERT_EQ(strlen(kn_msg_id(m)), 36);
  ASSERT_EQ_STR(json_string_value(json_object_get(m->header, "version")), "5.3");
  const char *date = json_string_value(json_object_get(m->header, "date"));
  ASSERT_TRUE(date && strlen(date) == 27 && date[10] == 'T' && date[26] == 'Z');

  kn_frames_t f = {0};
  ASSERT_EQ(kn_msg_serialize(m, a, &f), KN_OK);
  ASSERT_EQ(f.n, 2 + 1 + 1 + 4 + 1);
  ASSERT_EQ_MEM(f.v[2].data, f.v[2].len, "<IDS|MSG>", 9);
  ASSERT_EQ(f.v[3].len, 64);

  kn_span_t *s = spans_of(&f);
  kn_msg_t *back = NULL;
  char why[256];
  ASSERT_EQ(kn_msg_parse(s, f.n, a, &back, why, sizeof why), KN_OK);
  ASSERT_EQ(back->ids.n, 2);
  ASSERT_EQ_MEM(back->ids.v[1].data, back->ids.v[1].len, "\0\x01\x02", 3);
  ASSERT_TRUE(json_equal(back->header, m->header));
  ASSERT_TRUE(json_equal(back->parent_header, m->parent_header));
  ASSERT_TRUE(json_equal(back->content, m->content));
  ASSERT_EQ(back->buffers.n, 1);
  ASSERT_EQ_MEM(back->buffers.v[0].data, back->buffers.v[0].len, "BUF", 3);
  kn_msg_destroy(&back);

  /* tampered content: rejected */
  unsigned char saved = f.v[7].data[1];
  f.v[7].data[1] = 'X';
  s[7].data = f.v[7].data;
  ASSERT_EQ(kn_msg_parse(s, f.n, a, &back, why, sizeof why), KN_ERR_AUTH);
  ASSERT_TRUE(back == NULL);
  f.v[7].data[1] = saved;

  /* wrong key: rejected; no delimiter / too few frames: protocol errors */
  kn_auth_t *other = kn_auth_new("hmac-sha256", (const unsigned char *)"other", 5);
  ASSERT_EQ(kn_msg_parse(s, f.n, other, &back, why, sizeof why), KN_ERR_AUTH);
  ASSERT_EQ_STR(why, "invalid signature");
  kn_auth_destroy(&other);
  ASSERT_EQ(kn_msg_parse(s, 2, a, &back, why, sizeof why), KN_ERR_PROTOCOL);
  ASSERT_EQ(kn_msg_parse(s, 6, a, &back, why, sizeof why), KN_ERR_PROTOCOL);

  free(s);
  kn_frames_clear(&f);
  kn_msg_destroy(&m);
  ASSERT_TRUE(m == NULL);
  kn_auth_destroy(&a);
}

NBF_TEST(message_unsigned) {
  kn_auth_t *none = kn_auth_new("", NULL, 0);
  kn_auth_t *key = kn_auth_new("hmac-sha256", (const unsigned char *)"k", 1);
  kn_msg_t *m = kn_msg_new("status", "s", "u", NULL, NULL);
  kn_frames_t f = {0};
  ASSERT_EQ(kn_msg_serialize(m, none, &f), KN_OK);
  ASSERT_EQ(f.n, 6);
  ASSERT_EQ(f.v[1].len, 0); /* empty signature */
  kn_span_t *s = spans_of(&f);
  kn_msg_t *back = NULL;
  ASSERT_EQ(kn_msg_parse(s, f.n, none, &back, NULL, 0), KN_OK);
  json_t *empty = json_object();
  ASSERT_TRUE(json_equal(back->content, empty));
  json_decref(empty);
  kn_msg_destroy(&back);
  /* a kernel with a key drops an unsigned message */
  ASSERT_EQ(kn_msg_parse(s, f.n, key, &back, NULL, 0), KN_ERR_AUTH);
  free(s);
  kn_frames_clear(&f);
  kn_msg_destroy(&m);
  kn_auth_destroy(&none);
  kn_auth_destroy(&key);
}

NBF_TEST(message_bad_json) {
  kn_auth_t *none = kn_auth_new("", NULL, 0);
  const char *frames[] = {"<IDS|MSG>", "", "{\"msg_type\":\"x\"}", "{}", "{}", "[1]"};
  kn_span_t s[6];
  for (int i = 0; i < 6; i++)
    s[i] = span(frames[i], strlen(frames[i]));
  kn_msg_t *m = NULL;
  char why[256];
  ASSERT_EQ(kn_msg_parse(s, 6, none, &m, why, sizeof why), KN_ERR_PROTOCOL);
  ASSERT_TRUE(strstr(why, "content") != NULL);
  s[5] = span("{}", 2);
  s[2] = span("{}", 2);
  ASSERT_EQ(kn_msg_parse(s, 6, none, &m, why, sizeof why), KN_ERR_PROTOCOL);
  ASSERT_TRUE(strstr(why, "msg_type") != NULL);
  kn_auth_destroy(&none);
}

/* ------------------------------------------------------------ connection */

/* jupyter_client writes connection files 0600; any group/other bit is
 * warned about, naming the file, the mode and chmod 600. */
NBF_TEST(connection_mode_checked) {
  char path[] = "/tmp/nbf-conn-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  char msg[1024] = "";
  ASSERT_EQ(chmod(path, 0600), 0);
  ASSERT_EQ(kn_connection_check_mode(path, msg, sizeof msg), 0);
  ASSERT_EQ(chmod(path, 0644), 0);
  ASSERT_EQ(kn_connection_check_mode(path, msg, sizeof msg), 1);
  ASSERT_CONTAINS(msg, "is readable by other users (mode 0644)");
  ASSERT_CONTAINS(msg, path);
  ASSERT_CONTAINS(msg, "chmod 600");
  ASSERT_EQ(chmod(path, 0620), 0);
  ASSERT_EQ(kn_connection_check_mode(path, msg, sizeof msg), 1);
  ASSERT_CONTAINS(msg, "is writable by other users (mode 0620)");
  ASSERT_EQ(chmod(path, 0666), 0);
  ASSERT_EQ(kn_connection_check_mode(path, msg, sizeof msg), 1);
  ASSERT_CONTAINS(msg, "readable and writable");
  unlink(path);
  ASSERT_EQ(kn_connection_check_mode(path, msg, sizeof msg), 0); /* missing: load says so */
}

NBF_TEST(connection_ok) {
  kn_connection_t c;
  kn_connection_error_t e;
  const char *ok = "{\"shell_port\":5001,\"control_port\":5002,\"stdin_port\":5003,"
                   "\"iopub_port\":5004,\"hb_port\":5005,\"ip\":\"127.0.0.1\","
                   "\"key\":\"abc\",\"transport\":\"tcp\",\"signature_scheme\":\"hmac-sha256\","
                   "\"kernel_name\":\"nbfork\"}";
  ASSERT_EQ(kn_connection_parse(ok, &c, &e), KN_OK);
  ASSERT_EQ(c.ports[KN_PORT_HB], 5005);
  ASSERT_EQ(c.key_len, 3);
  char ep[128];
  ASSERT_EQ(kn_connection_endpoint(&c, KN_PORT_SHELL, ep, sizeof ep), KN_OK);
  ASSERT_EQ_STR(ep, "tcp://127.0.0.1:5001");
  kn_connection_clear(&c);

  const char *ipc = "{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,"
                    "\"iopub_port\":4,\"hb_port\":5,\"ip\":\"/tmp/kernel-x\","
                    "\"key\":\"\",\"transport\":\"ipc\"}";
  ASSERT_EQ(kn_connection_parse(ipc, &c, &e), KN_OK);
  ASSERT_EQ(kn_connection_endpoint(&c, KN_PORT_IOPUB, ep, sizeof ep), KN_OK);
  ASSERT_EQ_STR(ep, "ipc:///tmp/kernel-x-4");
  ASSERT_EQ(c.key_len, 0);
  ASSERT_EQ_STR(c.signature_scheme, "hmac-sha256");
  kn_connection_clear(&c);
}

NBF_TEST(connection_errors) {
  static const struct {
    const char *json, *field;
  } cases[] = {
      {"{\"shell_port\":1", "(json)"},
      {"[1,2]", "(json)"},
      {"{\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,\"hb_port\":5,\"key\":\"\"}",
       "shell_port"},
      {"{\"shell_port\":\"1\",\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5,\"key\":\"\"}",
       "shell_port"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":70000,\"key\":\"\"}",
       "hb_port"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5}",
       "key"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5,\"key\":7}",
       "key"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5,\"key\":\"k\",\"signature_scheme\":\"hmac-md5\"}",
       "signature_scheme"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5,\"key\":\"k\",\"transport\":\"udp\"}",
       "transport"},
      {"{\"shell_port\":1,\"control_port\":2,\"stdin_port\":3,\"iopub_port\":4,"
       "\"hb_port\":5,\"key\":\"k\",\"ip\":5}",
       "ip"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kn_connection_t c;
    kn_connection_error_t e;
    ASSERT_EQ(kn_connection_parse(cases[i].json, &c, &e), KN_ERR_INVALID);
    ASSERT_EQ_STR(e.field, cases[i].field);
    ASSERT_TRUE(e.text[0] != '\0');
    ASSERT_TRUE(c.key == NULL);
  }
  kn_connection_t c;
  kn_connection_error_t e;
  ASSERT_EQ(kn_connection_load("/nonexistent/kernel-1.json", &c, &e), KN_ERR_SYSTEM);
  ASSERT_EQ_STR(e.field, "(file)");
  ASSERT_TRUE(strstr(e.text, "No such file") != NULL);
  kn_connection_parse("{\n\"shell_port\": }", &c, &e);
  ASSERT_EQ(e.line, 2);
}

/* ------------------------------------------------------------------ utf8 */

NBF_TEST(utf8_split) {
  kn_utf8_decoder_t d = {0};
  nbf_buf_t out = {0};
  /* "é" = C3 A9 split across reads; "€" = E2 82 AC split into 3 reads */
  ASSERT_EQ(kn_utf8_decode(&d, (const unsigned char *)"h\xc3", 2, false, &out), KN_OK);
  ASSERT_EQ_MEM(out.data, out.len, "h", 1);
  ASSERT_EQ(kn_utf8_decode(&d, (const unsigned char *)"\xa9llo \xe2", 6, false, &out), KN_OK);
  ASSERT_EQ_MEM(out.data, out.len, "h\xc3\xa9llo ", 7);
  ASSERT_EQ(kn_utf8_decode(&d, (const unsigned char *)"\x82", 1, false, &out), KN_OK);
  ASSERT_EQ(kn_utf8_decode(&d, (const unsigned char *)"\xac!", 2, false, &out), KN_OK);
  ASSERT_EQ_MEM(out.data, out.len, "h\xc3\xa9llo \xe2\x82\xac!", 11);
  /* 4-byte emoji one byte at a time */
  const char *emoji = "\xf0\x9f\x98\x80";
  nbf_buf_consume(&out, out.len);
  for (int i = 0; i < 4; i++)
    kn_utf8_decode(&d, (const unsigned char *)emoji + i, 1, false, &out);
  ASSERT_EQ_MEM(out.data, out.len, emoji, 4);
  nbf_buf_free(&out);
}

NBF_TEST(utf8_invalid) {
  kn_utf8_decoder_t d = {0};
  nbf_buf_t out = {0};
  /* stray continuation, overlong C0 80, surrogate ED A0 80, 0xFF */
  const char in[] = "a\x80"
                    "b\xc0\x80"
                    "c\xed\xa0\x80"
                    "d\xff";
  kn_utf8_decode(&d, (const unsigned char *)in, sizeof in - 1, false, &out);
  const char want[] = "a\xef\xbf\xbd"
                      "b\xef\xbf\xbd\xef\xbf\xbd"
                      "c\xef\xbf\xbd\xef\xbf\xbd"
                      "\xef\xbf\xbd"
                      "d\xef\xbf\xbd";
  ASSERT_EQ_MEM(out.data, out.len, want, sizeof want - 1);
  /* an incomplete sequence followed by ASCII, and one left at end of stream */
  nbf_buf_consume(&out, out.len);
  kn_utf8_decode(&d, (const unsigned char *)"\xe2\x82", 2, false, &out);
  kn_utf8_decode(&d, (const unsigned char *)"x", 1, false, &out);
  ASSERT_EQ_MEM(out.data, out.len, "\xef\xbf\xbd\xef\xbf\xbdx", 7);
  nbf_buf_consume(&out, out.len);
  kn_utf8_decode(&d, (const unsigned char *)"y\xf0\x9f", 3, false, &out);
  ASSERT_EQ_MEM(out.data, out.len, "y", 1);
  kn_utf8_decode(&d, NULL, 0, true, &out);
  ASSERT_EQ_MEM(out.data, out.len, "y\xef\xbf\xbd\xef\xbf\xbd", 7);
  ASSERT_EQ(d.npending, 0);
  nbf_buf_free(&out);
}

NBF_TEST(utf8_offsets) {
  const char *s = "a\xc3\xa9"
                  "b\xe2\x82\xac"
                  "c"; /* a é b € c: 5 code points, 8 bytes */
  size_t n = strlen(s);
  ASSERT_EQ(kn_utf8_byte_offset(s, n, 0), 0);
  ASSERT_EQ(kn_utf8_byte_offset(s, n, 2), 3);
  ASSERT_EQ(kn_utf8_byte_offset(s, n, 4), 7);
  ASSERT_EQ(kn_utf8_byte_offset(s, n, 99), 8);
  ASSERT_EQ(kn_utf8_cp_offset(s, n, 3), 2);
  ASSERT_EQ(kn_utf8_cp_offset(s, n, 8), 5);
  ASSERT_EQ(kn_utf8_cp_offset(s, n, 5), 3); /* inside the euro sign */
}

/* --------------------------------------------------------------- history */

NBF_TEST(history) {
  kn_history_t *h = kn_history_new();
  kn_history_add(h, 1, "int x = 1;");
  kn_history_add(h, 2, "printf(\"%d\", x);");
  kn_history_add(h, 3, "int x = 1;");
  kn_history_add(h, 4, "x++;\nx");
  kn_history_set_output(h, 4, "2");
  json_t *r = kn_history_tail(h, 2, false);
  ASSERT_EQ(json_array_size(r), 2);
  ASSERT_EQ(json_integer_value(json_array_get(json_array_get(r, 0), 1)), 3);
  json_decref(r);
  r = kn_history_tail(h, 1, true);
  json_t *io = json_array_get(json_array_get(r, 0), 2);
  ASSERT_EQ_STR(json_string_value(json_array_get(io, 1)), "2");
  json_decref(r);
  r = kn_history_range(h, 0, 2, 4, false);
  ASSERT_EQ(json_array_size(r), 2);
  ASSERT_EQ(json_integer_value(json_array_get(json_array_get(r, 1), 1)), 3);
  json_decref(r);
  r = kn_history_range(h, 7, 0, 0, false);
  ASSERT_EQ(json_array_size(r), 0);
  json_decref(r);
  r = kn_history_search(h, "int*", 0, false, false);
  ASSERT_EQ(json_array_size(r), 2);
  json_decref(r);
  r = kn_history_search(h, "int*", 0, true, false);
  ASSERT_EQ(json_array_size(r), 1);
  ASSERT_EQ(json_integer_value(json_array_get(json_array_get(r, 0), 1)), 3);
  json_decref(r);
  r = kn_history_search(h, "*x*", 1, false, false); /* '*' spans the newline */
  ASSERT_EQ(json_array_size(r), 1);
  ASSERT_EQ(json_integer_value(json_array_get(json_array_get(r, 0), 1)), 4);
  json_decref(r);
  kn_history_destroy(&h);
  ASSERT_TRUE(h == NULL);
}

/* ------------------------------------------------- handlers, mock transport */

typedef struct mock {
  kn_msg_t *sent[64];
  kn_channel_t ch[64];
  int n;
  kn_msg_t *inbox[8]; /* shell messages recv() hands out */
  int nin;
} mock_t;

static kn_result_t mock_send(void *self, kn_channel_t ch, const kn_msg_t *m) {
  mock_t *mk = self;
  kn_msg_t *copy =
      kn_msg_new(kn_msg_type(m), "s", "u", m->parent_header, json_deep_copy(m->content));
  kn_msg_copy_ids(copy, m);
  mk->ch[mk->n] = ch;
  mk->sent[mk->n++] = copy;
  return KN_OK;
}

static kn_result_t mock_recv(void *self, kn_channel_t ch, kn_msg_t **out) {
  mock_t *mk = self;
  if (ch != KN_CH_SHELL || mk->nin == 0)
    return KN_ERR_AGAIN;
  *out = mk->inbox[0];
  memmove(mk->inbox, mk->inbox + 1, (size_t)(--mk->nin) * sizeof mk->inbox[0]);
  return KN_OK;
}

static void mock_clear(mock_t *mk) {
  for (int i = 0; i < mk->n; i++)
    kn_msg_destroy(&mk->sent[i]);
  mk->n = 0;
}

static kn_msg_t *request(const char *type, json_t *content) {
  kn_msg_t *m = kn_msg_new(type, "client-session", "tester", NULL, content);
  kn_frames_push(&m->ids, "client-id", 9);
  return m;
}

static const char *parent_id(const kn_msg_t *m) {
  return json_string_value(json_object_get(m->parent_header, "msg_id"));
}

/* busy, ..., idle on iopub, all with parent req; returns the index of the reply. */
static int expect_wrapped(mock_t *mk, const char *req_id, const char *reply_type,
                          kn_channel_t reply_ch) {
  ASSERT_TRUE(mk->n >= 3);
  ASSERT_EQ_STR(kn_msg_type(mk->sent[0]), "status");
  ASSERT_EQ_STR(json_string_value(json_object_get(mk->sent[0]->content, "execution_state")),
                "busy");
  ASSERT_EQ_STR(kn_msg_type(mk->sent[mk->n - 1]), "status");
  ASSERT_EQ_STR(json_string_value(json_object_get(mk->sent[mk->n - 1]->content, "execution_state")),
                "idle");
  int reply = -1;
  for (int i = 0; i < mk->n; i++) {
    ASSERT_EQ_STR(parent_id(mk->sent[i]), req_id);
    if (strcmp(kn_msg_type(mk->sent[i]), reply_type) == 0 && mk->ch[i] == reply_ch)
      reply = i;
  }
  ASSERT_TRUE(reply > 0);
  ASSERT_EQ(mk->sent[reply]->ids.n, 1);
  ASSERT_EQ_MEM(mk->sent[reply]->ids.v[0].data, mk->sent[reply]->ids.v[0].len, "client-id", 9);
  return reply;
}

static kn_kernel_t *mock_kernel(mock_t *mk) {
  memset(mk, 0, sizeof *mk);
  kn_io_t io = {mock_send, mock_recv, mk};
  kn_kernel_t *k = kn_kernel_new(io, NULL); /* no executor */
  ASSERT_TRUE(k);
  return k;
}

NBF_TEST(handler_kernel_info) {
  mock_t mk;
  kn_kernel_t *k = mock_kernel(&mk);
  kn_msg_t *req = request("kernel_info_request", NULL);
  char id[64];
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_CONTROL, req); /* control: handled at once */
  int r = expect_wrapped(&mk, id, "kernel_info_reply", KN_CH_CONTROL);
  json_t *c = mk.sent[r]->content;
  ASSERT_EQ_STR(json_string_value(json_object_get(c, "protocol_version")), "5.3");
  ASSERT_EQ_STR(json_string_value(json_object_get(c, "implementation")), "nbfork");
  json_t *li = json_object_get(c, "language_info");
  ASSERT_EQ_STR(json_string_value(json_object_get(li, "name")), "c");
  ASSERT_EQ_STR(json_string_value(json_object_get(li, "mimetype")), "text/x-csrc");
  ASSERT_EQ_STR(json_string_value(json_object_get(li, "file_extension")), ".c");
  mock_clear(&mk);
  kn_kernel_destroy(&k);
}

NBF_TEST(handler_no_executor) {
  mock_t mk;
  kn_kernel_t *k = mock_kernel(&mk);
  /* is_complete -> unknown; complete -> no matches at the cursor */
  kn_msg_t *req = request("is_complete_request", json_pack("{s:s}", "code", "int x"));
  char id[64];
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_SHELL, req);
  kn_kernel_process_queue(k);
  int r = expect_wrapped(&mk, id, "is_complete_reply", KN_CH_SHELL);
  ASSERT_EQ_STR(json_string_value(json_object_get(mk.sent[r]->content, "status")), "unknown");
  mock_clear(&mk);

  req = request("complete_request", json_pack("{s:s, s:i}", "code", "\xc3\xa9pr", "cursor_pos", 3));
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_SHELL, req);
  kn_kernel_process_queue(k);
  r = expect_wrapped(&mk, id, "complete_reply", KN_CH_SHELL);
  json_t *c = mk.sent[r]->content;
  ASSERT_EQ(json_array_size(json_object_get(c, "matches")), 0);
  ASSERT_EQ(json_integer_value(json_object_get(c, "cursor_start")), 3);
  ASSERT_EQ(json_integer_value(json_object_get(c, "cursor_end")), 3);
  mock_clear(&mk);

  /* execute: busy, execute_input, error, reply(error), idle; count grows */
  req = request("execute_request", json_pack("{s:s}", "code", "int x = 1;"));
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_SHELL, req);
  kn_kernel_process_queue(k);
  r = expect_wrapped(&mk, id, "execute_reply", KN_CH_SHELL);
  ASSERT_EQ(mk.n, 5);
  ASSERT_EQ_STR(kn_msg_type(mk.sent[1]), "execute_input");
  ASSERT_EQ_STR(kn_msg_type(mk.sent[2]), "error");
  c = mk.sent[r]->content;
  ASSERT_EQ_STR(json_string_value(json_object_get(c, "status")), "error");
  ASSERT_EQ_STR(json_string_value(json_object_get(c, "ename")), "ExecutorUnavailable");
  ASSERT_EQ(json_integer_value(json_object_get(c, "execution_count")), 1);
  mock_clear(&mk);

  /* silent: only busy, reply, idle; count unchanged */
  req = request("execute_request", json_pack("{s:s, s:b}", "code", "x", "silent", 1));
  kn_kernel_on_message(k, KN_CH_SHELL, req);
  kn_kernel_process_queue(k);
  ASSERT_EQ(mk.n, 3);
  ASSERT_EQ(json_integer_value(json_object_get(mk.sent[1]->content, "execution_count")), 1);
  mock_clear(&mk);
  kn_kernel_destroy(&k);
}

NBF_TEST(handler_stop_on_error) {
  mock_t mk;
  kn_kernel_t *k = mock_kernel(&mk);
  /* Three executes queued; the first fails (no executor), so the other
   * two are aborted; the kernel_info between them is still answered. */
  kn_kernel_on_message(k, KN_CH_SHELL, request("execute_request", json_pack("{s:s}", "code", "a")));
  mk.inbox[mk.nin++] = request("execute_request", json_pack("{s:s}", "code", "b"));
  mk.inbox[mk.nin++] = request("kernel_info_request", NULL);
  mk.inbox[mk.nin++] = request("execute_request", json_pack("{s:s}", "code", "c"));
  kn_kernel_process_queue(k);
  const char *statuses[8];
  int nreplies = 0;
  for (int i = 0; i < mk.n; i++)
    if (mk.ch[i] == KN_CH_SHELL)
      statuses[nreplies++] = json_string_value(json_object_get(mk.sent[i]->content, "status"));
  ASSERT_EQ(nreplies, 4);
  ASSERT_EQ_STR(statuses[0], "error");
  ASSERT_EQ_STR(statuses[1], "aborted");
  ASSERT_EQ_STR(statuses[2], "ok"); /* kernel_info */
  ASSERT_EQ_STR(statuses[3], "aborted");
  ASSERT_EQ(k->execution_count, 1); /* aborted cells get no count */
  mock_clear(&mk);
  kn_kernel_destroy(&k);
}

NBF_TEST(handler_history) {
  mock_t mk;
  kn_kernel_t *k = mock_kernel(&mk);
  for (int i = 0; i < 3; i++)
    kn_kernel_on_message(
        k, KN_CH_SHELL,
        request("execute_request", json_pack("{s:s, s:b}", "code", i == 1 ? "puts(x);" : "int x;",
                                             "stop_on_error", 0)));
  kn_kernel_process_queue(k);
  mock_clear(&mk);
  kn_msg_t *req =
      request("history_request", json_pack("{s:s, s:s, s:i, s:b}", "hist_access_type", "search",
                                           "pattern", "int*", "n", 10, "unique", 1));
  char id[64];
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_SHELL, req);
  kn_kernel_process_queue(k);
  int r = expect_wrapped(&mk, id, "history_reply", KN_CH_SHELL);
  json_t *hist = json_object_get(mk.sent[r]->content, "history");
  ASSERT_EQ(json_array_size(hist), 1);
  ASSERT_EQ(json_integer_value(json_array_get(json_array_get(hist, 0), 1)), 3);
  mock_clear(&mk);

  kn_kernel_on_message(
      k, KN_CH_SHELL,
      request("history_request", json_pack("{s:s, s:i}", "hist_access_type", "tail", "n", 2)));
  kn_kernel_process_queue(k);
  hist = json_object_get(mk.sent[1]->content, "history");
  ASSERT_EQ(json_array_size(hist), 2);
  ASSERT_EQ_STR(json_string_value(json_array_get(json_array_get(hist, 0), 2)), "puts(x);");
  mock_clear(&mk);
  kn_kernel_destroy(&k);
}

NBF_TEST(handler_shutdown) {
  mock_t mk;
  kn_kernel_t *k = mock_kernel(&mk);
  kn_msg_t *req = request("shutdown_request", json_pack("{s:b}", "restart", 1));
  char id[64];
  snprintf(id, sizeof id, "%s", kn_msg_id(req));
  kn_kernel_on_message(k, KN_CH_CONTROL, req);
  int r = expect_wrapped(&mk, id, "shutdown_reply", KN_CH_CONTROL);
  ASSERT_TRUE(json_is_true(json_object_get(mk.sent[r]->content, "restart")));
  ASSERT_TRUE(k->stop && k->restart);
  mock_clear(&mk);
  kn_kernel_destroy(&k);
}

/* --------------------------------------------------------------- registry */

NBF_TEST_MAIN()

/* Send one unsigned kernel_info_request from a DEALER. */
static void dealer_send(void *d) {
  const char *frames[] = {"<IDS|MSG>", "", "{\"msg_id\":\"m\",\"msg_type\":\"kernel_info_request\"}",
                          "{}", "{}", "{}"};
  for (int i = 0; i < 6; i++)
    zmq_send(d, frames[i], strlen(frames[i]), i < 5 ? ZMQ_SNDMORE : 0);
}

/* Answer req on shell through io (a send on the socket). */
static kn_result_t reply_on_shell(kn_io_t io, const kn_msg_t *req) {
  kn_msg_t *r = kn_msg_new("kernel_info_reply", "sess", "user", req->header, json_object());
  kn_result_t res = r ? kn_msg_copy_ids(r, req) : KN_ERR_NOMEM;
  if (res == KN_OK)
    res = io.send(io.self, KN_CH_SHELL, r);
  kn_msg_destroy(&r);
  return res;
}

/* Wait as kn_server.c does: poll the channel's ZMQ_FD, mark it signalled,
 * ask kn_transport_readable; true once it says a message waits (5 s). */
static bool wait_readable(kn_transport_t *t, kn_channel_t ch) {
  for (int i = 0; i < 50; i++) {
    if (kn_transport_readable(t, ch))
      return true;
    struct pollfd p = {.fd = kn_transport_fd(t, ch), .events = POLLIN};
    if (poll(&p, 1, 100) > 0)
      kn_transport_signalled(t, ch);
  }
  return false;
}

/* The kernel's loop sleeps on the sockets' edge-triggered ZMQ_FD and asks
 * ZMQ_EVENTS only after the fd fired or the socket was used: a message
 * that arrives after a receive found the socket empty, and one that
 * arrives around a send on it, must still wake it. */
NBF_TEST(transport_readable_never_misses_a_message) {
  char dir[] = "/tmp/kn-transport-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  kn_connection_t c;
  memset(&c, 0, sizeof c);
  snprintf(c.transport, sizeof c.transport, "ipc");
  snprintf(c.ip, sizeof c.ip, "%s/k", dir);
  for (int i = 0; i < KN_PORT_COUNT; i++)
    c.ports[i] = i + 1;
  snprintf(c.signature_scheme, sizeof c.signature_scheme, "hmac-sha256");
  char err[256], ep[600];
  kn_transport_t *t = kn_transport_new(&c, err, sizeof err);
  ASSERT_TRUE(t != NULL);
  ASSERT_TRUE(kn_transport_fd(t, KN_CH_SHELL) >= 0);
  kn_io_t io = kn_transport_io(t);
  void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(kn_connection_endpoint(&c, KN_PORT_SHELL, ep, sizeof ep), KN_OK);
  ASSERT_EQ(zmq_connect(d, ep), 0);
  kn_msg_t *m = NULL;
  for (int round = 0; round < 3; round++) {
    dealer_send(d);
    ASSERT_TRUE(wait_readable(t, KN_CH_SHELL));
    ASSERT_EQ(io.recv(io.self, KN_CH_SHELL, &m), KN_OK);
    kn_msg_t *none = NULL;
    ASSERT_EQ(io.recv(io.self, KN_CH_SHELL, &none), KN_ERR_AGAIN);
    ASSERT_TRUE(!kn_transport_readable(t, KN_CH_SHELL)); /* known empty */
    if (round == 1) { /* a reply sent while the next request is on its way */
      dealer_send(d);
      ASSERT_EQ(reply_on_shell(io, m), KN_OK);
      ASSERT_TRUE(wait_readable(t, KN_CH_SHELL));
      kn_msg_t *m2 = NULL;
      ASSERT_EQ(io.recv(io.self, KN_CH_SHELL, &m2), KN_OK);
      kn_msg_destroy(&m2);
    }
    kn_msg_destroy(&m);
  }
  zmq_close(d);
  zmq_ctx_term(ctx);
  kn_transport_destroy(&t);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
}

/* kn_iso8601_at (digits by hand) equals strftime + snprintf, the way it
 * was made before, over dates that stress the calendar and the fraction. */
NBF_TEST(iso8601_by_hand_equals_strftime) {
  const time_t secs[] = {0,          951782400 /* 2000-02-29 */, 1709251199, 1735689599,
                         2147483647, 4102444800 /* 2100-01-01 */, 253402041599 /* 9999-12-28 */};
  const long nsecs[] = {0, 999, 1000, 123456789, 999999999};
  for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++)
    for (size_t j = 0; j < sizeof nsecs / sizeof nsecs[0]; j++)
      for (time_t d = 0; d < 3 * 86400; d += 86400 / 4 + 1) {
        struct timespec ts = {secs[i] + d, nsecs[j]};
        char got[KN_DATE_LEN], want[KN_DATE_LEN], base[24];
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want, sizeof want, "%.19s.%06dZ", base, (int)(ts.tv_nsec / 1000) % 1000000);
        kn_iso8601_at(&ts, got);
        ASSERT_EQ_STR(got, want);
      }
}

/* kn_uuid4: RFC 4122 version 4 text, lowercase hex, and no repeats over
 * several refills of its pool of random bytes. */
NBF_TEST(uuid4_format_and_unique) {
  enum { N = 300 };
  static char ids[N][KN_UUID_LEN + 1];
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(kn_uuid4(ids[i]), KN_OK);
    ASSERT_EQ(strlen(ids[i]), KN_UUID_LEN);
    for (int c = 0; c < KN_UUID_LEN; c++) {
      char ch = ids[i][c];
      if (c == 8 || c == 13 || c == 18 || c == 23)
        ASSERT_TRUE(ch == '-');
      else
        ASSERT_TRUE((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'));
    }
    ASSERT_TRUE(ids[i][14] == '4');
    ASSERT_TRUE(strchr("89ab", ids[i][19]) != NULL);
    for (int j = 0; j < i; j++)
      ASSERT_TRUE(strcmp(ids[i], ids[j]) != 0);
  }
}
