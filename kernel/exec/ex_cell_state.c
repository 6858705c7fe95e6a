/*
 * ex_cell_state.c — the registry of what earlier cells defined: the
 * prelude text later cells start with, the typedef names the splitter
 * must know, and the names %who, complete and inspect list. See ex_cell.h.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cell.h"
#include "ex_cell_state_impl.h"
#include "nbf_buf.h"
#include "nbf_util.h"

ex_cell_state_t *ex_cell_state_new(void) {
  return calloc(1, sizeof(ex_cell_state_t));
}

static void entry_free(entry_t *e) {
  free(e->key);
  free(e->text);
  free(e->decl);
  free(e->doc);
  free(e->label);
  free(e->uses);
  free(e->source);
}

void ex_cell_state_destroy(ex_cell_state_t **st_p) {
  if (!st_p || !*st_p)
    return;
  ex_cell_state_t *st = *st_p;
  for (size_t i = 0; i < st->n; i++)
    entry_free(&st->entries[i]);
  free(st->entries);
  free(st->slots);
  nbf_buf_free(&st->others);
  for (size_t i = 0; i < st->ntypedefs; i++)
    free(st->typedefs[i]);
  free(st->typedefs);
  free(st);
  *st_p = NULL;
}

int ex_cell_is_type(const char *name, void *ctx) {
  const ex_cell_state_t *st = ctx;
  for (size_t i = 0; i < st->ntypedefs; i++)
    if (strcmp(st->typedefs[i], name) == 0)
      return 1;
  return 0;
}

static char *concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *r = malloc(la + lb + 1);
  if (r) {
    memcpy(r, a, la);
    memcpy(r + la, b, lb + 1);
  }
  return r;
}

/* Is `key` one a prelude keeps only when the cell's words name it? */
static int by_name(const char *key) {
  return !strncmp(key, "sym:", 4) || !strncmp(key, "proto:", 6);
}

/* Key under which a chunk's definition is registered (caller frees), or
 * NULL when the chunk defines nothing by name. Variables have one key per
 * declarator and are handled by the caller. */
static char *chunk_key(const ex_chunk_t *k) {
  switch (k->kind) {
  case EX_CHUNK_PREPROC:
    return k->name ? concat("macro:", k->name) : concat("pp:", k->text);
  case EX_CHUNK_TYPE:
    return k->name ? concat("type:", k->name) : concat("pp:", k->text);
  case EX_CHUNK_FUNCTION:
    return concat("sym:", k->name);
  case EX_CHUNK_PROTOTYPE:
    return concat("proto:", k->name);
  default:
    return NULL;
  }
}

/* Does this cell define `key` (so earlier prelude text for it is left
 * out)? A definition (function or variable) shadows both "sym:X" and
 * "proto:X"; a prototype shadows only an earlier prototype: the earlier
 * definition's declaration (with its versioned label) stays, and the
 * cell's prototype merely repeats it. */
int ex_cell_state_defines(const ex_split_t *sp, const char *key) {
  int is_sym = strncmp(key, "sym:", 4) == 0, is_proto = strncmp(key, "proto:", 6) == 0;
  const char *kname = strchr(key, ':') + 1;
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (k->kind == EX_CHUNK_VARIABLE) {
      if (k->is_extern || !(is_sym || is_proto))
        continue;
      for (size_t d = 0; d < k->ndecls; d++)
        if (strcmp(kname, k->decls[d].name) == 0)
          return 1;
      continue;
    }
    if (k->kind == EX_CHUNK_FUNCTION && (is_sym || is_proto)) {
      if (strcmp(kname, k->name) == 0)
        return 1;
      continue;
    }
    if (k->kind == EX_CHUNK_PROTOTYPE) {
      if (is_proto && strcmp(kname, k->name) == 0)
        return 1;
      continue;
    }
    char *ck = chunk_key(k);
    int same = ck && strcmp(ck, key) == 0;
    free(ck);
    if (same)
      return 1;
  }
  return 0;
}

/* The prelude of the next cell: what earlier cells defined, minus what
 * the cell (`sp`) redefines. 0, or -1 when memory ran out. */
