/*
 * test_display.c — display API events, read back through a pipe and
 * parsed with jansson, against the format of common/nbf_wire.h.
 *   test_display display_text|display_png|display_json|bad_json|update|
 *                clear_output|execute_result|bundle|invalid_utf8|
 *                no_kernel|flush_order
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbfork.h"
#include "rt_display.h"
#include "rt_test.h"

static int g_rd = -1;

/* Point NBFORK_DISPLAY_FD at a fresh pipe. */
static void attach(void) {
  g_rd = rt_display_attach();
}

/* Read every complete line written so far; returns the count. */
static int read_events(json_t **ev, int max) {
  static char buf[1 << 21];
  ssize_t n = read(g_rd, buf, sizeof buf - 1);
  if (n <= 0)
    return 0;
  buf[n] = 0;
  ASSERT_TRUE(buf[n - 1] == '\n');
  int k = 0;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    ASSERT_TRUE(k < max);
    ASSERT_TRUE(strchr(line, '\n') == NULL);
    json_error_t e;
    ev[k] = json_loads(line, 0, &e);
    if (!ev[k])
      NBF_TEST_FAIL("event is not JSON (%s): %s", e.text, line);
    ASSERT_TRUE(json_is_object(ev[k]));
    /* compact: no spaces after separators outside strings */
    ASSERT_TRUE(strstr(line, "\": ") == NULL && strstr(line, ", \"") == NULL);
    k++;
  }
  return k;
}

static json_t *one_event(void) {
  json_t *ev[4];
  int n = read_events(ev, 4);
  ASSERT_EQ(n, 1);
  return ev[0];
}

static const char *sget(json_t *o, const char *path1, const char *path2) {
  json_t *v = json_object_get(o, path1);
  if (path2)
    v = json_object_get(v, path2);
  return json_string_value(v);
}

/* Checks a display_data/update_display_data event; returns its data. */
static json_t *check_display(json_t *ev, const char *msg, long id) {
  ASSERT_EQ_STR(sget(ev, "msg", NULL), msg);
  ASSERT_TRUE(json_is_object(json_object_get(ev, "data")));
  json_t *md = json_object_get(ev, "metadata");
  ASSERT_TRUE(json_is_object(md) && json_object_size(md) == 0);
  char want[64];
  snprintf(want, sizeof want, "nbf-%ld-%ld", (long)getpid(), id);
  ASSERT_EQ_STR(sget(ev, "transient", "display_id"), want);
  ASSERT_EQ(json_object_size(ev), 4);
  return json_object_get(ev, "data");
}

NBF_TEST(display_text) {
  attach();
  long id = nbf_display("text/plain", "hello\nworld", 11);
  ASSERT_GT(id, 0);
  json_t *ev = one_event();
  json_t *data = check_display(ev, "display_data", id);
  ASSERT_EQ_STR(sget(data, "text/plain", NULL), "hello\nworld");
  json_decref(ev);
  long id2 = nbf_display("text/html", "<b>x</b>", 8);
  ASSERT_GT(id2, id); /* ids are distinct */
  ev = one_event();
  ASSERT_EQ_STR(sget(check_display(ev, "display_data", id2), "text/html", NULL), "<b>x</b>");
  json_decref(ev);
  const char *svg = "<svg xmlns=\"http://www.w3.org/2000/svg\"/>";
  ASSERT_GT(nbf_display("image/svg+xml", svg, strlen(svg)), 0);
  ev = one_event();
  ASSERT_EQ_STR(sget(json_object_get(ev, "data"), "image/svg+xml", NULL), svg);
  json_decref(ev);
  /* bad arguments */
  ASSERT_EQ(nbf_display(NULL, "x", 1), -1);
  ASSERT_EQ(nbf_display("", "x", 1), -1);
  ASSERT_EQ(nbf_display("text/plain", NULL, 3), -1);
  json_t *none[1];
  ASSERT_EQ(read_events(none, 1), 0);
}

NBF_TEST(display_png) {
  attach();
  unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0xff};
  long id = nbf_display("image/png", png, sizeof png);
  ASSERT_GT(id, 0);
  json_t *ev = one_event();
  json_t *data = check_display(ev, "display_data", id);
  ASSERT_EQ_STR(sget(data, "image/png", NULL), "iVBORw0KGgoAAP8="); /* base64 of png[] */
  json_decref(ev);
}

NBF_TEST(display_json) {
  attach();
  const char *doc = "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}";
  long id = nbf_display("application/json", doc, strlen(doc));
  ASSERT_GT(id, 0);
  json_t *ev = one_event();
  json_t *v = json_object_get(check_display(ev, "display_data", id), "application/json");
  ASSERT_TRUE(json_is_object(v)); /* embedded as JSON, not as a string */
  ASSERT_EQ(json_array_size(json_object_get(v, "a")), 3);
  ASSERT_EQ_STR(sget(v, "c", NULL), "d");
  json_decref(ev);
  const char *vega = "[1,2]";
  ASSERT_GT(nbf_display("application/vnd.vegalite.v5+json", vega, 5), 0);
  ev = one_event();
  ASSERT_TRUE(json_is_array(
      json_object_get(json_object_get(ev, "data"), "application/vnd.vegalite.v5+json")));
  json_decref(ev);
}

