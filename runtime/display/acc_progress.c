/*
 * acc_progress.c — a tqdm-like progress bar on the main process:
 *
 *   epoch 1 |█████     | 400/750 [00:03<00:02, 120.5 it/s, loss=0.31]
 *
 * shown in the notebook as a text/plain + text/html bundle and redrawn in
 * place (update_display_data) at most 10 times per second, always at the
 * end (n == total) and when destroyed. Without a kernel (no
 * NBFORK_DISPLAY_FD) it redraws on stderr with '\r' when stderr is a
 * terminal, and otherwise prints only the final line. Other ranks get an
 * inert bar, so every rank may call the same code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_internal.h"
#include "nbf_util.h"

#define BAR_CELLS 10
#define MIN_INTERVAL_S 0.1

struct acc_progress {
  int active;   /* main process */
  int attached; /* notebook display (else terminal) */
  int tty;
  char desc[128];
  char postfix[160];
  size_t total, n;
  double t0, last_draw;
  size_t drawn_n; /* n at the last draw; (size_t)-1 = never */
  long display_id;
};

static void fmt_time(char *out, size_t len, double s) {
  if (s < 0)
    s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(out, len, "%02ld:%02ld", t / 60, t % 60);
}

/* "120.5 it/s" (or "2.31s/it" below one item per second, "?it/s" unknown). */
static void fmt_rate(char *out, size_t len, size_t n, double elapsed) {
  if (n == 0 || elapsed <= 0) {
    snprintf(out, len, "?it/s");
    return;
  }
  double r = (double)n / elapsed;
  if (r >= 1.0)
    snprintf(out, len, "%.1f it/s", r);
  else
    snprintf(out, len, "%.2fs/it", 1.0 / r);
}

/* The text after the bar: "400/750 [00:03<00:02, 120.5 it/s, loss=0.31]". */
static void fmt_stats(const acc_progress_t *p, double now, char *out, size_t len) {
  double el = now - p->t0;
  char e[32], rem[32], rate[32];
  fmt_time(e, sizeof e, el);
  fmt_rate(rate, sizeof rate, p->n, el);
  const char *sep = p->postfix[0] ? ", " : "";
  if (p->total == 0) {
    snprintf(out, len, "%zu it [%s, %s%s%s]", p->n, e, rate, sep, p->postfix);
    return;
  }
  if (p->n == 0 || el <= 0)
    snprintf(rem, sizeof rem, "?");
  else
    fmt_time(rem, sizeof rem,
             (double)(p->total - (p->n < p->total ? p->n : p->total)) * el / (double)p->n);
  snprintf(out, len, "%zu/%zu [%s<%s, %s%s%s]", p->n, p->total, e, rem, rate, sep, p->postfix);
}

static void fmt_text(const acc_progress_t *p, const char *stats, char *out, size_t len) {
  size_t o = 0;
  o += (size_t)snprintf(out + o, len - o, "%s%s|", p->desc, p->desc[0] ? " " : "");
  if (p->total) {
    size_t full = p->n >= p->total ? BAR_CELLS : p->n * BAR_CELLS / p->total;
    for (size_t i = 0; i < BAR_CELLS && o + 4 < len; i++) {
      const char *c = i < full ? "\xe2\x96\x88" : " "; /* U+2588 FULL BLOCK */
      size_t k = strlen(c);
      memcpy(out + o, c, k);
      o += k;
    }
  }
  snprintf(out + o, len - o, "| %s", stats);
}

static size_t html_escape(const char *s, char *out, size_t len) {
  size_t o = 0;
  for (; *s && o + 7 < len; s++) {
    const char *r = NULL;
    switch (*s) {
    case '<':
      r = "&lt;";
      break;
    case '>':
      r = "&gt;";
      break;
    case '&':
      r = "&amp;";
      break;
    case '"':
      r = "&quot;";
      break;
    default:
      out[o++] = *s;
      continue;
    }
    size_t k = strlen(r);
    memcpy(out + o, r, k);
    o += k;
  }
  out[o] = 0;
  return o;
}

static void draw(acc_progress_t *p, int final) {
  double now = nbf_now_s();
  char stats[512], text[1024];
  fmt_stats(p, now, stats, sizeof stats);
  fmt_text(p, stats, text, sizeof text);
  p->last_draw = now;
  p->drawn_n = p->n;
  if (p->attached) {
    char desc[400], st[1200], html[2048];
    html_escape(p->desc, desc, sizeof desc);
    html_escape(stats, st, sizeof st);
    if (p->total)
      snprintf(html, sizeof html,
               "<div style=\"font-family:monospace;white-space:pre\">%s <progress value=\"%zu\" "
               "max=\"%zu\" style=\"width:24ex;vertical-align:middle\"></progress> %s</div>",
               desc, p->n < p->total ? p->n : p->total, p->total, st);
    else
      snprintf(html, sizeof html,
               "<div style=\"font-family:monospace;white-space:pre\">%s %s</div>", desc, st);
    nbf_mime_t b[2] = {{"text/plain", text, strlen(text)}, {"text/html", html, strlen(html)}};
    if (p->display_id <= 0)
      p->display_id = nbf_display_bundle(b, 2);
    else
      nbf_update_display_bundle(p->display_id, b, 2);
  } else if (p->tty) {
    fprintf(stderr, "\r%s\x1b[K%s", text, final ? "\n" : "");
    fflush(stderr);
  } else if (final) {
    fprintf(stderr, "%s\n", text);
    fflush(stderr);
  }
}

acc_progress_t *acc_progress_new(const acc_t *acc, const char *desc, size_t total) {
  acc_progress_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->active = acc_is_main_process(acc);
  p->total = total;
  p->t0 = nbf_now_s();
  p->drawn_n = (size_t)-1;
  snprintf(p->desc, sizeof p->desc, "%s", desc ? desc : "");
  if (p->active) {
    p->attached = nbf__display_attached();
    p->tty = !p->attached && isatty(STDERR_FILENO);
    if (p->attached || p->tty)
      draw(p, 0);
  }
  return p;
}

void acc_progress_update(acc_progress_t *p, size_t n, const char *postfix) {
  if (!p || !p->active)
    return;
  p->n += n;
  if (postfix)
    snprintf(p->postfix, sizeof p->postfix, "%s", postfix);
  if (!p->attached && !p->tty)
    return;
  int at_end = p->total && p->n >= p->total && p->drawn_n != p->n;
  if (at_end || nbf_now_s() - p->last_draw >= MIN_INTERVAL_S)
    draw(p, 0);
}

void acc_progress_destroy(acc_progress_t **p_p) {
  acc_progress_t *p = NBF_TAKE(p_p);
  if (!p)
    return;
  if (p->active)
    draw(p, 1); /* final count, elapsed time and rate */
  free(p);
}
