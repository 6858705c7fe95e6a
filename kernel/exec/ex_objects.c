/*
 * ex_objects.c — see ex_objects.h.
 */
#define _GNU_SOURCE
#include "ex_objects.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *handle;
  char tag[17];
  int may_unload;
} ex_object_t;

struct ex_objects {
  ex_object_t *v;
  size_t n, cap;
};

ex_objects_t *ex_objects_new(void) {
  return calloc(1, sizeof(ex_objects_t));
}

void ex_objects_destroy(ex_objects_t **o_p) {
  if (!o_p || !*o_p)
    return;
  free((*o_p)->v);
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
  memcpy(name, w, n);
  name[n] = 0;
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
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 64;
    ex_object_t *v = realloc(o->v, cap * sizeof *v);
    if (!v)
      return -1;
    o->v = v;
    o->cap = cap;
  }
  ex_object_t *e = &o->v[o->n++];
  e->handle = handle;
  strncpy(e->tag, tag, sizeof e->tag - 1);
  e->tag[sizeof e->tag - 1] = 0;
  e->may_unload = may_unload;
  return 0;
}

typedef struct {
  char (*v)[17];
  size_t n, cap;
  int oom;
} tag_set_t;

static void add_tag(const char *tag, void *ctx) {
  tag_set_t *t = ctx;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char(*v)[17] = realloc(t->v, cap * sizeof *v);
    if (!v) {
      t->oom = 1;
      return;
    }
    t->v = v;
    t->cap = cap;
  }
  memcpy(t->v[t->n++], tag, 17);
}

static int cmp_tag(const void *a, const void *b) {
  return strcmp(a, b);
}

/* The tags the registry names, sorted once per sweep: a sweep costs
 * O((objects + definitions) log definitions), not their product. */
size_t ex_objects_sweep(ex_objects_t *o, const ex_cell_state_t *st) {
  tag_set_t named = {0};
  ex_cell_state_each_tag(st, add_tag, &named);
  if (named.oom) { /* unsure what is named: close nothing */
    free(named.v);
    return 0;
  }
  if (named.n)
    qsort(named.v, named.n, sizeof *named.v, cmp_tag);
  size_t kept = 0, closed = 0;
  for (size_t i = 0; i < o->n; i++) {
    ex_object_t *e = &o->v[i];
    int is_named = named.n && bsearch(e->tag, named.v, named.n, sizeof *named.v, cmp_tag);
    if (e->may_unload && !is_named && dlclose(e->handle) == 0) {
      closed++;
      continue;
    }
    o->v[kept++] = *e;
  }
  o->n = kept;
  free(named.v);
  return closed;
}

size_t ex_objects_count(const ex_objects_t *o) {
  return o->n;
}