/* Does the cell define the macro of entry e again with the same text (a
 * re-run)? Its prelude line then stays where it was: an earlier type
 * whose array size names the macro comes after it in the prelude but
 * before the cell's own #define (C allows an identical redefinition). */
int ex_cell_state_same_macro(const ex_split_t *sp, const entry_t *e) {
  if (strncmp(e->key, "macro:", 6) || !e->uses)
    return 0;
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (k->kind == EX_CHUNK_PREPROC && k->name && !strcmp(k->name, e->key + 6))
      return ex_cell_same_text(k->text, e->uses);
  }
  return 0;
}

int ex_cell_state_prelude(const ex_cell_state_t *st, const ex_split_t *sp, nbf_buf_t *out) {
  int bad = 0;
  for (size_t i = 0; i < st->n; i++)
    if (!ex_cell_state_defines(sp, st->entries[i].key) ||
        ex_cell_state_same_macro(sp, &st->entries[i]))
      bad |= nbf_buf_puts(out, st->entries[i].text);
  return bad ? -1 : 0;
}

/* Entry indices in an nbf_buf: a max-heap while the prelude is chosen,
 * then a list. */
#define IDX(b) ((size_t *)(b)->data)
#define NIDX(b) ((b)->len / sizeof(size_t))

static int idx_add(nbf_buf_t *b, size_t i) {
  return nbf_buf_append(b, &i, sizeof i);
}

static int heap_push(nbf_buf_t *h, size_t x) {
  if (idx_add(h, x))
    return -1;
  size_t *v = IDX(h), i = NIDX(h) - 1;
  for (; i && v[(i - 1) / 2] < x; i = (i - 1) / 2)
    v[i] = v[(i - 1) / 2];
  v[i] = x;
  return 0;
}

static size_t heap_pop(nbf_buf_t *h) {
  h->len -= sizeof(size_t);
  size_t *v = IDX(h), n = NIDX(h), top = v[0], x = v[n], i = 0;
  for (size_t c; (c = 2 * i + 1) < n; i = c) {
    if (c + 1 < n && v[c + 1] > v[c])
      c++;
    if (v[c] <= x)
      break;
    v[i] = v[c];
  }
  if (n)
    v[i] = x;
  return top;
}

/* The index of the entry `prefix` + the word w (n bytes), -1 when there
 * is none, -2 when memory ran out. */
static long lookup_word(const ex_cell_state_t *st, const char *prefix, const char *w, size_t n) {
  char small[160], *key = small;
  size_t pl = strlen(prefix);
  if (pl + n + 1 > sizeof small && !(key = malloc(pl + n + 1)))
    return -2;
  memcpy(key, prefix, pl);
  memcpy(key + pl, w, n);
  key[pl + n] = 0;
  long at = ex_cell_state_lookup(st, key);
  if (key != small)
    free(key);
  return at;
}

/* Push the entries the words of `words` (" w1 w2 ...") name that are
 * older than entry `below`: those a pass from the newest back would see
 * named once it reached them. */
static int push_named(const ex_cell_state_t *st, const char *words, size_t below, nbf_buf_t *h) {
  static const char *const prefixes[] = {"sym:", "proto:"};
  int bad = 0;
  const char *p = words;
  size_t n;
  for (const char *w = ex_cell_next_word(&p, &n); n; w = ex_cell_next_word(&p, &n))
    for (int k = 0; k < 2; k++) {
      long at = lookup_word(st, prefixes[k], w, n);
      bad |= at == -2;
      if (at >= 0 && (size_t)at < below)
        bad |= heap_push(h, (size_t)at);
    }
  return bad;
}

/* The entries every prelude keeps (*v, *n): st->others, or, after memory
 * ran out keeping that list, a pass into *owned (the caller frees it).
 * 0, or -1 when memory ran out here too. */
static int others_of(const ex_cell_state_t *st, const size_t **v, size_t *n, size_t **owned) {
  *v = (const size_t *)st->others.data;
  *n = st->others.len / sizeof(size_t);
  *owned = NULL;
  if (!st->others_lost)
    return 0;
  size_t *w = malloc((st->n + 1) * sizeof *w);
  if (!w)
    return -1;
  *n = 0;
  for (size_t i = 0; i < st->n; i++)
    if (!by_name(st->entries[i].key))
      w[(*n)++] = i;
  *v = *owned = w;
  return 0;
}

