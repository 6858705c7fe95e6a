/*
 * test_progress.c — progress bar and live charts through the display API.
 *   test_progress rate_limit|final_state|chart|not_main
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
#include "rt_spawn.h"
#include "rt_test.h"

static int g_rd = -1;

/* Point NBFORK_DISPLAY_FD at a fresh pipe. */
static void attach(void) {
  g_rd = rt_display_attach();
}

/* All events so far as a JSON array. */
static json_t *events(void) {
  static char buf[1 << 21];
  json_t *arr = json_array();
  ssize_t n = read(g_rd, buf, sizeof buf - 1);
  if (n <= 0)
    return arr;
  buf[n] = 0;
  char *save = NULL;
  for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    json_t *e = json_loads(l, 0, NULL);
    ASSERT_NOT_NULL(e);
    json_array_append_new(arr, e);
  }
  return arr;
}

static const char *data_of(json_t *ev, const char *mime) {
  return json_string_value(json_object_get(json_object_get(ev, "data"), mime));
}

NBF_TEST(rate_limit) {
  attach();
  acc_progress_t *p = acc_progress_new(NULL, "epoch 1", 100000);
  double t0 = rt_now();
  for (int i = 0; i < 100000; i++)
    acc_progress_update(p, 1, "loss=0.31");
  double dt = rt_now() - t0;
  json_t *ev = events();
  size_t n = json_array_size(ev);
  /* first draw + at most 10 per second + the draw at n == total */
  ASSERT_LE((long long)n, (long long)(2 + 10 * dt + 2));
  ASSERT_GE((long long)n, 2);
  ASSERT_EQ_STR(json_string_value(json_object_get(json_array_get(ev, 0), "msg")), "display_data");
  ASSERT_EQ_STR(json_string_value(json_object_get(json_array_get(ev, n - 1), "msg")),
                "update_display_data");
  ASSERT_CONTAINS(data_of(json_array_get(ev, n - 1), "text/plain"), "100000/100000");
  json_decref(ev);
  acc_progress_destroy(&p);
  ASSERT_NULL(p);
}

NBF_TEST(final_state) {
  attach();
  acc_progress_t *p = acc_progress_new(NULL, "epoch 1", 750);
  acc_progress_update(p, 400, "loss=0.31");
  usleep(150000);
  acc_progress_update(p, 0, "loss=0.31");
  json_t *ev = events();
  const char *txt = data_of(json_array_get(ev, json_array_size(ev) - 1), "text/plain");
  /* epoch 1 |█████     | 400/750 [00:00<00:00, 2666.7 it/s, loss=0.31] */
  ASSERT_CONTAINS(txt, "epoch 1 |\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88     "
                       "| 400/750 [00:00<00:00, ");
  ASSERT_CONTAINS(txt, " it/s, loss=0.31]");
  const char *html = data_of(json_array_get(ev, json_array_size(ev) - 1), "text/html");
  ASSERT_CONTAINS(html, "<progress value=\"400\" max=\"750\"");
  ASSERT_CONTAINS(html, "00:00&lt;00:00");
  json_decref(ev);
  acc_progress_update(p, 100, "loss=0.2"); /* within 0.1 s: maybe not drawn */
  acc_progress_destroy(&p);                /* ...but the final state always is */
  ev = events();
  ASSERT_GE((long long)json_array_size(ev), 1);
  txt = data_of(json_array_get(ev, json_array_size(ev) - 1), "text/plain");
  ASSERT_CONTAINS(txt, "500/750");
  ASSERT_CONTAINS(txt, "loss=0.2]");
  json_decref(ev);
}

NBF_TEST(chart) {
  attach();
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  for (long s = 0; s < 500; s++) {
    acc_log_scalar(acc, "loss", s, 2.0 / (1.0 + s));
    if (s % 50 == 0)
      acc_log_scalar(acc, "accuracy", s, s / 500.0);
  }
  acc_destroy(&acc); /* flushes the final point */
  json_t *ev = events();
  size_t n = json_array_size(ev);
  ASSERT_GE((long long)n, 1);
  ASSERT_LE((long long)n, 5); /* rate-limited: not one per point */
  json_t *last = json_array_get(ev, n - 1);
  const char *svg = data_of(last, "image/svg+xml");
  ASSERT_NOT_NULL(svg);
  ASSERT_TRUE(strncmp(svg, "<svg ", 5) == 0);
  ASSERT_CONTAINS(svg, ">loss<");
  ASSERT_CONTAINS(svg, ">accuracy<");
  ASSERT_CONTAINS(svg, "at 499<"); /* the final point is drawn */
  ASSERT_CONTAINS(svg, "</svg>");
  /* well-formed enough: one <polyline per series */
  const char *q = svg;
  int lines = 0;
  while ((q = strstr(q, "<polyline")))
    lines++, q++;
  ASSERT_EQ(lines, 2);
  json_decref(ev);
}

static int not_main_rank(int rank, int world, void *arg) {
  (void)world;
  (void)arg;
  acc_t *acc = acc_new(NULL);
  ASSERT_NOT_NULL(acc);
  acc_progress_t *p = acc_progress_new(acc, "x", 10);
  ASSERT_NOT_NULL(p);
  for (int i = 0; i < 10; i++)
    acc_progress_update(p, 1, NULL);
  acc_progress_destroy(&p);
  acc_log_scalar(acc, "loss", 0, 1.0);
  acc_print(acc, "printed by rank %d\n", rank);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(not_main) {
  attach();
  int saved, out = rt_capture_stdout(&saved);
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 30};
  int rc = rt_spawn(&o, not_main_rank, NULL, NULL);
  rt_restore_stdout(saved);
  ASSERT_EQ(rc, 0);
  char buf[256];
  ssize_t n = read(out, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  ASSERT_EQ_STR(buf, "printed by rank 0\n"); /* acc_print: main process only */
  json_t *ev = events();
  /* rank 0: progress display + final update + chart; rank 1: nothing */
  char want[32];
  for (size_t i = 0; i < json_array_size(ev); i++) {
    const char *id = json_string_value(
        json_object_get(json_object_get(json_array_get(ev, i), "transient"), "display_id"));
    ASSERT_NOT_NULL(id);
    if (i == 0)
      snprintf(want, sizeof want, "%.*s", (int)(strrchr(id, '-') - id), id);
    ASSERT_TRUE(strncmp(id, want, strlen(want)) == 0); /* all from one pid */
  }
  ASSERT_GE((long long)json_array_size(ev), 3);
  json_decref(ev);
}

NBF_TEST_MAIN()
