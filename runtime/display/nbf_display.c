/*
 * nbf_display.c — the display API: rich output from cells and workers.
 *
 * Each call writes ONE compact JSON object and "\n" to the file
 * descriptor named by NBFORK_DISPLAY_FD (the executor's events pipe, fd 4
 * by common/nbf_wire.h), in the event format nbf_wire.h defines:
 *   {"msg":"display_data","data":{MIME:..},"metadata":{},
 *    "transient":{"display_id":"nbf-<pid>-<n>"}}
 *   {"msg":"update_display_data", same fields}
 *   {"msg":"clear_output","wait":BOOL}
 *   {"msg":"execute_result","data":{"text/plain":..},"metadata":{}}
 * stdout and stderr are flushed first (the ordering contract of
 * nbf_wire.h). A line is written with one write() loop that survives
 * EINTR and partial writes; lines up to PIPE_BUF bytes are atomic even
 * when several workers share the pipe.
 *
 * MIME data: text types (text/..., image/svg+xml, application/javascript,
 * application/xml) become JSON strings (invalid UTF-8 bytes are replaced
 * with U+FFFD); application/json and "+json" types must hold one JSON
 * document and are embedded as JSON; anything else is binary and is
 * base64-encoded (OpenSSL EVP_EncodeBlock), as Jupyter expects for
 * image/png.
 *
 * Without NBFORK_DISPLAY_FD (a program run from a terminal) text data is
 * printed to stdout and the calls succeed; binary data cannot be shown
 * and the calls return -1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acc_internal.h"
#include "nbf_param.h"
#include "nbf_util.h"

static pthread_mutex_t g_write_lock = PTHREAD_MUTEX_INITIALIZER;
static long g_next_id; /* atomically incremented */

/* The events fd, or -1 when not attached to a kernel. */
static int display_fd(void) {
  long fd;
  if (nbf_param_NBFORK_DISPLAY_FD(&fd) || fd < 0 || fd > 1 << 20)
    return -1;
  if (fcntl((int)fd, F_GETFD) == -1)
    return -1;
  return (int)fd;
}

int nbf__display_attached(void) {
  return display_fd() >= 0;
}