/* The prelude's entries, ascending: `others` and the named ones (`named`,
 * descending) merged, each when the cell does not define it again. */
static int emit_prelude(const ex_cell_state_t *st, const ex_split_t *sp, const size_t *others,
                        size_t nothers, const nbf_buf_t *named, nbf_buf_t *out) {
  int bad = 0;
  const size_t *v = IDX(named);
  size_t a = 0, b = NIDX(named);
  while (!bad && (a < nothers || b > 0)) {
    size_t i = b == 0 || (a < nothers && others[a] < v[b - 1]) ? others[a++] : v[--b];
    const entry_t *e = &st->entries[i];
    if (!ex_cell_state_defines(sp, e->key) || ex_cell_state_same_macro(sp, e))
      bad |= nbf_buf_puts(out, e->text);
  }
  return bad;
}

int ex_cell_state_prelude_for(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                              nbf_buf_t *out) {
  nbf_buf_t words = {0}, heap = {0}, named = {0};
  int bad = nbf_buf_puts(&words, " ") || ex_cell_state_collect_words(st, code, 0, &words) ||
            nbf_buf_puts(&words, " ");
  bad = bad || push_named(st, words.data, st->n, &heap);
  /* newest first: a declaration kept may name older ones (`__typeof__(x)
   * y`), whose words then count too */
  while (!bad && heap.len) {
    size_t i = heap_pop(&heap); /* once: each word is looked up once */
    bad |= idx_add(&named, i);  /* descending */
    size_t from = words.len;
    bad |=
        ex_cell_state_collect_words(st, st->entries[i].text, 0, &words) | nbf_buf_puts(&words, " ");
    bad = bad || push_named(st, words.data + from, i, &heap);
  }
  const size_t *others = NULL;
  size_t nothers = 0, *owned = NULL;
  bad = bad || others_of(st, &others, &nothers, &owned) ||
        emit_prelude(st, sp, others, nothers, &named, out);
  free(owned);
  nbf_buf_free(&heap);
  nbf_buf_free(&named);
  nbf_buf_free(&words);
  return bad ? -1 : 0;
}

/* Append to `words` (" w1 w2 ... ") each word of `text`, and the words
 * of the bodies of earlier cells' macros it names, three levels deep (as
 * ex_jit_cell_safe looks). */
int ex_cell_state_collect_words(const ex_cell_state_t *st, const char *text, int depth,
                                nbf_buf_t *words) {
  int bad = 0;
  const char *p = text;
  size_t n;
  for (const char *w = ex_cell_next_word(&p, &n); n; w = ex_cell_next_word(&p, &n)) {
    if (isdigit((unsigned char)*w) || (words->len && ex_cell_word_in(words->data, w, n)))
      continue;
    bad |= nbf_buf_printf(words, " %.*s", (int)n, w);
    char key[140];
    if (depth >= 3 || n + 7 >= sizeof key)
      continue;
    snprintf(key, sizeof key, "macro:%.*s", (int)n, w);
    long at = ex_cell_state_lookup(st, key);
    if (at >= 0 && st->entries[at].uses)
      bad |= ex_cell_state_collect_words(st, st->entries[at].uses, depth + 1, words);
  }
  return bad;
}

