/*
 * ex_cell_types.c — refusing a type, enum value or macro redefined under
 * its users (see ex_cell_state_check_types in ex_cell.h).
 *
 * What changes: a type or macro the cell defines with another text than
 * the earlier cell's, each enumerator of a changed enum whose value may
 * differ, and then (closure) every earlier type or macro whose text names
 * something changed. Who is refused over it: every earlier function or
 * global whose text names something changed, and every earlier type that
 * names a changed macro or enumerator (its array sizes, bit-field widths
 * and enumerator values are evaluated where it stands, in the prelude,
 * before this cell's new definition: it could not even compile).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cell_state_impl.h"
#include "nbf_buf.h"

/* Does `text` name `name`: `point_t` as a word, `struct S` as the tag
 * keyword then the tag? */
static int mentions_type(const char *text, const char *name) {
  const char *sp = strchr(name, ' ');
  if (!sp)
    return ex_cell_find_word(text, name) != NULL;
  size_t kl = (size_t)(sp - name);
  for (const char *p = text; (p = ex_cell_find_word(p, sp + 1)) != NULL; p++) {
    const char *q = p;
    while (q > text && isspace((unsigned char)q[-1]))
      q--;
    if ((size_t)(q - text) >= kl && !strncmp(q - kl, name, kl) &&
        (q - kl == text || !(isalnum((unsigned char)q[-kl - 1]) || q[-kl - 1] == '_')))
      return 1;
  }
  return 0;
}

/* One changed name. `eager`: a macro or an enumerator, whose value a type
 * that names it takes where it stands. */
typedef struct {
  char *word;        /* `struct S`, `T1`, `N`, `GREEN` (owned) */
  const entry_t *def; /* the earlier entry that defined it */
  int eager;
} changed_t;

typedef struct {
  changed_t *v;
  size_t n, cap;
  int oom;
} changes_t;

static void add_change(changes_t *c, const char *w, size_t wl, const entry_t *def, int eager) {
  for (size_t i = 0; i < c->n; i++)
    if (strlen(c->v[i].word) == wl && !strncmp(c->v[i].word, w, wl))
      return;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 16;
    changed_t *v = realloc(c->v, cap * sizeof *v);
    if (!v) {
      c->oom = 1;
      return;
    }
    c->v = v;
    c->cap = cap;
  }
  char *word = strndup(w, wl);
  if (!word) {
    c->oom = 1;
    return;
  }
  c->v[c->n++] = (changed_t){word, def, eager};
}

static int is_changed(const changes_t *c, const char *w) {
  for (size_t i = 0; i < c->n; i++)
    if (!strcmp(c->v[i].word, w))
      return 1;
  return 0;
}

/* The enumerators of the first `enum ... { ... }` in text, one at a time:
 * name (nl bytes) the enumerator, base (bl bytes) the text of the last
 * explicit initializer at or before it (NULL: none), offset how many
 * places after it. Two enumerators with the same base text and offset
 * have the same value (while the macros in the base keep theirs: a
 * changed macro is its own change). The iterator starts zeroed;
 * enum_next returns 0 after the last. */
typedef struct {
  const char *p, *end;
  const char *name, *base;
  size_t nl, bl;
  long offset;
} enum_iter_t;

static int enum_next(enum_iter_t *it, const char *text) {
  if (!it->p) {
    const char *e = ex_cell_find_word(text, "enum");
    const char *open = e ? strchr(e, '{') : NULL;
    if (!open)
      return 0;
    it->p = open + 1;
    it->end = strchr(open, '}');
    it->base = NULL;
    it->offset = -1;
    if (!it->end)
      return 0;
  }
  for (;;) {
    while (it->p < it->end && !(isalpha((unsigned char)*it->p) || *it->p == '_'))
      it->p++;
    if (it->p >= it->end)
      return 0;
    it->name = it->p;
    while (it->p < it->end && (isalnum((unsigned char)*it->p) || *it->p == '_'))
      it->p++;
    it->nl = (size_t)(it->p - it->name);
    const char *q = it->p;
    while (q < it->end && isspace((unsigned char)*q))
      q++;
    int depth = 0;
    const char *init = *q == '=' ? q + 1 : NULL;
    for (; q < it->end && (depth || *q != ','); q++)
      depth += (*q == '(') - (*q == ')');
    if (init) {
      it->base = init;
      it->bl = (size_t)(q - init);
      it->offset = 0;
    } else {
      it->offset++;
    }
    it->p = q < it->end ? q + 1 : q;
    return 1;
  }
}

/* The enumerators of the old text `old` whose value in `new_text` may
 * differ (moved, or another initializer); NULL new_text: all of them. */
static void changed_enumerators(changes_t *c, const entry_t *def, const char *old,
                                const char *new_text) {
  enum_iter_t a = {0};
  while (enum_next(&a, old)) {
    int same = 0;
    enum_iter_t b = {0};
    while (new_text && !same && enum_next(&b, new_text))
      if (b.nl == a.nl && !strncmp(b.name, a.name, a.nl))
        same = b.offset == a.offset && (a.base ? b.base && b.bl == a.bl &&
                                                     !strncmp(a.base, b.base, a.bl)
                                               : !b.base);
    int gone = 1; /* an enumerator the new text drops: old code keeps its value, harmless */
    enum_iter_t d = {0};
    while (new_text && gone && enum_next(&d, new_text))
      gone = !(d.nl == a.nl && !strncmp(d.name, a.name, a.nl));
    if (!same && !(new_text && gone))
      add_change(c, a.name, a.nl, def, 1);
  }
}

