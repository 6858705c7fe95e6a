/*
 * ex_memcells.c — see ex_memcells.h.
 */
#define _GNU_SOURCE
#include "ex_memcells.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ex_jit.h"
#include "nbf_util.h"

/* One arena: a private anonymous RWX map, reserved (MAP_NORESERVE) and
 * filled from the start. */
#define ARENA_BYTES (64u << 20)

struct ex_memcells {
  char *arena;
  size_t used, cap, bytes;
  ex_memcell_t *cells;
  size_t n, ncap;
  size_t *slots; /* hash index of the tags: cell index + 1, 0 empty (a
                    long notebook's lookups are not a pass over it); NULL
                    after memory ran out (then a pass) */
  size_t nslots; /* a power of two, at least twice n */
  char script[PATH_MAX];
  int has_script;
  uint64_t hash;
};

ex_memcells_t *ex_memcells_new(const char *workdir) {
  ex_memcells_t *m = calloc(1, sizeof *m);
  if (m &&
      snprintf(m->script, sizeof m->script, "%s/memcells.ld", workdir) >= (int)sizeof m->script) {
    free(m);
    return NULL;
  }
  return m;
}

static void cell_free(ex_memcell_t *c) {
  for (size_t i = 0; i < c->nvars; i++)
    free(c->names[i]);
  free(c->names);
  free(c->addrs);
  free(c->sizes);
}

void ex_memcells_destroy(ex_memcells_t **m_p) {
  if (!m_p || !*m_p)
    return;
  /* the arenas stay mapped: code may still point into them (the process
   * is ending) */
  for (size_t i = 0; i < (*m_p)->n; i++)
    cell_free(&(*m_p)->cells[i]);
  free((*m_p)->cells);
  free((*m_p)->slots);
  free(*m_p);
  *m_p = NULL;
}

const ex_memcell_t *ex_memcells_find(const ex_memcells_t *m, const char *tag) {
  if (m && m->slots) {
    size_t mask = m->nslots - 1;
    for (size_t s = nbf_fnv1a(tag, NBF_FNV_OFFSET) & mask; m->slots[s]; s = (s + 1) & mask)
      if (!strcmp(m->cells[m->slots[s] - 1].tag, tag))
        return &m->cells[m->slots[s] - 1];
    return NULL;
  }
  for (size_t i = m ? m->n : 0; i-- > 0;)
    if (!strcmp(m->cells[i].tag, tag))
      return &m->cells[i];
  return NULL;
}

/* Put cell i into the index (which has room); the newest of a tag wins. */
static void index_put(ex_memcells_t *m, size_t i) {
  size_t mask = m->nslots - 1, s = nbf_fnv1a(m->cells[i].tag, NBF_FNV_OFFSET) & mask;
  while (m->slots[s] && strcmp(m->cells[m->slots[s] - 1].tag, m->cells[i].tag))
    s = (s + 1) & mask;
  m->slots[s] = i + 1;
}

/* Index cell m->n - 1, just added: grown and rebuilt when it would fill
 * half the table. Out of memory leaves no index (lookups make a pass). */
static void index_add(ex_memcells_t *m) {
  if (2 * m->n + 2 > m->nslots) {
    size_t want = m->nslots ? m->nslots * 2 : 256;
    free(m->slots);
    m->slots = calloc(want, sizeof *m->slots);
    m->nslots = m->slots ? want : 0;
    for (size_t i = 0; m->slots && i + 1 < m->n; i++)
      index_put(m, i);
  }
  if (m->slots)
    index_put(m, m->n - 1);
}

/* ex_jit_dll_load's allocator: n bytes of the arena (a new arena when the
 * current one is full), 64-byte aligned. */
static void *arena_alloc(size_t n, void *ctx) {
  ex_memcells_t *m = ctx;
  n = (n + 63) & ~(size_t)63;
  if (n > ARENA_BYTES)
    return NULL;
  if (!m->arena || m->used + n > m->cap) {
    void *a = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED)
      return NULL;
    m->arena = a;
    m->used = 0;
    m->cap = ARENA_BYTES;
  }
  void *p = m->arena + m->used;
  m->used += n;
  m->bytes += n;
  return p;
}

/* The names of the variables unit `u` defines (its versioned symbols
 * `v__cTAG` in sym[], the C names in c[]): how many, or -1. */