static int cmp_index(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

int ex_cell_state_indirect(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                           nbf_buf_t *out) {
  nbf_buf_t words = {0}, vars = {0};
  int bad = nbf_buf_puts(&words, " ") | ex_cell_state_collect_words(st, code, 0, &words) |
            nbf_buf_puts(&words, " ");
  /* the earlier variables the words name, by key; in the registry's order */
  const char *p = bad ? "" : words.data;
  size_t n;
  for (const char *w = ex_cell_next_word(&p, &n); !bad && n; w = ex_cell_next_word(&p, &n)) {
    long at = lookup_word(st, "sym:", w, n);
    bad |= at == -2;
    const entry_t *e = at >= 0 ? &st->entries[at] : NULL;
    if (e && e->kind && !strcmp(e->kind, "variable") && !ex_cell_state_defines(sp, e->key))
      bad |= idx_add(&vars, (size_t)at);
  }
  if (vars.len)
    qsort(vars.data, NIDX(&vars), sizeof(size_t), cmp_index);
  for (size_t k = 0; !bad && k < NIDX(&vars); k++) {
    const entry_t *e = &st->entries[IDX(&vars)[k]];
    const char *name = e->key + 4;
    if (!k)
      bad |= nbf_buf_puts(out, "#line 1 \"<nbfork>\"\n");
    if (e->addr) /* in memory: no symbol names it, its address does */
      bad |= nbf_buf_printf(out,
                            "static __typeof__(%s) *const __nbf_p_%s __attribute__((unused)) = "
                            "(__typeof__(%s) *)%#lxUL;\n",
                            name, name, name, (unsigned long)(uintptr_t)e->addr);
    else
      bad |= nbf_buf_printf(
          out, "static __typeof__(%s) *const __nbf_p_%s __attribute__((unused)) = &%s;\n", name,
          name, name);
    bad |= nbf_buf_printf(out, "#define %s (*(0, __nbf_p_%s))\n", name, name);
  }
  nbf_buf_free(&vars);
  nbf_buf_free(&words);
  return bad ? -1 : 0;
}

static size_t key_hash(const char *k) {
  return (size_t)nbf_fnv1a(k, NBF_FNV_OFFSET);
}

/* Put entry i into the index (which has room). */
static void index_put(ex_cell_state_t *st, size_t i) {
  size_t m = st->nslots - 1, s = key_hash(st->entries[i].key) & m;
  while (st->slots[s])
    s = (s + 1) & m;
  st->slots[s] = i + 1;
}

/* Note entry i in `others` when every prelude keeps it. */
static void others_note(ex_cell_state_t *st, size_t i) {
  if (!by_name(st->entries[i].key) && !st->others_lost)
    st->others_lost = nbf_buf_append(&st->others, &i, sizeof i) != 0;
}

/* Index every entry again (after entries moved, or to grow): 0 or -1. */
static int index_rebuild(ex_cell_state_t *st) {
  st->others.len = 0;
  st->others_lost = 0;
  for (size_t i = 0; i < st->n; i++)
    others_note(st, i);
  size_t want = 64;
  while (want < 2 * st->n + 2)
    want *= 2;
  if (want != st->nslots) {
    size_t *v = realloc(st->slots, want * sizeof *v);
    if (!v) {
      free(st->slots);
      st->slots = NULL;
      st->nslots = 0;
      return -1;
    }
    st->slots = v;
    st->nslots = want;
  }
  memset(st->slots, 0, st->nslots * sizeof *st->slots);
  for (size_t i = 0; i < st->n; i++)
    index_put(st, i);
  return 0;
}

long ex_cell_state_lookup(const ex_cell_state_t *st, const char *key) {
  if (!st->slots) { /* no index (out of memory once): a pass */
    for (size_t i = 0; i < st->n; i++)
      if (!strcmp(st->entries[i].key, key))
        return (long)i;
    return -1;
  }
  size_t m = st->nslots - 1;
  for (size_t s = key_hash(key) & m; st->slots[s]; s = (s + 1) & m)
    if (!strcmp(st->entries[st->slots[s] - 1].key, key))
      return (long)(st->slots[s] - 1);
  return -1;
}

/* Set `e->key` to the entry `e` (its strings are taken): replace in place
 * (types, macros: later entries may use them), or move to the end ("sym:":
 * its new declaration may use types defined after the old one). */
static int put_entry(ex_cell_state_t *st, entry_t e) {
  if (!e.key || !e.text)
    goto oom;
  if (e.kind && !strcmp(e.kind, "type") && e.decl && ex_cell_find_word(e.decl, "enum"))
    st->nenums++;
  long at = ex_cell_state_lookup(st, e.key);
  int moved = 0;
  if (at >= 0) {
    size_t i = (size_t)at;
    if (strncmp(e.key, "sym:", 4) != 0) {
      entry_free(&st->entries[i]);
      st->entries[i] = e;
      return 0;
    }
    entry_free(&st->entries[i]);
    memmove(&st->entries[i], &st->entries[i + 1], (st->n - i - 1) * sizeof(entry_t));
    st->n--;
    moved = 1;
  }
  if (st->n == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 32;
    entry_t *v = realloc(st->entries, cap * sizeof *v);
    if (!v)
      goto oom;
    st->entries = v;
    st->cap = cap;
  }
  st->entries[st->n++] = e;
  if (moved || !st->slots || 2 * st->n + 2 > st->nslots) {
    index_rebuild(st); /* a failure leaves no index: lookups make a pass */
  } else {
    index_put(st, st->n - 1);
    others_note(st, st->n - 1);
  }
  return 0;
oom:
  entry_free(&e);
  return -1;
}

/* Remove `key` if present (a prototype superseded by a definition). */
static void drop_entry(ex_cell_state_t *st, const char *key) {
  long at = ex_cell_state_lookup(st, key);
  if (at < 0)
    return;
  entry_free(&st->entries[at]);
  memmove(&st->entries[at], &st->entries[at + 1], (st->n - (size_t)at - 1) * sizeof(entry_t));
  st->n--;
  index_rebuild(st);
}

static char *dup_or_null(const char *s) {
  return s ? strdup(s) : NULL;
}

/* An entry with its display fields filled from chunk k. */
static entry_t make_entry(char *key, char *text, const char *kind, char *decl, const ex_chunk_t *k,
                          const char *label) {
  entry_t e = {key, text, decl, dup_or_null(k->doc), strdup(label), kind, NULL, NULL, NULL, 0};
  if (kind)
    e.source = strdup(k->text);
  if (k->kind == EX_CHUNK_FUNCTION || k->kind == EX_CHUNK_TYPE ||
      (k->kind == EX_CHUNK_PREPROC && k->name))
    e.uses = strdup(k->text);
  else if (k->kind == EX_CHUNK_VARIABLE && decl)
    e.uses = strdup(decl);
  return e;
}

/* A definition of `name` replaces the prototype an earlier cell gave. */
static void drop_prototype(ex_cell_state_t *st, const char *name) {
  char *pk = concat("proto:", name);
  if (pk)
    drop_entry(st, pk);
  free(pk);
}

/* `#pragma pack` state across a cell's chunks: the alignment in force
 * (0: none) and the stack `push` saves. */
typedef struct {
  int cur, stack[16], depth;
} pack_state_t;

/* Apply a `#pragma pack(...)` line (`pack(1)`, `pack(push, 2)`,
 * `pack(push)`, `pack(pop)`, `pack()`) to *ps; other pragmas change
 * nothing. */
static void pack_apply(pack_state_t *ps, const char *text) {
  const char *p = strstr(text, "pragma");
  p = p ? strstr(p, "pack") : NULL;
  p = p ? strchr(p, '(') : NULL;
  if (!p)
    return;
  p++;
  while (isspace((unsigned char)*p))
    p++;
  if (!strncmp(p, "pop", 3)) {
    ps->cur = ps->depth > 0 ? ps->stack[--ps->depth] : 0;
    return;
  }
  if (!strncmp(p, "push", 4)) {
    if (ps->depth < 16)
      ps->stack[ps->depth++] = ps->cur;
    p = strchr(p, ',');
    if (!p)
      return;
    p++;
  }
  ps->cur = atoi(p); /* `pack()`: 0, the default */
}

/* A type's prelude text: under the `#pragma pack` that was in force where
 * its cell defined it, so it has one layout in every cell. */
static char *type_text(const pack_state_t *ps, const ex_chunk_t *k, const char *label, int guard) {
  if (k->kind == EX_CHUNK_TYPE && ps->cur > 0)
    return nbf_xprintf("#pragma pack(push, %d)\n#line %d \"%s\"\n%s\n#pragma pack(pop)\n", ps->cur,
                       k->line, label, k->text);
  return nbf_xprintf("%s#line %d \"%s\"\n%s\n%s", guard ? "#ifdef __cplusplus\n" : "", k->line,
                     label, k->text, guard ? "#endif\n" : "");
}

ex_result_t ex_cell_commit(ex_cell_state_t *st, const ex_cell_unit_t *u) {
  int rc = 0;
  pack_state_t ps = {0};
  for (size_t i = 0; i < u->split.count; i++) {
    const ex_chunk_t *k = &u->split.chunks[i];
    switch (k->kind) {
    case EX_CHUNK_PREPROC:
    case EX_CHUNK_TYPE: {
      if (ex_split_is_pragma(k->text)) {
        pack_apply(&ps, k->text);
        break; /* a pragma acts on its own cell: replayed, one could break every later cell */
      }
      int named = k->name != NULL;
      /* a C++ cell's #include (<cstdio>, <cuda_runtime.h>) is for later
       * C++ cells only */
      const char *p = k->text + 1;
      while (*p == ' ' || *p == '\t')
        p++;
      int guard = u->cxx && k->kind == EX_CHUNK_PREPROC && !strncmp(p, "include", 7);
      rc |= put_entry(st, make_entry(chunk_key(k), type_text(&ps, k, u->label, guard),
                                     k->kind == EX_CHUNK_TYPE ? "type" : "macro",
                                     named ? strdup(k->text) : NULL, k, u->label));
      if (k->kind == EX_CHUNK_TYPE && k->name && !strchr(k->name, ' ') &&
          !ex_cell_is_type(k->name, st)) {
        char **v = realloc(st->typedefs, (st->ntypedefs + 1) * sizeof *v);
        if (v) {
          st->typedefs = v;
          st->typedefs[st->ntypedefs++] = strdup(k->name);
        }
      }
      break;
    }
    case EX_CHUNK_PROTOTYPE:
      if (!ex_split_defines_function(&u->split, k->name)) {
        char *decl = strdup(k->text);
        if (decl) {
          size_t l = strlen(decl);
          while (l && (decl[l - 1] == ';' || decl[l - 1] == ' '))
            decl[--l] = 0;
        }
        rc |= put_entry(st, make_entry(chunk_key(k), nbf_xprintf("%s\n", k->text), "function", decl,
                                       k, u->label));
      }
      break;
    case EX_CHUNK_FUNCTION: {
      drop_prototype(st, k->name);
      rc |= put_entry(
          st, make_entry(chunk_key(k),
                         nbf_xprintf("%s __asm__(\"%s__c%s\");\n", k->signature, k->name, u->tag),
                         "function", strdup(k->signature), k, u->label));
      break;
    }
    case EX_CHUNK_VARIABLE:
      if (k->is_extern) {
        rc |= put_entry(st, make_entry(concat("pp:", k->text), nbf_xprintf("%s\n", k->text), NULL,
                                       NULL, k, u->label));
        break;
      }
      for (size_t d = 0; d < k->ndecls; d++) {
        const ex_declarator_t *dd = &k->decls[d];
        drop_prototype(st, dd->name);
        rc |= put_entry(st,
                        make_entry(concat("sym:", dd->name),
                                   nbf_xprintf("extern %s %s __asm__(\"%s__c%s\");\n",
                                               k->specifiers, dd->declarator, dd->name, u->tag),
                                   "variable", nbf_xprintf("%s %s", k->specifiers, dd->declarator),
                                   k, u->label));
      }
      break;
    default:
      break;
    }
  }
  return rc ? EX_ERR_NOMEM : EX_OK;
}

static int entry_name(const entry_t *e, ex_cell_name_t *out) {
  if (!e->kind || !e->decl)
    return 0;
  out->name = strchr(e->key, ':') + 1;
  out->kind = e->kind;
  out->decl = e->decl;
  out->doc = e->doc;
  out->label = e->label;
  out->source = e->source ? e->source : e->decl;
  return 1;
}

void ex_cell_each_name(const ex_cell_state_t *st, void (*fn)(const ex_cell_name_t *n, void *ctx),
                       void *ctx) {
  for (size_t i = 0; i < st->n; i++) {
    ex_cell_name_t n;
    if (entry_name(&st->entries[i], &n))
      fn(&n, ctx);
  }
}

int ex_cell_find(const ex_cell_state_t *st, const char *name, ex_cell_name_t *out) {
  /* a definition first; else the newest of a prototype, type or macro */
  static const char *const kinds[] = {"sym:", "proto:", "type:", "macro:"};
  long best = -1;
  char key[300];
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    if (snprintf(key, sizeof key, "%s%s", kinds[k], name) >= (int)sizeof key)
      return 0;
    long at = ex_cell_state_lookup(st, key);
    ex_cell_name_t n;
    if (at > best && entry_name(&st->entries[at], &n)) {
      best = at;
      if (k == 0)
        break;
    }
  }
  return best >= 0 && entry_name(&st->entries[best], out);
}

