/* kn_message.c — message construction, framing, parsing (see kn_message.h). */
#include "kn_message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_util.h"

kn_result_t kn_frames_push(kn_frames_t *f, const void *data, size_t len) {
  unsigned char *d = malloc(len ? len : 1);
  if (!d)
    return KN_ERR_NOMEM;
  if (len)
    memcpy(d, data, len);
  return kn_frames_push_owned(f, d, len);
}

kn_result_t kn_frames_push_owned(kn_frames_t *f, unsigned char *data, size_t len) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    kn_frame_t *v = realloc(f->v, cap * sizeof *v);
    if (!v) {
      free(data);
      return KN_ERR_NOMEM;
    }
    f->v = v;
    f->cap = cap;
  }
  f->v[f->n].data = data;
  f->v[f->n].len = len;
  f->n++;
  return KN_OK;
}

void kn_frames_clear(kn_frames_t *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->n; i++)
    free(f->v[i].data);
  free(f->v);
  memset(f, 0, sizeof *f);
}

kn_msg_t *kn_msg_new(const char *msg_type, const char *session, const char *username,
                     json_t *parent_header, json_t *content) {
  kn_msg_t *m = calloc(1, sizeof *m);
  char id[KN_UUID_LEN + 1], date[KN_DATE_LEN];
  if (!m || kn_uuid4(id) != KN_OK) {
    json_decref(content);
    free(m);
    return NULL;
  }
  kn_iso8601_now(date);
  m->header =
      json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "session", session, "username",
                username, "date", date, "msg_type", msg_type, "version", KN_PROTOCOL_VERSION);
  m->parent_header = parent_header ? json_incref(parent_header) : json_object();
  m->metadata = json_object();
  m->content = content ? content : json_object();
  if (!m->header || !m->parent_header || !m->metadata || !m->content) {
    kn_msg_destroy(&m);
    return NULL;
  }
  return m;
}

void kn_msg_destroy(kn_msg_t **self_p) {
  kn_msg_t *m = NBF_TAKE(self_p);
  if (!m)
    return;
  kn_frames_clear(&m->ids);
  kn_frames_clear(&m->buffers);
  json_decref(m->header);
  json_decref(m->parent_header);
  json_decref(m->metadata);
  json_decref(m->content);
  free(m);
}

static const char *header_str(const kn_msg_t *m, const char *key) {
  const char *s = m ? json_string_value(json_object_get(m->header, key)) : NULL;
  return s ? s : "";
}

const char *kn_msg_type(const kn_msg_t *m) {
  return header_str(m, "msg_type");
}
const char *kn_msg_id(const kn_msg_t *m) {
  return header_str(m, "msg_id");
}

kn_result_t kn_msg_copy_ids(kn_msg_t *dst, const kn_msg_t *src) {
  kn_frames_clear(&dst->ids);
  for (size_t i = 0; i < src->ids.n; i++)
    KN_CHECK(kn_frames_push(&dst->ids, src->ids.v[i].data, src->ids.v[i].len));
  return KN_OK;
}

void kn_dump_cache_clear(kn_dump_cache_t *c) {
  json_decref(c->obj);
  free(c->text);
  memset(c, 0, sizeof *c);
}

/* A malloc'd copy of obj's compact JSON (its length in *len), from the
 * cache when it holds obj; NULL when out of memory. */
static char *dump(json_t *obj, kn_dump_cache_t *cache, size_t *len) {
  if (!cache || cache->obj != obj) {
    char *text = json_dumps(obj, JSON_COMPACT);
    if (text)
      *len = strlen(text);
    if (!cache || !text)
      return text;
    kn_dump_cache_clear(cache);
    cache->obj = json_incref(obj);
    cache->text = text;
    cache->len = *len;
  }
  char *copy = malloc(cache->len + 1);
  if (copy) {
    memcpy(copy, cache->text, cache->len + 1);
    *len = cache->len;
  }
  return copy;
}

kn_result_t kn_msg_serialize(const kn_msg_t *m, const kn_auth_t *auth, kn_frames_t *out) {
  return kn_msg_serialize_cached(m, auth, NULL, out);
}

