/*
 * kn_message.h — a Jupyter message and its wire framing (messaging spec
 * 5.3, "The Wire Protocol"):
 *
 *   [ids..., "<IDS|MSG>", signature, header, parent_header, metadata,
 *    content, buffers...]
 *
 * Reference rules (jansson): a kn_msg_t owns one reference to each of its
 * four JSON objects; functions documented "steals" take over the caller's
 * reference even on failure.
 */
#ifndef KN_MESSAGE_H
#define KN_MESSAGE_H

#include <jansson.h>
#include <stddef.h>

#include "kn_auth.h"
#include "kn_result.h"

#define KN_PROTOCOL_VERSION "5.3"
#define KN_DELIMITER "<IDS|MSG>"

/* An owned frame of bytes. */
typedef struct kn_frame {
  unsigned char *data;
  size_t len;
} kn_frame_t;

/* A growable list of owned frames. Zero-initialise ({0}) before use. */
typedef struct kn_frames {
  kn_frame_t *v;
  size_t n, cap;
} kn_frames_t;

/* Append a copy of len bytes. KN_ERR_NOMEM on failure. */
kn_result_t kn_frames_push(kn_frames_t *f, const void *data, size_t len);
/* Append, taking ownership of data (malloc'd) even on failure. */
kn_result_t kn_frames_push_owned(kn_frames_t *f, unsigned char *data, size_t len);
/* Free every frame and the list; leaves *f empty. NULL-safe. */
void kn_frames_clear(kn_frames_t *f);

typedef struct kn_msg {
  kn_frames_t ids; /* ROUTER identities (received/routed back), or the iopub topic */
  json_t *header;
  json_t *parent_header;
  json_t *metadata;
  json_t *content;
  kn_frames_t buffers; /* extra binary frames after content */
} kn_msg_t;

/* New message with a fresh header (msg_id uuid4, session, username, date
 * ISO 8601 UTC, msg_type, version "5.3"), parent_header = a reference to
 * parent_header (or {} when NULL), metadata {}, content = content (steals;
 * {} when NULL). Returns NULL on allocation failure. Caller owns it. */
kn_msg_t *kn_msg_new(const char *msg_type, const char *session, const char *username,
                     json_t *parent_header, json_t *content);

/* Free *self_p and clear it. NULL-safe. */
void kn_msg_destroy(kn_msg_t **self_p);

/* header.msg_type / header.msg_id, or "" when absent. Borrowed. */
const char *kn_msg_type(const kn_msg_t *m);
const char *kn_msg_id(const kn_msg_t *m);

/* Replace dst's routing identities with copies of src's. */
kn_result_t kn_msg_copy_ids(kn_msg_t *dst, const kn_msg_t *src);

/* Serialize m into out (appended; out should be empty): identities,
 * delimiter, signature (kn_auth_sign over the 4 JSON frames), the 4
 * compact JSON frames, buffers. */
kn_result_t kn_msg_serialize(const kn_msg_t *m, const kn_auth_t *auth, kn_frames_t *out);

/* The compact JSON of the last parent header serialized, with the object
 * it came from (a reference held, so its address is not reused): every
 * message a request causes (status busy and idle, execute_input, outputs,
 * the reply) has that request's header as parent, dumped once instead of
 * per message. Valid because headers are never modified once built or
 * parsed. Zero-initialise; kn_dump_cache_clear frees. */
typedef struct kn_dump_cache {
  json_t *obj;
  char *text;
  size_t len;
} kn_dump_cache_t;

void kn_dump_cache_clear(kn_dump_cache_t *c);

/* kn_msg_serialize, taking the parent header's text from cache (NULL: no
 * cache) when m's parent header is the object it holds. The same frames. */
kn_result_t kn_msg_serialize_cached(const kn_msg_t *m, const kn_auth_t *auth,
                                    kn_dump_cache_t *cache, kn_frames_t *out);

/* Parse n received frames. The signature is checked over the exact bytes
 * received. Returns KN_OK and a new message in *out (caller owns), or
 * KN_ERR_AUTH (bad/missing signature) or KN_ERR_PROTOCOL (no delimiter,
 * too few frames, a JSON frame that is not an object, no msg_type), with
 * a description in why[why_len] when why is not NULL. */
kn_result_t kn_msg_parse(const kn_span_t *frames, size_t n, const kn_auth_t *auth, kn_msg_t **out,
                         char *why, size_t why_len);

#endif
