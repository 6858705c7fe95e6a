/*
 * ex_cell_state_impl.h — the registry's insides, shared by the files
 * that implement it (ex_cell_state.c: entries and the prelude;
 * ex_cell_types.c: the type redefinition check). Not for other modules:
 * they use ex_cell.h.
 */
#ifndef EX_CELL_STATE_IMPL_H
#define EX_CELL_STATE_IMPL_H

#include <stddef.h>

#include "ex_cell.h"
#include "nbf_buf.h"

typedef struct {
  char *key;   /* "sym:NAME", "type:NAME", "macro:NAME", "proto:NAME", "pp:TEXT" */
  char *text;  /* what the prelude of later cells contains for it */
  char *decl;  /* as shown by inspect (NULL for "pp:" entries) */
  char *doc;   /* doc comment or NULL */
  char *label; /* defining cell */
  const char *kind;
  char *uses;   /* the text whose type names it depends on: a function's whole
                   definition, a variable's type and declarator, a type's
                   definition, a macro's #define line (NULL for the rest) */
  char *source; /* the chunk that defined it, as written (`name??` shows it);
                   NULL for "pp:" entries */
  void *addr;   /* a variable of a cell TinyCC compiled into memory: where it
                   is (no shared object names it; ex_memcells.h), else NULL */
  size_t size;  /* its size in bytes, with addr */
} entry_t;

struct ex_cell_state {
  entry_t *entries; /* prelude, in order of first definition */
  size_t n, cap;
  size_t *slots;    /* hash index of the keys: entry index + 1, 0 empty (a
                       long notebook's lookups are not a pass over it) */
  size_t nslots;    /* a power of two, at least twice n; 0 before the first */
  nbf_buf_t others; /* size_t indices of the entries every prelude keeps
                       (keys other than "sym:" and "proto:"), ascending: a
                       cell's prelude is these and what its words name,
                       found by key, never a pass over a long notebook's
                       variables */
  int others_lost;  /* out of memory keeping `others`: the preludes make a pass */
  size_t nenums;    /* enum types ever defined (0: no enumerator to look for) */
  char **typedefs;  /* names that are types, for the splitter */
  size_t ntypedefs;
};

/* Does the cell split as `sp` define `key` ("sym:x", "type:struct S",
 * ...), so that earlier prelude text for it is left out? */
int ex_cell_state_defines(const ex_split_t *sp, const char *key);

/* Does the cell define the macro of entry e again with the same text (a
 * re-run)? Its prelude line then stays where it was. */
int ex_cell_state_same_macro(const ex_split_t *sp, const entry_t *e);

/* Append to `words` (" w1 w2 ... ") each word of `text` not in it yet,
 * and the words of the bodies of earlier cells' macros it names, three
 * levels deep from `depth` (as ex_jit_cell_safe looks). 0, or nonzero
 * when memory ran out. */
int ex_cell_state_collect_words(const ex_cell_state_t *st, const char *text, int depth,
                                nbf_buf_t *words);

/* The index of the entry whose key is `key`, or -1. */
long ex_cell_state_lookup(const ex_cell_state_t *st, const char *key);

/* Equal but for the amount of white space. */
int ex_cell_same_text(const char *a, const char *b);

#endif
