/* kn_history.c — in-memory cell history (see kn_history.h). */
#define _GNU_SOURCE
#include "kn_history.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "kn_util.h"

typedef struct entry {
  int line;
  char *input;
  char *output; /* NULL = none */
} entry_t;

struct kn_history {
  entry_t *v;
  int n, cap;
};

kn_history_t *kn_history_new(void) {
  return calloc(1, sizeof(kn_history_t));
}

void kn_history_destroy(kn_history_t **self_p) {
  kn_history_t *h = NBF_TAKE(self_p);
  if (!h)
    return;
  for (int i = 0; i < h->n; i++) {
    free(h->v[i].input);
    free(h->v[i].output);
  }
  free(h->v);
  free(h);
}

kn_result_t kn_history_add(kn_history_t *h, int line, const char *input) {
  if (h->n == h->cap) {
    int cap = h->cap ? h->cap * 2 : 64;
    entry_t *v = realloc(h->v, (size_t)cap * sizeof *v);
    if (!v)
      return KN_ERR_NOMEM;
    h->v = v;
    h->cap = cap;
  }
  char *dup = strdup(input ? input : "");
  if (!dup)
    return KN_ERR_NOMEM;
  h->v[h->n++] = (entry_t){line, dup, NULL};
  return KN_OK;
}

kn_result_t kn_history_set_output(kn_history_t *h, int line, const char *output) {
  for (int i = h->n - 1; i >= 0; i--)
    if (h->v[i].line == line) {
      char *dup = output ? strdup(output) : NULL;
      if (!dup && output)
        return KN_ERR_NOMEM;
      free(h->v[i].output);
      h->v[i].output = dup;
      return KN_OK;
    }
  return KN_OK;
}

static int append_entry(json_t *arr, const entry_t *e, bool output) {
  json_t *item = output ? json_pack("[i, i, [s, o]]", KN_HISTORY_SESSION, e->line, e->input,
                                    e->output ? json_string(e->output) : json_null())
                        : json_pack("[i, i, s]", KN_HISTORY_SESSION, e->line, e->input);
  return item ? json_array_append_new(arr, item) : -1;
}

json_t *kn_history_tail(const kn_history_t *h, int n, bool output) {
  json_t *arr = json_array();
  if (!arr)
    return NULL;
  int from = n <= 0 ? h->n : (n >= h->n ? 0 : h->n - n);
  for (int i = from; i < h->n; i++)
    if (append_entry(arr, &h->v[i], output) != 0) {
      json_decref(arr);
      return NULL;
    }
  return arr;
}

json_t *kn_history_range(const kn_history_t *h, int session, int start, int stop, bool output) {
  json_t *arr = json_array();
  if (!arr)
    return NULL;
  if (session != 0 && session != KN_HISTORY_SESSION)
    return arr; /* no earlier sessions are kept */
  for (int i = 0; i < h->n; i++) {
    int line = h->v[i].line;
    if (line < start || (stop > 0 && line >= stop))
      continue;
    if (append_entry(arr, &h->v[i], output) != 0) {
      json_decref(arr);
      return NULL;
    }
  }
  return arr;
}

json_t *kn_history_search(const kn_history_t *h, const char *pattern, int n, bool unique,
                          bool output) {
  json_t *arr = json_array();
  if (!arr)
    return NULL;
  /* Walk newest first so n and unique keep the latest entries. */
  int *picked = malloc((size_t)(h->n ? h->n : 1) * sizeof *picked);
  if (!picked) {
    json_decref(arr);
    return NULL;
  }
  int k = 0;
  for (int i = h->n - 1; i >= 0 && (n <= 0 || k < n); i--) {
    if (fnmatch(pattern ? pattern : "*", h->v[i].input, 0) != 0)
      continue;
    bool dup = false;
    for (int j = 0; unique && j < k && !dup; j++)
      dup = strcmp(h->v[picked[j]].input, h->v[i].input) == 0;
    if (!dup)
      picked[k++] = i;
  }
  for (int j = k - 1; j >= 0; j--)
    if (append_entry(arr, &h->v[picked[j]], output) != 0) {
      json_decref(arr);
      arr = NULL;
      break;
    }
  free(picked);
  return arr;
}
