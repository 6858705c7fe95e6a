/*
 * ex_query.c — is_complete, complete and inspect.
 */
#define _GNU_SOURCE
#include "ex_query.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_events.h"
#include "ex_split.h"
#include "nbf_buf.h"

static char *g_header; /* text of the runtime's public headers (ex_query_init) */

static const char *const c_words[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict",
    "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
    "unsigned", "void", "volatile", "while", "_Bool", "_Generic", "_Static_assert",
    /* the libc a cell uses most */
    "printf", "fprintf", "snprintf", "puts", "putchar", "fputs", "fflush", "stdout", "stderr",
    "malloc", "calloc", "realloc", "free", "memcpy", "memset", "memmove", "strlen", "strcmp",
    "strncmp", "strdup", "strchr", "strstr", "atoi", "atof", "strtol", "strtod", "qsort", "exit",
    "abort", "rand", "srand", "fopen", "fclose", "fread", "fwrite", "fgets", "sqrt", "sqrtf", "exp",
    "expf", "log", "logf", "fabs", "fabsf", "pow", "powf", "tanh", "tanhf", "size_t", "int64_t",
    "int32_t", "uint8_t", "uint32_t", "uint64_t", "NULL", NULL};

/* The runtime's public headers: nbfork.h and the display API it includes. */
static const char *const g_header_names[] = {"nbfork.h", "nbf_display.h"};

void ex_query_init(const char *incdir) {
  nbf_buf_t text = {0};
  for (size_t i = 0; i < sizeof g_header_names / sizeof *g_header_names; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", incdir, g_header_names[i]);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
      nbf_buf_append(&text, chunk, n);
    fclose(f);
    nbf_buf_puts(&text, "\n");
  }
  free(g_header);
  g_header = text.len ? nbf_buf_take(&text) : NULL;
  nbf_buf_free(&text);
}

static int is_ident(char c) {
  return isalnum((unsigned char)c) || c == '_';
}

typedef struct {
  const char *prefix;
  size_t plen;
  json_t *matches;
} cand_t;

static void add_match(cand_t *c, const char *name, size_t n) {
  if (n < c->plen || strncmp(name, c->prefix, c->plen) != 0)
    return;
  size_t i;
  for (i = 0; i < json_array_size(c->matches); i++) {
    const char *m = json_string_value(json_array_get(c->matches, i));
    if (strlen(m) == n && !strncmp(m, name, n))
      return;
  }
  json_array_append_new(c->matches, json_stringn(name, n));
}

static void add_cell_name(const ex_cell_name_t *n, void *ctx) {
  if (!strchr(n->name, ' ')) /* `struct S` completes as S after `struct ` */
    add_match(ctx, n->name, strlen(n->name));
  else
    add_match(ctx, strchr(n->name, ' ') + 1, strlen(strchr(n->name, ' ') + 1));
}

