/*
 * ex_objects.c — see ex_objects.h.
 */
#define _GNU_SOURCE
#include "ex_objects.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_buf.h"

typedef struct {
  void *handle;
  char tag[17];
  int may_unload;
} ex_object_t;

struct ex_objects {
  nbf_buf_t objs; /* ex_object_t records, in order of loading */
};

#define OBJ(o, i) (((ex_object_t *)(o)->objs.data)[i])
#define NOBJ(o) ((o)->objs.len / sizeof(ex_object_t))

ex_objects_t *ex_objects_new(void) {
  return calloc(1, sizeof(ex_objects_t));
}

void ex_objects_destroy(ex_objects_t **o_p) {
  if (!o_p || !*o_p)
    return;
  nbf_buf_free(&(*o_p)->objs);
  free(*o_p);
  *o_p = NULL;
}

/* An identifier that may be a macro hiding a string literal or an
 * address: one the registry knows as a macro, or written in capitals
 * (the C convention for macros; NULL is a null pointer). */
static int may_be_macro(const ex_cell_state_t *st, const char *w, size_t n) {
  char name[128];
  if (n >= sizeof name)
    return 1;
  snprintf(name, sizeof name, "%.*s", (int)n, w);
  ex_cell_name_t d;
  if (ex_cell_find(st, name, &d) && !strcmp(d.kind, "macro"))
    return 1;
  int caps = n > 1 && strcmp(name, "NULL") != 0;
  for (size_t i = 0; caps && i < n; i++)
    caps = isupper((unsigned char)w[i]) || isdigit((unsigned char)w[i]) || w[i] == '_';
  return caps;
}

/* Can the cell's text make a pointer into its own object? */
static int text_may_point_inside(const ex_cell_state_t *st, const char *code) {
  if (strpbrk(code, "\"&[") || ex_cell_find_word(code, "static") ||
      ex_cell_find_word(code, "__func__") || ex_cell_find_word(code, "__FUNCTION__") ||
      ex_cell_find_word(code, "__PRETTY_FUNCTION__"))
    return 1;
  for (const char *p = code; *p;) {
    if (!(isalpha((unsigned char)*p) || *p == '_')) {
      p++;
      continue;
    }
    const char *w = p;
    while (isalnum((unsigned char)*p) || *p == '_')
      p++;
    if (may_be_macro(st, w, (size_t)(p - w)))
      return 1;
  }
  return 0;
}

int ex_objects_may_unload(const ex_cell_state_t *st, const ex_cell_unit_t *u, const char *code,
                          int launch, int timeit) {
  if (u->cxx || launch || timeit || !code)
    return 0;
  for (size_t i = 0; i < u->split.count; i++)
    if (u->split.chunks[i].kind == EX_CHUNK_FUNCTION)
      return 0;
  return !text_may_point_inside(st, code);
}

int ex_objects_add(ex_objects_t *o, void *handle, const char *tag, int may_unload) {
  ex_object_t e = {handle, "", may_unload};
  strncpy(e.tag, tag, sizeof e.tag - 1);
  return nbf_buf_append(&o->objs, &e, sizeof e);
}

static void count_tag(const char *tag, void *ctx) {
  (void)tag;
  ++*(size_t *)ctx;
}

/* The registry's tags, 17-byte records in a buffer. */
static void add_tag(const char *tag, void *ctx) {
  nbf_buf_t *t = ctx;
  nbf_buf_append(t, tag, 17); /* a failed append leaves len short: checked by the caller */
}

static int cmp_tag(const void *a, const void *b) {
  return strcmp(a, b);
}

/* The tags the registry names, sorted once per sweep: a sweep costs
 * O((objects + definitions) log definitions), not their product. */
size_t ex_objects_sweep(ex_objects_t *o, const ex_cell_state_t *st) {
  size_t candidates = 0;
  for (size_t i = 0; i < NOBJ(o); i++)
    candidates += OBJ(o, i).may_unload;
  if (!candidates) /* nothing could go: no pass over the whole registry */
    return 0;
  nbf_buf_t named = {0};
  size_t expected = 0;
  ex_cell_state_each_tag(st, count_tag, &expected);
  ex_cell_state_each_tag(st, add_tag, &named);
  size_t nn = named.len / 17;
  if (nn != expected) { /* out of memory: unsure what is named, close nothing */
    nbf_buf_free(&named);
    return 0;
  }
  if (nn)
    qsort(named.data, nn, 17, cmp_tag);
  size_t kept = 0, closed = 0, n = NOBJ(o);
  for (size_t i = 0; i < n; i++) {
    ex_object_t e = OBJ(o, i);
    int is_named = nn && bsearch(e.tag, named.data, nn, 17, cmp_tag);
    if (e.may_unload && !is_named && dlclose(e.handle) == 0) {
      closed++;
      continue;
    }
    OBJ(o, kept++) = e;
  }
  o->objs.len = kept * sizeof(ex_object_t);
  nbf_buf_free(&named);
  return closed;
}

size_t ex_objects_count(const ex_objects_t *o) {
  return NOBJ(o);
}