int ex_cell_find_symbol(const ex_cell_state_t *st, const char *name, char *sym, size_t n) {
  char key[300];
  snprintf(key, sizeof key, "sym:%s", name);
  for (size_t i = st->n; i-- > 0;) {
    const entry_t *e = &st->entries[i];
    const char *a = strcmp(e->key, key) == 0 && e->text ? strstr(e->text, "__asm__(\"") : NULL;
    const char *end = a ? strchr(a + 9, '"') : NULL;
    if (!end || (size_t)(end - (a + 9)) >= n)
      continue;
    snprintf(sym, n, "%.*s", (int)(end - (a + 9)), a + 9);
    return 1;
  }
  return 0;
}

const char *ex_cell_find_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = text; n && (p = strstr(p, word)) != NULL; p += n) {
    int start = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int end = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (start && end)
      return p;
  }
  return NULL;
}

/* (ex_cell_state_impl.h; the type check compares texts with it too) */
int ex_cell_same_text(const char *a, const char *b) {
  for (;;) {
    int wa = 0, wb = 0;
    while (isspace((unsigned char)*a))
      a++, wa = 1;
    while (isspace((unsigned char)*b))
      b++, wb = 1;
    if (!*a || !*b)
      return !*a && !*b;
    if (wa != wb || *a != *b)
      return 0;
    a++;
    b++;
  }
}