NBF_TEST(bad_json) {
  attach();
  ASSERT_EQ(nbf_display("application/json", "{\"a\":", 5), -1);
  ASSERT_EQ(nbf_display("application/json", "{} {}", 5), -1);
  json_t *none[1];
  ASSERT_EQ(read_events(none, 1), 0); /* nothing half-written */
}

NBF_TEST(update) {
  attach();
  long id = nbf_display("text/plain", "0%", 2);
  json_t *ev = one_event();
  json_decref(ev);
  ASSERT_EQ(nbf_update_display(id, "text/plain", "50%", 3), 0);
  ev = one_event();
  json_t *data = check_display(ev, "update_display_data", id);
  ASSERT_EQ_STR(sget(data, "text/plain", NULL), "50%");
  json_decref(ev);
  ASSERT_EQ(nbf_update_display(0, "text/plain", "x", 1), -1);
  ASSERT_EQ(nbf_update_display(-5, "text/plain", "x", 1), -1);
}

NBF_TEST(clear_output) {
  attach();
  ASSERT_EQ(nbf_clear_output(1), 0);
  json_t *ev = one_event();
  ASSERT_EQ_STR(sget(ev, "msg", NULL), "clear_output");
  ASSERT_TRUE(json_is_true(json_object_get(ev, "wait")));
  ASSERT_EQ(json_object_size(ev), 2);
  json_decref(ev);
  ASSERT_EQ(nbf_clear_output(0), 0);
  ev = one_event();
  ASSERT_TRUE(json_is_false(json_object_get(ev, "wait")));
  json_decref(ev);
}

NBF_TEST(execute_result) {
  attach();
  ASSERT_EQ(nbf__execute_result("(int) 42"), 0);
  json_t *ev = one_event();
  ASSERT_EQ_STR(sget(ev, "msg", NULL), "execute_result");
  ASSERT_EQ_STR(sget(json_object_get(ev, "data"), "text/plain", NULL), "(int) 42");
  ASSERT_TRUE(json_is_object(json_object_get(ev, "metadata")));
  ASSERT_EQ(json_object_size(ev), 3); /* the kernel adds execution_count */
  json_decref(ev);
}

NBF_TEST(bundle) {
  attach();
  nbf_mime_t b[2] = {{"text/plain", "plain", 5}, {"text/html", "<i>html</i>", 11}};
  long id = nbf_display_bundle(b, 2);
  ASSERT_GT(id, 0);
  json_t *ev = one_event();
  json_t *data = check_display(ev, "display_data", id);
  ASSERT_EQ(json_object_size(data), 2);
  ASSERT_EQ_STR(sget(data, "text/plain", NULL), "plain");
  ASSERT_EQ_STR(sget(data, "text/html", NULL), "<i>html</i>");
  json_decref(ev);
  ASSERT_EQ(nbf_update_display_bundle(id, b, 2), 0);
  ev = one_event();
  check_display(ev, "update_display_data", id);
  json_decref(ev);
  ASSERT_EQ(nbf_display_bundle(b, 0), -1);
  ASSERT_EQ(nbf_display_bundle(NULL, 1), -1);
}

NBF_TEST(invalid_utf8) {
  attach();
  const char bad[] = {'a', (char)0xff, 'b', (char)0xc3, 0, 'c'};
  long id = nbf_display("text/plain", bad, sizeof bad);
  ASSERT_GT(id, 0);
  json_t *ev = one_event();
  ASSERT_EQ_STR(sget(json_object_get(ev, "data"), "text/plain", NULL), "a\xef\xbf\xbd"
                                                                       "b\xef\xbf\xbd\xef\xbf\xbd"
                                                                       "c");
  json_decref(ev);
}

NBF_TEST(no_kernel) {
  unsetenv("NBFORK_DISPLAY_FD");
  int saved, out = rt_capture_stdout(&saved);
  long id = nbf_display("text/plain", "shown as text", 13);
  int up = nbf_update_display(id, "text/html", "<p>again</p>", 12);
  long png = nbf_display("image/png", "\x89PNG", 4);
  int clr = nbf_clear_output(0);
  int er = nbf__execute_result("3");
  rt_restore_stdout(saved);
  char buf[256];
  ssize_t n = read(out, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  ASSERT_GT(id, 0);
  ASSERT_EQ(up, 0);
  ASSERT_EQ(png, -1);
  ASSERT_EQ(clr, -1);
  ASSERT_EQ(er, 0);
  ASSERT_EQ_STR(buf, "shown as text\n<p>again</p>\n3\n");
  /* a descriptor that is not open counts as no kernel */
  setenv("NBFORK_DISPLAY_FD", "987", 1);
  ASSERT_EQ(nbf_display("image/png", "\x89PNG", 4), -1);
}

NBF_TEST(flush_order) {
  attach();
  int saved, out = rt_capture_stdout(&saved);
  printf("printed before"); /* no newline: still in stdio's buffer */
  ASSERT_GT(nbf_display("text/plain", "x", 1), 0);
  /* the event is written only after stdout was flushed */
  char buf[64];
  ssize_t n = read(out, buf, sizeof buf - 1);
  rt_restore_stdout(saved);
  ASSERT_EQ(n, 14);
  buf[n] = 0;
  ASSERT_EQ_STR(buf, "printed before");
  json_t *ev = one_event();
  json_decref(ev);
}

NBF_TEST_MAIN()
