/* kn_connection.c — connection file parsing (see kn_connection.h). */
#include "kn_connection.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kn_log.h"
#include "nbf_buf.h"
#include "nbf_util.h"

static const char *const PORT_NAMES[KN_PORT_COUNT] = {"shell_port", "control_port", "stdin_port",
                                                      "iopub_port", "hb_port"};

const char *kn_connection_port_name(kn_port_index_t i) {
  return (i >= 0 && i < KN_PORT_COUNT) ? PORT_NAMES[i] : "?";
}

static kn_result_t fail(kn_connection_error_t *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kn_result_t fail(kn_connection_error_t *err, const char *field, const char *fmt, ...) {
  if (err) {
    memset(err, 0, sizeof *err);
    snprintf(err->field, sizeof err->field, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return KN_ERR_INVALID;
}

/* Optional string field with a default; error if present but not a
 * string or too long. */
static kn_result_t get_string(json_t *root, const char *field, const char *dflt, char *dst,
                              size_t cap, kn_connection_error_t *err) {
  json_t *v = json_object_get(root, field);
  const char *s = dflt;
  if (v) {
    if (!json_is_string(v))
      return fail(err, field, "must be a string");
    s = json_string_value(v);
  }
  if (strlen(s) >= cap)
    return fail(err, field, "is too long (at most %zu bytes)", cap - 1);
  snprintf(dst, cap, "%s", s);
  return KN_OK;
}

static kn_result_t parse_root(json_t *root, kn_connection_t *out, kn_connection_error_t *err) {
  kn_result_t r;
  if (!json_is_object(root))
    return fail(err, "(json)", "the top level must be a JSON object");

  if ((r = get_string(root, "transport", "tcp", out->transport, sizeof out->transport, err)))
    return r;
  if (strcmp(out->transport, "tcp") != 0 && strcmp(out->transport, "ipc") != 0)
    return fail(err, "transport", "must be \"tcp\" or \"ipc\" (got \"%s\")", out->transport);
  if ((r = get_string(root, "ip", "127.0.0.1", out->ip, sizeof out->ip, err)))
    return r;
  if (out->ip[0] == '\0')
    return fail(err, "ip", "must not be empty");

  int is_tcp = strcmp(out->transport, "tcp") == 0;
  for (int i = 0; i < KN_PORT_COUNT; i++) {
    json_t *v = json_object_get(root, PORT_NAMES[i]);
    if (!v)
      return fail(err, PORT_NAMES[i], "is missing");
    if (!json_is_integer(v))
      return fail(err, PORT_NAMES[i], "must be an integer");
    json_int_t p = json_integer_value(v);
    if (p < 1 || (is_tcp && p > 65535) || p > 2147483647)
      return fail(err, PORT_NAMES[i], "must be in 1..65535 (got %lld)", (long long)p);
    out->ports[i] = (int)p;
  }

  if ((r = get_string(root, "signature_scheme", "hmac-sha256", out->signature_scheme,
                      sizeof out->signature_scheme, err)))
    return r;
  if (strcmp(out->signature_scheme, "hmac-sha256") != 0)
    return fail(err, "signature_scheme", "must be \"hmac-sha256\" (got \"%s\")",
                out->signature_scheme);

  json_t *key = json_object_get(root, "key");
  if (!key)
    return fail(err, "key", "is missing (use \"\" to disable message signing)");
  if (!json_is_string(key))
    return fail(err, "key", "must be a string");
  out->key_len = json_string_length(key);
  out->key = malloc(out->key_len + 1);
  if (!out->key)
    return KN_ERR_NOMEM;
  memcpy(out->key, json_string_value(key), out->key_len);
  out->key[out->key_len] = '\0';
  return KN_OK;
}

kn_result_t kn_connection_parse(const char *json_text, kn_connection_t *out,
                                kn_connection_error_t *err) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = json_loads(json_text, 0, &je);
  if (!root) {
    kn_result_t r = fail(err, "(json)", "%s", je.text);
    if (err) {
      err->line = je.line;
      err->column = je.column;
    }
    return r;
  }
  kn_result_t r = parse_root(root, out, err);
  json_decref(root);
  if (r != KN_OK)
    kn_connection_clear(out);
  return r;
}

kn_result_t kn_connection_load(const char *path, kn_connection_t *out, kn_connection_error_t *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail(err, "(file)", "cannot open: %s", NBF_STRERROR(errno));
    return KN_ERR_SYSTEM;
  }
  nbf_buf_t text = {0};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (nbf_buf_append(&text, chunk, n) != 0) {
      nbf_buf_free(&text);
      fclose(f);
      return KN_ERR_NOMEM;
    }
  int rerr = ferror(f);
  fclose(f);
  size_t len = text.len;
  char *s = nbf_buf_take(&text); /* "" for an empty file */
  if (rerr || !s) {
    free(s);
    fail(err, "(file)", rerr ? "read error" : "out of memory");
    return rerr ? KN_ERR_SYSTEM : KN_ERR_NOMEM;
  }
  if (strlen(s) != len) {
    free(s);
    return fail(err, "(json)", "the file contains a NUL byte");
  }
  kn_result_t r = kn_connection_parse(s, out, err);
  free(s);
  return r;
}

kn_result_t kn_connection_endpoint(const kn_connection_t *c, kn_port_index_t i, char *buf,
                                   size_t len) {
  int n;
  if (strcmp(c->transport, "ipc") == 0)
    n = snprintf(buf, len, "ipc://%s-%d", c->ip, c->ports[i]);
  else if (strchr(c->ip, ':')) /* IPv6 literal */
    n = snprintf(buf, len, "tcp://[%s]:%d", c->ip, c->ports[i]);
  else
    n = snprintf(buf, len, "tcp://%s:%d", c->ip, c->ports[i]);
  return (n < 0 || (size_t)n >= len) ? KN_ERR_INVALID : KN_OK;
}

void kn_connection_clear(kn_connection_t *c) {
  if (!c)
    return;
  free(c->key);
  memset(c, 0, sizeof *c);
}

int kn_connection_check_mode(const char *path, char *msg, size_t len) {
  struct stat st;
  if (stat(path, &st) != 0 || !(st.st_mode & 077))
    return 0;
  snprintf(msg, len,
           "connection file '%s' is %s%s by other users (mode %04o): its key lets anyone who "
           "reads it run code in this kernel. Run: chmod 600 '%s'",
           path, st.st_mode & 044 ? "readable" : "writable",
           (st.st_mode & 044) && (st.st_mode & 022) ? " and writable" : "",
           (unsigned)(st.st_mode & 07777), path);
  return 1;
}
