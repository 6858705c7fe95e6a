/*
 * acc_chart.c — live line charts of logged scalars (acc_log_scalar): the
 * main process keeps every series and redraws one SVG (a panel per
 * series, stacked) in place with update_display_data, at most about 3
 * times per second; points logged in between are drawn at the next
 * redraw, and acc_log_flush / acc_destroy always draw the final point.
 * Nothing is drawn without a kernel (no NBFORK_DISPLAY_FD).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "nbf_buf.h"
#include "nbf_util.h"

#define MIN_INTERVAL_S 0.3
#define MAX_SERIES 16
#define MAX_DRAWN_POINTS 1000 /* longer series are drawn with a stride */
#define W 520
#define PANEL_H 170
#define ML 62 /* left margin (y labels) */
#define MR 14
#define MT 24
#define MB 26

typedef struct {
  char name[64];
  long *steps;
  double *vals;
  size_t n, cap;
} series_t;

struct acc_charts {
  series_t s[MAX_SERIES];
  int ns;
  long display_id;
  double last_draw;
  int dirty;
};

/* The SVG text. Its first failed growth sticks (oom) and is checked once,
 * when the chart is drawn, so the drawing code needs no error paths. */
typedef struct {
  nbf_buf_t b;
  int oom;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (!b->oom && nbf_buf_vprintf(&b->b, fmt, ap) != 0)
    b->oom = 1;
  va_end(ap);
}

static void xml_text(sbuf_t *b, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<':
      sb_printf(b, "&lt;");
      break;
    case '>':
      sb_printf(b, "&gt;");
      break;
    case '&':
      sb_printf(b, "&amp;");
      break;
    default:
      sb_printf(b, "%c", *s);
    }
  }
}

static void panel(sbuf_t *b, const series_t *s, int y0) {
  static const char *colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                 "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  const char *color = colors[(y0 / PANEL_H) % 8];
  double xmin = (double)s->steps[0], xmax = xmin, ymin = INFINITY, ymax = -INFINITY;
  for (size_t i = 0; i < s->n; i++) {
    double x = (double)s->steps[i], y = s->vals[i];
    xmin = x < xmin ? x : xmin;
    xmax = x > xmax ? x : xmax;
    if (isfinite(y)) {
      ymin = y < ymin ? y : ymin;
      ymax = y > ymax ? y : ymax;
    }
  }
  if (!isfinite(ymin)) {
    ymin = 0;
    ymax = 1;
  }
  if (ymax - ymin < 1e-12) {
    double d = fabs(ymax) > 1e-12 ? fabs(ymax) * 0.05 : 0.5;
    ymin -= d;
    ymax += d;
  }
  if (xmax <= xmin)
    xmax = xmin + 1;
  const double pw = W - ML - MR, ph = PANEL_H - MT - MB;
  sb_printf(b, "<g transform=\"translate(0,%d)\">", y0);
  sb_printf(b, "<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"bold\">", ML);
  xml_text(b, s->name);
  sb_printf(
      b,
      "</text><text x=\"%d\" y=\"16\" font-size=\"12\" text-anchor=\"end\">last %g at %ld</text>",
      W - MR, s->vals[s->n - 1], s->steps[s->n - 1]);
  sb_printf(
      b, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#bbb\"/>",
      ML, MT, pw, ph);
  sb_printf(b,
            "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%.4g</text>"
            "<text x=\"%d\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>",
            ML - 4, MT + 10, ymax, ML - 4, MT + ph, ymin);
  sb_printf(b,
            "<text x=\"%d\" y=\"%.0f\" font-size=\"11\">%ld</text>"
            "<text x=\"%d\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%ld</text>",
            ML, MT + ph + 16, s->steps[0], W - MR, MT + ph + 16, s->steps[s->n - 1]);
  sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", color);
  size_t stride = s->n > MAX_DRAWN_POINTS ? (s->n + MAX_DRAWN_POINTS - 1) / MAX_DRAWN_POINTS : 1;
  for (size_t i = 0; i < s->n; i += stride) {
    size_t k = i + stride >= s->n ? s->n - 1 : i; /* always end at the last point */
    double y = s->vals[k];
    if (!isfinite(y))
      continue;
    double px = ML + ((double)s->steps[k] - xmin) / (xmax - xmin) * pw;
    double py = MT + (ymax - y) / (ymax - ymin) * ph;
    sb_printf(b, "%.1f,%.1f ", px, py);
    if (k == s->n - 1)
      break;
  }
  sb_printf(b, "\"/></g>");
}

static void redraw(acc_t *acc) {
  acc_charts_t *c = acc->charts;
  if (!c || !c->dirty || c->ns == 0)
    return;
  sbuf_t b = {0};
  int h = PANEL_H * c->ns;
  sb_printf(&b,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>",
            W, h, W, h);
  for (int i = 0; i < c->ns; i++)
    panel(&b, &c->s[i], i * PANEL_H);
  sb_printf(&b, "</svg>");
  if (!b.oom) {
    if (c->display_id <= 0)
      c->display_id = nbf_display("image/svg+xml", b.b.data, b.b.len);
    else
      nbf_update_display(c->display_id, "image/svg+xml", b.b.data, b.b.len);
  }
  nbf_buf_free(&b.b);
  c->dirty = 0;
  c->last_draw = nbf_now_s();
}

void acc_log_scalar(acc_t *acc, const char *name, long step, double value) {
  if (!acc || !name || !*name || acc->rank != 0)
    return;
  if (!acc->charts && !(acc->charts = calloc(1, sizeof *acc->charts)))
    return;
  acc_charts_t *c = acc->charts;
  series_t *s = NULL;
  for (int i = 0; i < c->ns && !s; i++)
    if (strncmp(c->s[i].name, name, sizeof c->s[i].name - 1) == 0)
      s = &c->s[i];
  if (!s) {
    if (c->ns == MAX_SERIES)
      return;
    s = &c->s[c->ns++];
    snprintf(s->name, sizeof s->name, "%s", name);
  }
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    long *st = realloc(s->steps, cap * sizeof *st);
    if (!st)
      return;
    s->steps = st;
    double *v = realloc(s->vals, cap * sizeof *v);
    if (!v)
      return;
    s->vals = v;
    s->cap = cap;
  }
  s->steps[s->n] = step;
  s->vals[s->n] = value;
  s->n++;
  c->dirty = 1;
  if (nbf__display_attached() && nbf_now_s() - c->last_draw >= MIN_INTERVAL_S)
    redraw(acc);
}

void acc_log_flush(acc_t *acc) {
  acc__charts_flush(acc);
}

void acc__charts_flush(acc_t *acc) {
  if (acc && acc->charts && nbf__display_attached())
    redraw(acc);
}

void acc__charts_free(acc_t *acc) {
  if (!acc || !acc->charts)
    return;
  for (int i = 0; i < acc->charts->ns; i++) {
    free(acc->charts->s[i].steps);
    free(acc->charts->s[i].vals);
  }
  free(acc->charts);
  acc->charts = NULL;
}