kn_result_t kn_msg_serialize_cached(const kn_msg_t *m, const kn_auth_t *auth,
                                    kn_dump_cache_t *cache, kn_frames_t *out) {
  json_t *objs[4] = {m->header, m->parent_header, m->metadata, m->content};
  char *text[4] = {0};
  kn_span_t parts[4];
  kn_result_t r = KN_ERR_NOMEM;
  for (int i = 0; i < 4; i++) {
    text[i] = dump(objs[i], i == 1 ? cache : NULL, &parts[i].len);
    if (!text[i])
      goto out;
    parts[i].data = (const unsigned char *)text[i];
  }
  char sig[KN_AUTH_HEX_LEN + 1];
  if ((r = kn_auth_sign(auth, parts, 4, sig)) != KN_OK)
    goto out;
  for (size_t i = 0; i < m->ids.n; i++)
    if ((r = kn_frames_push(out, m->ids.v[i].data, m->ids.v[i].len)) != KN_OK)
      goto out;
  if ((r = kn_frames_push(out, KN_DELIMITER, strlen(KN_DELIMITER))) != KN_OK ||
      (r = kn_frames_push(out, sig, strlen(sig))) != KN_OK)
    goto out;
  for (int i = 0; i < 4; i++) {
    r = kn_frames_push_owned(out, (unsigned char *)text[i], parts[i].len);
    text[i] = NULL;
    if (r != KN_OK)
      goto out;
  }
  for (size_t i = 0; i < m->buffers.n; i++)
    if ((r = kn_frames_push(out, m->buffers.v[i].data, m->buffers.v[i].len)) != KN_OK)
      goto out;
out:
  for (int i = 0; i < 4; i++)
    free(text[i]);
  return r;
}

kn_result_t kn_msg_parse(const kn_span_t *frames, size_t n, const kn_auth_t *auth, kn_msg_t **out,
                         char *why, size_t why_len) {
  static const char *const names[4] = {"header", "parent_header", "metadata", "content"};
  char dummy[8];
  if (!why) {
    why = dummy;
    why_len = sizeof dummy;
  }
  why[0] = '\0';
  *out = NULL;
  size_t d = 0;
  const size_t dlen = strlen(KN_DELIMITER);
  while (d < n && !(frames[d].len == dlen && memcmp(frames[d].data, KN_DELIMITER, dlen) == 0))
    d++;
  if (d == n) {
    snprintf(why, why_len, "no <IDS|MSG> delimiter in %zu frames", n);
    return KN_ERR_PROTOCOL;
  }
  if (n - d < 6) {
    snprintf(why, why_len, "%zu frames after the delimiter, need signature + 4", n - d - 1);
    return KN_ERR_PROTOCOL;
  }
  const kn_span_t *sig = &frames[d + 1];
  const kn_span_t *parts = &frames[d + 2];
  if (kn_auth_verify(auth, parts, 4, sig->data, sig->len) != KN_OK) {
    snprintf(why, why_len, "%s signature", sig->len ? "invalid" : "missing");
    return KN_ERR_AUTH;
  }
  kn_msg_t *m = calloc(1, sizeof *m);
  if (!m)
    return KN_ERR_NOMEM;
  kn_result_t r = KN_OK;
  json_t **dst[4] = {&m->header, &m->parent_header, &m->metadata, &m->content};
  for (int i = 0; i < 4; i++) {
    json_error_t je;
    *dst[i] = json_loadb((const char *)parts[i].data, parts[i].len, JSON_ALLOW_NUL, &je);
    if (!*dst[i] || !json_is_object(*dst[i])) {
      snprintf(why, why_len, "%s is not a JSON object%s%s", names[i], *dst[i] ? "" : ": ",
               *dst[i] ? "" : je.text);
      r = KN_ERR_PROTOCOL;
      goto err;
    }
  }
  if (!json_is_string(json_object_get(m->header, "msg_type"))) {
    snprintf(why, why_len, "header has no msg_type");
    r = KN_ERR_PROTOCOL;
    goto err;
  }
  for (size_t i = 0; i < d; i++)
    if ((r = kn_frames_push(&m->ids, frames[i].data, frames[i].len)) != KN_OK)
      goto err;
  for (size_t i = d + 6; i < n; i++)
    if ((r = kn_frames_push(&m->buffers, frames[i].data, frames[i].len)) != KN_OK)
      goto err;
  *out = m;
  return KN_OK;
err:
  kn_msg_destroy(&m);
  return r;
}