static int cmp_json_str(const void *a, const void *b) {
  return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* The request's code ("" when absent) and its cursor_pos, clamped to
 * the code (the end when absent or out of range). */
static const char *request_code(json_t *req, size_t *len, size_t *pos) {
  const char *code = json_string_value(json_object_get(req, "code"));
  json_int_t p = json_integer_value(json_object_get(req, "cursor_pos"));
  if (!code)
    code = "";
  *len = strlen(code);
  *pos = p < 0 || (size_t)p > *len ? *len : (size_t)p;
  return code;
}

static int handle_complete(json_t *req, const ex_cell_state_t *cells) {
  size_t len, pos;
  const char *code = request_code(req, &len, &pos);
  size_t start = pos;
  while (start > 0 && is_ident(code[start - 1]))
    start--;
  char prefix[256];
  size_t plen = pos - start;
  if (plen >= sizeof prefix)
    plen = sizeof prefix - 1;
  memcpy(prefix, code + start, plen);
  prefix[plen] = 0;
  cand_t c = {prefix, plen, json_array()};
  ex_cell_each_name(cells, add_cell_name, &c);
  /* identifiers of the cell itself */
  for (size_t i = 0; i < len;) {
    if (is_ident(code[i]) && !isdigit((unsigned char)code[i]) &&
        (i == 0 || !is_ident(code[i - 1]))) {
      size_t j = i;
      while (j < len && is_ident(code[j]))
        j++;
      if (i != start)
        add_match(&c, code + i, j - i);
      i = j;
    } else {
      i++;
    }
  }
  if (g_header) {
    for (const char *p = g_header; *p;) {
      if ((!strncmp(p, "acc_", 4) || !strncmp(p, "ACC_", 4) || !strncmp(p, "nbf_", 4)) &&
          (p == g_header || !is_ident(p[-1]))) {
        const char *q = p;
        while (is_ident(*q))
          q++;
        add_match(&c, p, (size_t)(q - p));
        p = q;
      } else {
        p++;
      }
    }
  }
  for (int i = 0; c_words[i]; i++)
    add_match(&c, c_words[i], strlen(c_words[i]));
  /* sort for a stable menu */
  size_t n = json_array_size(c.matches);
  json_t **v = malloc(n * sizeof *v + 1);
  for (size_t i = 0; v && i < n; i++)
    v[i] = json_incref(json_array_get(c.matches, i));
  if (v)
    qsort(v, n, sizeof *v, cmp_json_str);
  json_array_clear(c.matches);
  for (size_t i = 0; v && i < n; i++)
    json_array_append_new(c.matches, v[i]);
  free(v);
  return ex_event_reply_ok(json_pack("{s:o, s:I, s:I, s:{}}", "matches", c.matches, "cursor_start",
                                     (json_int_t)start, "cursor_end", (json_int_t)pos, "metadata"));
}

/* The declaration of `name` in nbfork.h with the comment block above it
 * (caller frees), or NULL. */
static char *header_doc(const char *name) {
  if (!g_header)
    return NULL;
  size_t n = strlen(name);
  for (const char *p = g_header; (p = strstr(p, name)) != NULL; p += n) {
    if ((p > g_header && is_ident(p[-1])) || is_ident(p[n]))
      continue;
    const char *after = p + n;
    while (*after == ' ')
      after++;
    /* a declaration: `name(` for functions, `} name;` / `name;` for types */
    if (*after != '(' && *after != ';' && *after != ',' && *after != ' ' && *after != '=')
      continue;
    const char *ls = p;
    while (ls > g_header && ls[-1] != '\n')
      ls--;
    if (ls[0] == ' ' && ls[1] == '*')
      continue; /* inside a comment */
    /* extend up over the comment block right above */
    const char *cs = ls;
    while (cs > g_header) {
      const char *prev = cs - 1;
      while (prev > g_header && prev[-1] != '\n')
        prev--;
      const char *t = prev;
      while (*t == ' ')
        t++;
      if (t[0] == '/' && t[1] == '*') {
        cs = prev;
        break;
      }
      if (t[0] == '*' || (t[0] == ' ' && t[1] == '*')) {
        cs = prev;
        continue;
      }
      break;
    }
    const char *end = strchr(p, ';');
    if (!end)
      end = p + n;
    return strndup(cs, (size_t)(end - cs + 1));
  }
  return NULL;
}

/* The identifier to inspect at byte offset pos: the one under (or just
 * before) the cursor, else the function whose call's parentheses the
 * cursor is in (`sq(3|` inspects sq). Returns its [s, e) range or 0. */
static int inspect_target(const char *code, size_t len, size_t pos, size_t *s_out, size_t *e_out) {
  size_t s = pos, e = pos;
  while (s > 0 && is_ident(code[s - 1]))
    s--;
  while (e < len && is_ident(code[e]))
    e++;
  if (e > s && !isdigit((unsigned char)code[s])) {
    *s_out = s;
    *e_out = e;
    return 1;
  }
  int depth = 0;
  for (size_t i = pos; i > 0; i--) {
    char c = code[i - 1];
    if (c == ')')
      depth++;
    else if (c == '(' && depth-- == 0) {
      e = i - 1;
      while (e > 0 && (code[e - 1] == ' ' || code[e - 1] == '\t'))
        e--;
      s = e;
      while (s > 0 && is_ident(code[s - 1]))
        s--;
      if (e > s && !isdigit((unsigned char)code[s])) {
        *s_out = s;
        *e_out = e;
        return 1;
      }
      return 0;
    } else if (c == ';' || c == '{' || c == '}')
      return 0;
  }
  return 0;
}

static int handle_inspect(json_t *req, const ex_cell_state_t *cells) {
  size_t len, pos, s, e;
  const char *code = request_code(req, &len, &pos);
  if (!inspect_target(code, len, pos, &s, &e))
    return ex_event_reply_ok(json_pack("{s:b, s:{}, s:{}}", "found", 0, "data", "metadata"));
  char *name = strndup(code + s, e - s);
  if (!name)
    return ex_event_reply_error("MemoryError", "out of memory", NULL);
  ex_cell_name_t n;
  char *text = NULL;
  if (ex_cell_find(cells, name, &n)) {
    if (asprintf(&text, "%s %s, defined in %s:\n%s%s%s", n.kind, n.name, n.label,
                 n.doc ? n.doc : "", n.doc ? "\n" : "", n.decl) < 0)
      text = NULL;
  } else {
    char *doc = header_doc(name);
    /* the display API's names (nbf_*) are the ones nbf_display.h declares */
    const char *header = strncmp(name, "nbf_", 4) == 0 ? "nbf_display.h" : "nbfork.h";
    if (doc && asprintf(&text, "%s (%s):\n%s", name, header, doc) < 0)
      text = NULL;
    free(doc);
  }
  free(name);
  if (!text)
    return ex_event_reply_ok(json_pack("{s:b, s:{}, s:{}}", "found", 0, "data", "metadata"));
  json_t *r = json_pack("{s:b, s:{s:s}, s:{}}", "found", 1, "data", "text/plain", text, "metadata");
  free(text);
  return ex_event_reply_ok(r);
}

int ex_query_handle(const char *msg, json_t *req, const ex_cell_state_t *cells) {
  if (!strcmp(msg, "is_complete")) {
    const char *code = json_string_value(json_object_get(req, "code"));
    const char *st = ex_split_is_complete(code ? code : "");
    /* is_complete's reply carries the answer in "status" (kn_wire.h) */
    return ex_event_send(json_pack("{s:s, s:s, s:s}", "msg", "reply", "status", st, "indent",
                                   strcmp(st, "incomplete") ? "" : "    "));
  }
  if (!strcmp(msg, "complete"))
    return handle_complete(req, cells);
  return handle_inspect(req, cells);
}
