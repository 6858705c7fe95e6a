/*
 * ex_decl.c — see ex_decl.h.
 */
#define _GNU_SOURCE
#include "ex_decl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int is_ident(char c) {
  return isalnum((unsigned char)c) || c == '_';
}

/* Does the preprocessor line starting at `p` (at `#`) define `name`? */
static int defines(const char *p, const char *name, size_t n) {
  p++;
  while (*p == ' ' || *p == '\t')
    p++;
  if (strncmp(p, "define", 6) || (p[6] != ' ' && p[6] != '\t'))
    return 0;
  p += 6;
  while (*p == ' ' || *p == '\t')
    p++;
  return !strncmp(p, name, n) && !is_ident(p[n]);
}

/* Does the preprocessor line at `p` open a C++-only part
 * (`#ifdef __cplusplus`)? */
static int cxx_guard(const char *p) {
  p++;
  while (*p == ' ' || *p == '\t')
    p++;
  const char *nl = strchr(p, '\n'), *c = strstr(p, "__cplusplus");
  return !strncmp(p, "ifdef", 5) && c && (!nl || c < nl);
}

/* The place of `name`'s top-level declaration in `text`, or NULL;
 * *stmt: where that declaration starts (`typedef struct {` for `box_t`
 * in `typedef struct { ... } box_t;`). */
static const char *find_top_level(const char *text, const char *name, const char **stmt) {
  size_t n = strlen(name);
  int depth = 0, bol = 1;
  *stmt = NULL;
  for (const char *p = text; *p;) {
    if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      p = e ? e + 2 : p + strlen(p);
      if (!depth)
        *stmt = NULL; /* a comment between declarations */
      continue;
    }
    if ((p[0] == '/' && p[1] == '/') || (bol && *p == '#')) {
      if (*p == '#' && defines(p, name, n))
        return p;
      if (*p == '#' && cxx_guard(p)) { /* `extern "C" {` is no bracket of C's */
        const char *e = strstr(p, "\n#endif");
        p = e ? e + 1 : p + strlen(p);
      }
      while (*p && !(*p == '\n' && p[-1] != '\\'))
        p++;
      if (!depth)
        *stmt = NULL;
      continue;
    }
    if (*p == '"' || *p == '\'') {
      char q = *p++;
      while (*p && *p != q && *p != '\n')
        p += p[0] == '\\' && p[1] ? 2 : 1;
      p += *p == q;
      continue;
    }
    if (*p == '\n' || *p == ' ' || *p == '\t') {
      bol = *p == '\n' || (bol && *p != '\n');
      p++;
      continue;
    }
    bol = 0;
    if (!depth && !*stmt)
      *stmt = p; /* the first token of a top-level declaration */
    if (*p == '(' || *p == '{' || *p == '[')
      depth++;
    else if ((*p == ')' || *p == '}' || *p == ']') && depth > 0)
      depth--;
    else if (*p == ';' && !depth) {
      *stmt = NULL;
      p++;
      continue;
    }
    if (!is_ident(*p)) {
      p++;
      continue;
    }
    const char *w = p;
    while (is_ident(*p))
      p++;
    if (depth || (size_t)(p - w) != n || strncmp(w, name, n) || isdigit((unsigned char)*w))
      continue;
    const char *after = p;
    while (*after == ' ' || *after == '\t')
      after++;
    if (strchr("(;,=[", *after) && *after)
      return w;
  }
  return NULL;
}

/* Start of the line holding `p`. */
static const char *line_start(const char *text, const char *p) {
  while (p > text && p[-1] != '\n')
    p--;
  return p;
}

/* Start of the comment block right above the line at `ls` (ls itself
 * when there is none). */
static const char *comment_above(const char *text, const char *ls) {
  if (ls == text)
    return ls;
  const char *prev = line_start(text, ls - 1);
  const char *e = ls - 1; /* the '\n' ending the previous line */
  while (e > prev && isspace((unsigned char)e[-1]))
    e--;
  if (e - prev >= 2 && e[-1] == '/' && e[-2] == '*') {
    for (const char *s = e - 2; s > text; s--)
      if (s[-1] == '/' && s[0] == '*')
        return line_start(text, s - 1);
    return ls;
  }
  const char *cs = ls;
  for (;;) {
    const char *t = prev;
    while (*t == ' ' || *t == '\t')
      t++;
    if (!(t[0] == '/' && t[1] == '/'))
      return cs;
    cs = prev;
    if (prev == text)
      return cs;
    prev = line_start(text, prev - 1);
  }
}

char *ex_decl_find(const char *text, const char *name) {
  if (!text || !name || !*name)
    return NULL;
  const char *stmt;
  const char *p = find_top_level(text, name, &stmt);
  if (!p)
    return NULL;
  const char *ls = line_start(text, *p == '#' || !stmt ? p : stmt);
  const char *end;
  if (*p == '#') {
    end = p;
    while (*end && !(*end == '\n' && end[-1] != '\\'))
      end++;
  } else {
    end = strchr(p, ';');
    end = end ? end + 1 : p + strlen(name);
  }
  const char *cs = comment_above(text, ls);
  return strndup(cs, (size_t)(end - cs));
}