static long unit_variables(const ex_cell_unit_t *u, char ***c, char ***sym) {
  size_t n = 0;
  for (size_t i = 0; i < u->split.count; i++)
    if (u->split.chunks[i].kind == EX_CHUNK_VARIABLE && !u->split.chunks[i].is_extern)
      n += u->split.chunks[i].ndecls;
  *c = calloc(n + 1, sizeof **c);
  *sym = calloc(n + 3, sizeof **sym);
  if (!*c || !*sym)
    return -1;
  size_t k = 0;
  for (size_t i = 0; i < u->split.count; i++) {
    const ex_chunk_t *ch = &u->split.chunks[i];
    if (ch->kind != EX_CHUNK_VARIABLE || ch->is_extern)
      continue;
    for (size_t d = 0; d < ch->ndecls; d++, k++) {
      (*c)[k] = strdup(ch->decls[d].name);
      if (!(*c)[k] || asprintf(&(*sym)[k], "%s__c%s", ch->decls[d].name, u->tag) < 0)
        return -1;
    }
  }
  return (long)n;
}

static void free_names(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    free(v[i]);
  free(v);
}

const ex_memcell_t *ex_memcells_load(ex_memcells_t *m, const ex_cell_unit_t *u,
                                     const char *dll_path) {
  if (m->n == m->ncap) {
    size_t cap = m->ncap ? m->ncap * 2 : 64;
    ex_memcell_t *v = realloc(m->cells, cap * sizeof *v);
    if (!v)
      return NULL;
    m->cells = v;
    m->ncap = cap;
  }
  char **names = NULL, **syms = NULL;
  long nv = unit_variables(u, &names, &syms);
  ex_memcell_t c = {0};
  if (nv >= 0) {
    size_t n = (size_t)nv;
    syms[n] = (char *)u->run_symbol; /* borrowed: not freed below */
    syms[n + 1] = u->has_launch ? (char *)u->launch_symbol : NULL;
    void **addrs = calloc(n + 2, sizeof *addrs);
    size_t *sizes = calloc(n + 1, sizeof *sizes);
    if (addrs && sizes && ex_jit_dll_sizes(dll_path, (const char *const *)syms, sizes, n) == 0 &&
        ex_jit_dll_load(dll_path, arena_alloc, m, (const char *const *)syms, addrs, n + 2) == 0) {
      memcpy(c.tag, u->tag, sizeof c.tag);
      c.run = (void (*)(void))addrs[n];
      c.launch = (int (*)(void))addrs[n + 1];
      c.nvars = n;
      c.names = names;
      c.addrs = addrs;
      c.sizes = sizes;
      names = NULL;
    } else {
      free(addrs);
      free(sizes);
    }
    syms[n] = syms[n + 1] = NULL;
  }
  free_names(syms, nv > 0 ? (size_t)nv : 0);
  free_names(names, nv > 0 ? (size_t)nv : 0);
  if (!c.run)
    return NULL;
  m->cells[m->n++] = c;
  index_add(m);
  return &m->cells[m->n - 1];
}

int ex_memcells_publish(ex_memcells_t *m, const ex_memcell_t *c, ex_cell_state_t *st) {
  for (size_t i = 0; i < c->nvars; i++) /* a re-run defines them again in the registry */
    ex_cell_state_place(st, c->names[i], c->addrs[i], c->sizes[i]);
  ex_memcell_t *own = (ex_memcell_t *)ex_memcells_find(m, c->tag);
  if (!c->nvars || !own || own->published)
    return 0;
  own->published = 1;
  if (!m->hash) { /* this process: its addresses mean nothing to another one */
    char id[96];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id, sizeof id, "%d.%lld.%ld.%p", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec,
             (void *)m->arena);
    m->hash = nbf_fnv1a(id, NBF_FNV_OFFSET) | 1;
  }
  FILE *f = fopen(m->script, "a");
  if (!f)
    return -1;
  int bad = 0;
  for (size_t i = 0; i < c->nvars; i++)
    bad |= fprintf(f, "PROVIDE(%s__c%s = %#lx);\n", c->names[i], c->tag,
                   (unsigned long)(uintptr_t)c->addrs[i]) < 0;
  bad |= fclose(f) != 0;
  m->has_script = 1;
  return bad ? -1 : 0;
}

const char *ex_memcells_script(const ex_memcells_t *m) {
  return m && m->has_script ? m->script : NULL;
}

uint64_t ex_memcells_hash(const ex_memcells_t *m) {
  return m ? m->hash : 0;
}

size_t ex_memcells_count(const ex_memcells_t *m) {
  return m ? m->n : 0;
}

size_t ex_memcells_bytes(const ex_memcells_t *m) {
  return m ? m->bytes : 0;
}
