/*
 * ln_display_view.c — display events of `nbfork launch NOTEBOOK` on a
 * terminal (in place) or in a log (throttled), final states always
 * (ln_display_view.h).
 */
#define _GNU_SOURCE
#include "ln_display_view.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_DISPLAYS 64 /* displays remembered; the oldest is reused */

typedef struct {
  char *id;      /* transient.display_id; NULL = free */
  char *shown;   /* text of its last line printed */
  char *pending; /* a newer text not printed yet (log), or NULL */
  int64_t shown_ms;
  uint64_t used; /* for reuse: the least recently used goes */
} view_display_t;

struct ln_display_view {
  FILE *out;
  int tty;
  int64_t interval_ms;
  uint64_t tick;
  int last_line; /* display whose text is the line above the cursor (tty), -1 */
  view_display_t d[VIEW_DISPLAYS];
};

ln_display_view_t *ln_display_view_new(FILE *out, int tty, int64_t interval_ms) {
  ln_display_view_t *v = calloc(1, sizeof *v);
  if (!v)
    return NULL;
  *v = (ln_display_view_t){.out = out, .tty = tty, .interval_ms = interval_ms, .last_line = -1};
  return v;
}

static void display_clear(view_display_t *d) {
  free(d->id), free(d->shown), free(d->pending);
  memset(d, 0, sizeof *d);
}

void ln_display_view_destroy(ln_display_view_t **v_p) {
  if (!v_p || !*v_p)
    return;
  for (int i = 0; i < VIEW_DISPLAYS; i++)
    display_clear(&(*v_p)->d[i]);
  free(*v_p);
  *v_p = NULL;
}

/* The display of `id`, made when new (reusing the least recently used). */
static int display_of(ln_display_view_t *v, const char *id) {
  int lru = 0;
  for (int i = 0; i < VIEW_DISPLAYS; i++) {
    if (v->d[i].id && !strcmp(v->d[i].id, id))
      return v->d[i].used = ++v->tick, i;
    if (v->d[i].used < v->d[lru].used)
      lru = i;
  }
  display_clear(&v->d[lru]);
  if (v->last_line == lru)
    v->last_line = -1;
  v->d[lru].id = strdup(id);
  v->d[lru].used = ++v->tick;
  return lru;
}

/* "N/N" in the text, N digits bounded by non-digits: a finished bar. */
static int complete(const char *t) {
  for (const char *p = t; *p; p++) {
    if (!isdigit((unsigned char)*p) || (p > t && isdigit((unsigned char)p[-1])))
      continue;
    size_t n = strspn(p, "0123456789");
    if (p[n] == '/' && !strncmp(p, p + n + 1, n) && !isdigit((unsigned char)p[2 * n + 1]))
      return 1;
  }
  return 0;
}

/* Print display i's text as a line: in place over its own line on a
 * terminal when it is the line above the cursor. */
static void draw(ln_display_view_t *v, int i, const char *text, int64_t now_ms) {
  view_display_t *d = &v->d[i];
  if (v->tty && v->last_line == i)
    fputs("\x1b[A\r\x1b[K", v->out);
  fprintf(v->out, "%s\n", text);
  fflush(v->out);
  v->last_line = i;
  free(d->shown);
  d->shown = strdup(text);
  free(d->pending);
  d->pending = NULL;
  d->shown_ms = now_ms;
}

/* Print the pending final states of every display but `except`. */
static void flush_pending(ln_display_view_t *v, int except, int64_t now_ms) {
  for (int i = 0; i < VIEW_DISPLAYS; i++)
    if (i != except && v->d[i].pending)
      draw(v, i, v->d[i].pending, now_ms);
}

void ln_display_view_end_cell(ln_display_view_t *v) {
  if (!v)
    return;
  flush_pending(v, -1, 0);
  v->last_line = -1; /* what follows is someone else's line */
}

int ln_display_view_event(ln_display_view_t *v, json_t *e, int64_t now_ms) {
  const char *msg = json_string_value(json_object_get(e, "msg"));
  int update = msg && !strcmp(msg, "update_display_data");
  if (!v || !msg || (!update && strcmp(msg, "display_data")))
    return 0;
  const char *text = json_string_value(json_object_get(json_object_get(e, "data"), "text/plain"));
  const char *id =
      json_string_value(json_object_get(json_object_get(e, "transient"), "display_id"));
  if (!text) /* a chart: nothing to show here */
    return 1;
  int i = display_of(v, id ? id : "");
  view_display_t *d = &v->d[i];
  if (!update) { /* a new output: its own line, after the others' final states */
    flush_pending(v, i, now_ms);
    v->last_line = -1;
    draw(v, i, text, now_ms);
    return 1;
  }
  if (d->shown && !strcmp(d->shown, text)) {
    free(d->pending);
    d->pending = NULL;
    return 1;
  }
  if (v->tty || complete(text) || now_ms - d->shown_ms >= v->interval_ms) {
    flush_pending(v, i, now_ms);
    draw(v, i, text, now_ms);
  } else {
    free(d->pending);
    d->pending = strdup(text);
  }
  return 1;
}
