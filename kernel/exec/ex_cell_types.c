/*
 * ex_cell_types.c — refusing a type redefined under its users (see
 * ex_cell_state_check_types in ex_cell.h).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_cell_state_impl.h"
#include "nbf_buf.h"

/* Does `text` name the type `name`: `point_t` as a word, `struct S` as
 * the tag keyword then the tag? */
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

/* Equal but for the amount of white space. */
static int same_text(const char *a, const char *b) {
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

/* Names of the types the cell redefines with another text, then of the
 * earlier types that use them (closure), so `S_t x` counts for a changed
 * `struct S` behind `typedef struct S S_t`. `changed` holds st->n slots. */
static size_t changed_types(const ex_cell_state_t *st, const ex_split_t *sp, const char **changed) {
  size_t nc = 0;
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (k->kind != EX_CHUNK_TYPE || !k->name)
      continue;
    for (size_t j = 0; j < st->n; j++) {
      const entry_t *e = &st->entries[j];
      if (!strncmp(e->key, "type:", 5) && !strcmp(e->key + 5, k->name) && e->uses &&
          !same_text(e->uses, k->text))
        changed[nc++] = e->key + 5;
    }
  }
  for (size_t grown = 1; grown && nc;) {
    grown = 0;
    for (size_t j = 0; j < st->n; j++) {
      const entry_t *e = &st->entries[j];
      if (strncmp(e->key, "type:", 5) || !e->uses || ex_cell_state_defines(sp, e->key))
        continue;
      size_t c = 0;
      while (c < nc && strcmp(changed[c], e->key + 5))
        c++;
      for (size_t u = 0; c == nc && u < nc; u++)
        if (mentions_type(e->uses, changed[u])) {
          changed[nc++] = e->key + 5;
          grown = 1;
          break;
        }
    }
  }
  return nc;
}

ex_result_t ex_cell_state_check_types(const ex_cell_state_t *st, const ex_split_t *sp, char *err,
                                      size_t errlen) {
  const char **changed = st->n ? malloc(st->n * sizeof *changed) : NULL;
  if (st->n && !changed) {
    snprintf(err, errlen, "out of memory");
    return EX_ERR_NOMEM;
  }
  size_t nc = changed_types(st, sp, changed);
  nbf_buf_t users = {0};
  size_t nusers = 0;
  for (size_t j = 0; nc && j < st->n; j++) {
    const entry_t *e = &st->entries[j];
    if (strncmp(e->key, "sym:", 4) || !e->uses || ex_cell_state_defines(sp, e->key))
      continue;
    for (size_t c = 0; c < nc; c++)
      if (mentions_type(e->uses, changed[c])) {
        nbf_buf_printf(&users, "%s%s (%s, %s)", nusers++ ? ", " : "", e->key + 4, e->kind,
                       e->label);
        break;
      }
  }
  ex_result_t r = EX_OK;
  if (nusers) {
    const char *def = "an earlier cell";
    for (size_t j = 0; j < st->n; j++)
      if (!strncmp(st->entries[j].key, "type:", 5) && !strcmp(st->entries[j].key + 5, changed[0]))
        def = st->entries[j].label;
    snprintf(err, errlen,
             "'%s' (defined by %s) is redefined differently while code compiled earlier still "
             "uses the old definition: %s. That code was compiled for the old layout and would "
             "read memory wrongly: redefine it in this cell together with the new type, or "
             "restart the kernel",
             changed[0], def, users.data ? users.data : "");
    r = EX_ERR_REDEFINED;
  }
  nbf_buf_free(&users);
  free(changed);
  return r;
}