/* The name an entry defines (`struct S`, `N`), and whether it is a macro. */
static const char *entry_word(const entry_t *e, int *macro) {
  *macro = !strncmp(e->key, "macro:", 6);
  return *macro ? e->key + 6 : !strncmp(e->key, "type:", 5) ? e->key + 5 : NULL;
}

/* The types and macros the cell redefines with another text. */
static void direct_changes(const ex_cell_state_t *st, const ex_split_t *sp, changes_t *c) {
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if ((k->kind != EX_CHUNK_TYPE && k->kind != EX_CHUNK_PREPROC) || !k->name)
      continue;
    for (size_t j = 0; j < st->n; j++) {
      const entry_t *e = &st->entries[j];
      int macro;
      const char *w = entry_word(e, &macro);
      if (!w || strcmp(w, k->name) || macro != (k->kind == EX_CHUNK_PREPROC) || !e->uses ||
          ex_cell_same_text(e->uses, k->text))
        continue;
      add_change(c, w, strlen(w), e, macro);
      if (!macro)
        changed_enumerators(c, e, e->uses, k->text);
    }
  }
}

/* Does `text` name a changed word (an eager one only, with eager_only)? */
static const changed_t *names_change(const changes_t *c, const char *text, int eager_only) {
  for (size_t u = 0; u < c->n; u++)
    if ((!eager_only || c->v[u].eager) && mentions_type(text, c->v[u].word))
      return &c->v[u];
  return NULL;
}

/* Add the earlier types and macros that name a changed word, until none
 * is left (so `S_t x` counts for a changed `struct S` behind `typedef
 * struct S S_t`, and `int a[M]` for `#define M (N * 2)` when N changed). */
static void closure(const ex_cell_state_t *st, const ex_split_t *sp, changes_t *c) {
  for (size_t grown = 1; grown && c->n && !c->oom;) {
    grown = 0;
    for (size_t j = 0; j < st->n; j++) {
      const entry_t *e = &st->entries[j];
      int macro;
      const char *w = entry_word(e, &macro);
      if (!w || !e->uses || ex_cell_state_defines(sp, e->key) || is_changed(c, w) ||
          !names_change(c, e->uses, 0))
        continue;
      add_change(c, w, strlen(w), e, macro);
      if (!macro)
        changed_enumerators(c, e, e->uses, NULL);
      grown = 1;
    }
  }
}

/* Append each user to `users`: functions and globals that name a change,
 * and types that name a changed macro or enumerator. Returns their count. */
static size_t list_users(const ex_cell_state_t *st, const ex_split_t *sp, const changes_t *c,
                         nbf_buf_t *users, const changed_t **first) {
  size_t nusers = 0;
  for (size_t j = 0; j < st->n; j++) {
    const entry_t *e = &st->entries[j];
    int sym = !strncmp(e->key, "sym:", 4), type = !strncmp(e->key, "type:", 5);
    if (!(sym || type) || !e->uses || ex_cell_state_defines(sp, e->key))
      continue;
    const changed_t *why = names_change(c, e->uses, type);
    if (!why || (type && !strcmp(why->word, e->key + 5)))
      continue;
    if (!*first)
      *first = why;
    nbf_buf_printf(users, "%s%s (%s, %s)", nusers++ ? ", " : "", strchr(e->key, ':') + 1,
                   sym ? e->kind : "type", e->label);
  }
  return nusers;
}

ex_result_t ex_cell_state_check_types(const ex_cell_state_t *st, const ex_split_t *sp, char *err,
                                      size_t errlen) {
  changes_t c = {0};
  direct_changes(st, sp, &c);
  if (!c.n && !c.oom)
    return EX_OK; /* nothing redefined: no user to look for among the entries */
  closure(st, sp, &c);
  nbf_buf_t users = {0};
  const changed_t *why = NULL;
  size_t nusers = c.oom ? 0 : list_users(st, sp, &c, &users, &why);
  ex_result_t r = EX_OK;
  if (c.oom) {
    snprintf(err, errlen, "out of memory");
    r = EX_ERR_NOMEM;
  } else if (nusers) {
    /* name what the cell itself redefines, and through what the users
     * depend on it when that is another name */
    const changed_t *top = &c.v[0];
    int macro = !strncmp(top->def->key, "macro:", 6);
    char via[300] = "";
    if (why && strcmp(why->word, top->word))
      snprintf(via, sizeof via, " (through '%s')", why->word);
    snprintf(err, errlen,
             "%s'%s' (defined by %s) is redefined differently while what earlier cells compiled "
             "still uses the old definition%s: %s. Their code (or type) was made for the old %s "
             "and would read memory wrongly or compute with stale values: redefine them in this "
             "cell together with it, or restart the kernel",
             macro ? "the macro " : "", top->word, top->def->label, via,
             users.data ? users.data : "", macro ? "value" : "layout and values");
    r = EX_ERR_REDEFINED;
  }
  nbf_buf_free(&users);
  for (size_t i = 0; i < c.n; i++)
    free(c.v[i].word);
  free(c.v);
  return r;
}