static int starts_with(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

static int ends_with(const char *s, const char *p) {
  size_t a = strlen(s), b = strlen(p);
  return a >= b && strcmp(s + a - b, p) == 0;
}

static int is_json_mime(const char *mime) {
  return strcmp(mime, "application/json") == 0 || ends_with(mime, "+json");
}

static int is_text_mime(const char *mime) {
  return starts_with(mime, "text/") || strcmp(mime, "image/svg+xml") == 0 ||
         strcmp(mime, "application/javascript") == 0 || strcmp(mime, "application/xml") == 0 ||
         strcmp(mime, "application/x-latex") == 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned min;
  if (c < 0x80)
    return 1;
  if ((c & 0xe0) == 0xc0)
    len = 2, min = 0x80, c &= 0x1f;
  else if ((c & 0xf0) == 0xe0)
    len = 3, min = 0x800, c &= 0x0f;
  else if ((c & 0xf8) == 0xf0)
    len = 4, min = 0x10000, c &= 0x07;
  else
    return 0;
  if (len > n)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    c = (c << 6) | (s[i] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
    return 0;
  return len;
}

/* A JSON string of the text, replacing invalid UTF-8 (and NUL) bytes. */
static json_t *text_value(const char *data, size_t len) {
  json_t *s = json_stringn(data, len);
  if (s)
    return s;
  char *buf = malloc(3 * len + 1);
  if (!buf)
    return NULL;
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < len;) {
    size_t k = p[i] ? utf8_seq(p + i, len - i) : 0;
    if (k) {
      memcpy(buf + o, p + i, k);
      o += k;
      i += k;
    } else {
      memcpy(buf + o, "\xef\xbf\xbd", 3); /* U+FFFD */
      o += 3;
      i++;
    }
  }
  s = json_stringn(buf, o);
  free(buf);
  return s;
}

static json_t *base64_value(const void *data, size_t len) {
  if (len > ((size_t)1 << 30))
    return NULL;
  size_t outlen = 4 * ((len + 2) / 3) + 1;
  unsigned char *out = malloc(outlen);
  if (!out)
    return NULL;
  int n = EVP_EncodeBlock(out, data, (int)len);
  json_t *s = n >= 0 ? json_stringn((const char *)out, (size_t)n) : NULL;
  free(out);
  return s;
}

/* The JSON value Jupyter expects for `mime` (NULL + message on error). */
static json_t *mime_value(const char *mime, const void *data, size_t len) {
  if (is_json_mime(mime)) {
    json_error_t e;
    json_t *v = json_loadb(data, len, JSON_DECODE_ANY, &e);
    if (!v)
      fprintf(stderr, "nbf_display: %s data is not one JSON document: line %d column %d: %s\n",
              mime, e.line, e.column, e.text);
    return v;
  }
  if (is_text_mime(mime))
    return text_value(data, len);
  return base64_value(data, len);
}

/* Serialize `ev` (stolen) as one line to `fd`. Returns 0 or -1. */
static int write_event(int fd, json_t *ev) {
  if (!ev)
    return -1;
  char *s = json_dumps(ev, JSON_COMPACT);
  json_decref(ev);
  if (!s)
    return -1;
  size_t n = strlen(s);
  char *line = realloc(s, n + 2);
  if (!line) {
    free(s);
    return -1;
  }
  line[n] = '\n';
  line[n + 1] = 0;
  fflush(stdout);
  fflush(stderr);
  pthread_mutex_lock(&g_write_lock);
  int rc = nbf_write_all(fd, line, n + 1);
  pthread_mutex_unlock(&g_write_lock);
  free(line);
  if (rc != 0)
    fprintf(stderr, "nbf_display: writing to NBFORK_DISPLAY_FD=%d failed: %s\n", fd,
            NBF_STRERROR(errno));
  return rc;
}

static int bundle_valid(const nbf_mime_t *items, int n) {
  if (!items || n <= 0)
    return 0;
  for (int i = 0; i < n; i++)
    if (!items[i].mime || !*items[i].mime || (!items[i].data && items[i].len))
      return 0;
  return 1;
}

/* {"msg":MSG,"data":{..},"metadata":{},"transient":{"display_id":..}} */
static json_t *display_event(const char *msg, long id, const nbf_mime_t *items, int n) {
  json_t *data = json_object();
  for (int i = 0; i < n; i++) {
    json_t *v = mime_value(items[i].mime, items[i].len ? items[i].data : "", items[i].len);
    if (!v) {
      json_decref(data);
      return NULL;
    }
    json_object_set_new(data, items[i].mime, v);
  }
  char did[64];
  snprintf(did, sizeof did, "nbf-%ld-%ld", (long)getpid(), id);
  return json_pack("{s:s, s:o, s:{}, s:{s:s}}", "msg", msg, "data", data, "metadata", "transient",
                   "display_id", did);
}

/* Terminal fallback: print the bundle's text item to stdout. Returns 0
 * when something textual was printed, -1 otherwise. */
static int print_text(const nbf_mime_t *items, int n) {
  const nbf_mime_t *best = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(items[i].mime, "text/plain") == 0) {
      best = &items[i];
      break;
    }
    if (!best && (is_text_mime(items[i].mime) || is_json_mime(items[i].mime)))
      best = &items[i];
  }
  if (!best)
    return -1;
  if (best->len)
    fwrite(best->data, 1, best->len, stdout);
  if (!best->len || ((const char *)best->data)[best->len - 1] != '\n')
    fputc('\n', stdout);
  fflush(stdout);
  return 0;
}

long nbf_display_bundle(const nbf_mime_t *items, int n) {
  if (!bundle_valid(items, n))
    return -1;
  long id = __atomic_add_fetch(&g_next_id, 1, __ATOMIC_RELAXED);
  int fd = display_fd();
  if (fd < 0)
    return print_text(items, n) == 0 ? id : -1;
  return write_event(fd, display_event("display_data", id, items, n)) == 0 ? id : -1;
}

int nbf_update_display_bundle(long id, const nbf_mime_t *items, int n) {
  if (id <= 0 || !bundle_valid(items, n))
    return -1;
  int fd = display_fd();
  if (fd < 0)
    return print_text(items, n);
  return write_event(fd, display_event("update_display_data", id, items, n));
}

long nbf_display(const char *mime, const void *data, size_t len) {
  nbf_mime_t it = {mime, data, len};
  return nbf_display_bundle(&it, 1);
}

int nbf_update_display(long id, const char *mime, const void *data, size_t len) {
  nbf_mime_t it = {mime, data, len};
  return nbf_update_display_bundle(id, &it, 1);
}

int nbf_clear_output(int wait) {
  int fd = display_fd();
  if (fd < 0)
    return -1;
  return write_event(fd, json_pack("{s:s, s:b}", "msg", "clear_output", "wait", wait != 0));
}

int nbf__execute_result(const char *text_plain) {
  if (!text_plain)
    return -1;
  int fd = display_fd();
  if (fd < 0) {
    printf("%s\n", text_plain);
    fflush(stdout);
    return 0;
  }
  json_t *v = text_value(text_plain, strlen(text_plain));
  if (!v)
    return -1;
  return write_event(fd, json_pack("{s:s, s:{s:o}, s:{}}", "msg", "execute_result", "data",
                                   "text/plain", v, "metadata"));
}