size_t ex_cell_take_word(const char **p, char *name, size_t size) {
  const char *q = *p;
  while (isspace((unsigned char)*q))
    q++;
  const char *w = q;
  while (isalnum((unsigned char)*q) || *q == '_')
    q++;
  size_t n = (size_t)(q - w);
  while (isspace((unsigned char)*q))
    q++;
  *p = q;
  if (n >= size)
    return 0;
  memcpy(name, w, n);
  name[n] = 0;
  return n;
}

const char *ex_cell_next_word(const char **p, size_t *n) {
  const char *q = *p;
  while (*q && !isalnum((unsigned char)*q) && *q != '_')
    q++;
  const char *w = q;
  while (isalnum((unsigned char)*q) || *q == '_')
    q++;
  *n = (size_t)(q - w);
  *p = q;
  return w;
}

int ex_cell_word_in(const char *list, const char *w, size_t n) {
  for (const char *p = list; n && (p = strchr(p, ' ')) != NULL; p++)
    if (!strncmp(p + 1, w, n) && (p[1 + n] == ' ' || !p[1 + n]))
      return 1;
  return 0;
}

void ex_cell_state_each_tag(const ex_cell_state_t *st, void (*fn)(const char *tag, void *ctx),
                            void *ctx) {
  for (size_t i = 0; i < st->n; i++) {
    for (const char *p = st->entries[i].text; p && (p = strstr(p, "__c")) != NULL; p += 3) {
      size_t h = 0;
      while (h < 16 && isxdigit((unsigned char)p[3 + h]) && !isupper((unsigned char)p[3 + h]))
        h++;
      if (h == 16 && p[19] == '"') {
        char tag[17];
        memcpy(tag, p + 3, 16);
        tag[16] = 0;
        fn(tag, ctx);
      }
    }
  }
}

int ex_cell_state_place(ex_cell_state_t *st, const char *name, void *addr, size_t size) {
  char key[300];
  snprintf(key, sizeof key, "sym:%s", name);
  long at = ex_cell_state_lookup(st, key);
  if (at < 0)
    return -1;
  st->entries[at].addr = addr;
  st->entries[at].size = size;
  return 0;
}

int ex_cell_find_place(const ex_cell_state_t *st, const char *name, void **addr, size_t *size) {
  char key[300];
  snprintf(key, sizeof key, "sym:%s", name);
  long at = ex_cell_state_lookup(st, key);
  if (at < 0 || !st->entries[at].addr)
    return 0;
  *addr = st->entries[at].addr;
  *size = st->entries[at].size;
  return 1;
}

int ex_cell_state_has_enums(const ex_cell_state_t *st) {
  return st->nenums > 0;
}
