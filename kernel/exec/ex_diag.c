/*
 * ex_diag.c — compiler diagnostics as the user sees them (see ex_diag.h).
 */
#define _GNU_SOURCE
#include "ex_diag.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_buf.h"

/* Does the n-byte line l contain `needle`? (memmem, without GCC 12's
 * -Wnonnull false positive under -fsanitize=undefined) */
static int line_has(const char *l, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (l[i] == needle[0] && !memcmp(l + i, needle, k))
      return 1;
  return 0;
}

/* Should this diagnostics line be hidden from the user? `cell_errors`:
 * the diagnostics report an error in the cell itself, so what follows
 * from it inside nbfork's generated helpers is noise. */
static int hidden_line(const char *l, size_t n, int cell_errors) {
  static const char *const hide[] = {"In function '__nbf_",
                                     "In function \xe2\x80\x98__nbf_", /* our wrappers */
                                     "some warnings being treated as errors",
                                     "in definition of macro '__nbf_",
                                     "in expansion of macro '__nbf_",
                                     NULL};
  if (n == 0)
    return 1;
  for (int i = 0; hide[i]; i++)
    if (line_has(l, n, hide[i]))
      return 1;
  /* lines pointing into nbfork's generated helpers: notes always, errors
   * when they only follow from an error in the cell */
  if (n > 9 && !strncmp(l, "<nbfork>:", 9) && (cell_errors || line_has(l, n, "note:")))
    return 1;
  return 0;
}

char *ex_diag_clean(const char *diag) {
  nbf_buf_t out = {0};
  if (!diag)
    return strdup("");
  int cell_errors = 0;
  for (size_t off = 0; diag[off];) {
    const char *p = diag + off;
    size_t n = strcspn(p, "\n");
    if (line_has(p, n, "error") && strncmp(p, "<nbfork>:", 9) != 0)
      cell_errors = 1;
    off += n + (p[n] == '\n');
  }
  for (size_t off = 0; diag[off];) {
    const char *p = diag + off;
    size_t n = strcspn(p, "\n");
    off += n + (p[n] == '\n');
    if (!hidden_line(p, n, cell_errors)) {
      /* sq__c0123456789abcdef -> sq */
      nbf_buf_t line = {0};
      for (size_t i = 0; i < n; i++) {
        if (i + 19 <= n && p[i] == '_' && p[i + 1] == '_' && p[i + 2] == 'c') {
          size_t h = 0;
          while (h < 16 && isxdigit((unsigned char)p[i + 3 + h]) &&
                 !isupper((unsigned char)p[i + 3 + h]))
            h++;
          if (h == 16 &&
              (i + 19 == n || !(isalnum((unsigned char)p[i + 19]) || p[i + 19] == '_'))) {
            i += 18;
            continue;
          }
        }
        nbf_buf_append(&line, p + i, 1);
      }
      /* drop a line already shown (one error, expanded twice, is one) */
      int dup = 0;
      if (line.data && out.data) {
        for (const char *q = out.data; *q;) {
          const char *qe = strchr(q, '\n');
          size_t qn = qe ? (size_t)(qe - q) : strlen(q);
          if (qn == line.len && !memcmp(q, line.data, qn)) {
            dup = 1;
            break;
          }
          q = qe ? qe + 1 : q + qn;
        }
      }
      if (line.data && !dup) {
        nbf_buf_append(&out, line.data, line.len);
        nbf_buf_append(&out, "\n", 1);
      }
      nbf_buf_free(&line);
    }
  }
  char *r = nbf_buf_take(&out);
  return r ? r : strdup("");
}

char *ex_diag_summary(const char *diag) {
  /* the first compiler error; a linker's "collect2: error: ld returned"
   * only when nothing better is there */
  const char *best = NULL;
  for (const char *p = diag; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (line_has(p, n, "error") && strncmp(p, "collect2:", 9) != 0) {
      best = p;
      break;
    }
    if (!best && (line_has(p, n, "cannot find") || line_has(p, n, "undefined reference")))
      best = p;
    p = e ? e + 1 : p + n;
  }
  if (!best)
    best = diag && *diag ? diag : NULL;
  if (!best)
    return strdup("compilation failed");
  size_t n = strcspn(best, "\n");
  while (n && (best[n - 1] == ' ' || best[n - 1] == '\r'))
    n--;
  return strndup(best, n);
}

/* Code points in the first `bytes` bytes of line `line` (1-based) of
 * `code`; `bytes` itself when the line is not there. */
static long chars_before(const char *code, long line, long bytes) {
  const char *p = code;
  for (long l = 1; l < line && p; l++) {
    p = strchr(p, '\n');
    p = p ? p + 1 : NULL;
  }
  if (!p)
    return bytes;
  long chars = 0;
  for (long i = 0; i < bytes && p[i] && p[i] != '\n'; i++)
    chars += ((unsigned char)p[i] & 0xC0) != 0x80; /* not a UTF-8 continuation byte */
  return chars;
}

char *ex_diag_columns(const char *diag, const char *label, const char *code) {
  nbf_buf_t out = {0};
  size_t ll = strlen(label);
  int bad = 0;
  for (const char *p = diag ? diag : ""; *p;) {
    size_t n = strcspn(p, "\n");
    long line, col;
    int used = 0;
    if (!strncmp(p, label, ll) && sscanf(p + ll, ":%ld:%ld:%n", &line, &col, &used) == 2 &&
        used > 0 && col > 0 && (size_t)used + ll <= n) {
      bad |=
          nbf_buf_printf(&out, "%s:%ld:%ld:", label, line, chars_before(code, line, col - 1) + 1);
      bad |= nbf_buf_append(&out, p + ll + used, n - ll - (size_t)used);
    } else {
      bad |= nbf_buf_append(&out, p, n);
    }
    bad |= nbf_buf_append(&out, "\n", p[n] == '\n');
    p += n + (p[n] == '\n');
  }
  if (bad) {
    nbf_buf_free(&out);
    return NULL;
  }
  char *r = nbf_buf_take(&out);
  return r ? r : strdup("");
}
