/*
 * ex_query.c — is_complete, complete and inspect.
 */
#define _GNU_SOURCE
#include "ex_query.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_clang.h"
#include "ex_decl.h"
#include "ex_events.h"
#include "ex_magic.h"
#include "ex_split.h"
#include "nbf_buf.h"

static char *g_header;      /* text of the runtime's public headers (ex_query_init) */
static char g_incdir[4096]; /* the runtime's include directory */
static ex_clang_t *g_clang; /* NULL: lexical answers only (ex_clang.h) */

/* Headers inspect reads, in its order after the user's own definitions:
 * the runtime's, then libc's (the ones cells include most). */
typedef struct {
  const char *name; /* as shown: `nbfork.h`, `stdio.h` */
  int runtime;      /* in the runtime's include directory, else /usr/include */
  char *text;       /* loaded by ex_query_init; NULL when absent */
} ex_header_t;

static ex_header_t g_headers[] = {
    {"nbfork.h", 1, NULL}, {"nbf_display.h", 1, NULL}, {"nbf_trainer.h", 1, NULL}, {"nbf_shard.h", 1, NULL},
    {"stdio.h", 0, NULL},  {"stdlib.h", 0, NULL},      {"string.h", 0, NULL},
    {"unistd.h", 0, NULL}, {"time.h", 0, NULL},        {"ctype.h", 0, NULL},
    {"stdint.h", 0, NULL}, {"pthread.h", 0, NULL},
};

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

/* The whole file at `path` (caller frees), or NULL. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  nbf_buf_t text = {0};
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    nbf_buf_append(&text, chunk, n);
  fclose(f);
  char *r = text.len ? nbf_buf_take(&text) : NULL;
  nbf_buf_free(&text);
  return r;
}

void ex_query_init(const char *incdir) {
  nbf_buf_t all = {0};
  snprintf(g_incdir, sizeof g_incdir, "%s", incdir);
  for (size_t i = 0; i < sizeof g_headers / sizeof *g_headers; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_headers[i].runtime ? incdir : "/usr/include",
             g_headers[i].name);
    free(g_headers[i].text);
    g_headers[i].text = read_text(path);
    if (g_headers[i].runtime && g_headers[i].text) /* completion lists the runtime's names */
      nbf_buf_printf(&all, "%s\n", g_headers[i].text);
  }
  ex_clang_destroy(&g_clang);
  g_clang = ex_clang_new(incdir);
  free(g_header);
  g_header = all.len ? nbf_buf_take(&all) : NULL;
  nbf_buf_free(&all);
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

typedef struct {
  cand_t *c;
  int member; /* the cursor follows `.` or `->` */
} clang_cand_t;

/* One of clang's completions: after `.`/`->` every member; elsewhere only
 * locals and parameters (clang's priority below CCP_Declaration, 50),
 * since the lexical list below already has the file-scope names a menu
 * should show (clang's would add every reserved name of libc). */
static void add_clang_name(const char *name, unsigned priority, void *ctx) {
  clang_cand_t *cc = ctx;
  if (name[0] == '_' && name[1] == '_' && strncmp(cc->c->prefix, "__", 2))
    return;
  if (cc->member || priority < 50)
    add_match(cc->c, name, strlen(name));
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

/* The complete_reply for c's matches (sorted, for a stable menu),
 * replacing code[start, pos). */
static int reply_matches(cand_t *c, size_t start, size_t pos) {
  size_t n = json_array_size(c->matches);
  json_t **v = malloc(n * sizeof *v + 1);
  for (size_t i = 0; v && i < n; i++)
    v[i] = json_incref(json_array_get(c->matches, i));
  if (v)
    qsort(v, n, sizeof *v, cmp_json_str);
  json_array_clear(c->matches);
  for (size_t i = 0; v && i < n; i++)
    json_array_append_new(c->matches, v[i]);
  free(v);
  return ex_event_reply_ok(json_pack("{s:o, s:I, s:I, s:{}}", "matches", c->matches, "cursor_start",
                                     (json_int_t)start, "cursor_end", (json_int_t)pos, "metadata"));
}

/* Header names under `base`/`dir` (`dir` is "" or ends in '/') that start
 * with `file`, as `dir` + name (+ '/' for a directory) into c. */
static void add_headers(cand_t *c, const char *base, const char *dir, const char *file) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", base, dir) >= (int)sizeof path)
    return;
  DIR *d = opendir(path);
  if (!d)
    return;
  size_t fl = strlen(file);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || strncmp(e->d_name, file, fl))
      continue;
    int is_dir = e->d_type == DT_DIR;
    if (!is_dir && !(n > 2 && !strcmp(e->d_name + n - 2, ".h")))
      continue;
    char m[4096];
    int ml = snprintf(m, sizeof m, "%s%s%s", dir, e->d_name, is_dir ? "/" : "");
    if (ml > 0 && ml < (int)sizeof m)
      add_match(c, m, (size_t)ml);
  }
  closedir(d);
}

/* Completion that is not of C names: a `%` magic at the start of a line,
 * or the header of an `#include <...>` / `#include "..."` line. 1 with
 * *start set and c's matches filled, or 0 when the cursor is elsewhere. */
static int complete_line_context(const char *code, size_t pos, cand_t *c, size_t *start) {
  size_t ls = pos;
  while (ls > 0 && code[ls - 1] != '\n')
    ls--;
  size_t t = ls;
  while (t < pos && (code[t] == ' ' || code[t] == '\t'))
    t++;
  if (t < pos && code[t] == '%') {
    for (size_t i = t; i < pos; i++)
      if (!is_ident(code[i]) && code[i] != '%')
        return 0;
    *start = t;
    c->prefix = code + t;
    c->plen = pos - t;
    for (size_t i = 0; ex_magic_name(i); i++)
      add_match(c, ex_magic_name(i), strlen(ex_magic_name(i)));
    /* the cell magics, and the ranks' magics ex_ranks.c runs */
    static const char *const cell_magics[] = {"%%cuda",  "%%timeit", "%%writefile", "%%file",
                                              "%%ranks", "%ranks",   "%autoranks"};
    for (size_t i = 0; i < sizeof cell_magics / sizeof *cell_magics; i++)
      add_match(c, cell_magics[i], strlen(cell_magics[i]));
    return 1;
  }
  if (t >= pos || code[t] != '#')
    return 0;
  const char *q = code + t + 1;
  while (*q == ' ' || *q == '\t')
    q++;
  if (strncmp(q, "include", 7))
    return 0;
  q += 7;
  while (*q == ' ' || *q == '\t')
    q++;
  if ((*q != '<' && *q != '"') || (size_t)(q - code) >= pos)
    return 0;
  char path[1024];
  size_t pl = pos - (size_t)(q + 1 - code);
  if (pl >= sizeof path || memchr(q + 1, '>', pl) || memchr(q + 1, '"', pl))
    return 0;
  memcpy(path, q + 1, pl);
  path[pl] = 0;
  char *slash = strrchr(path, '/');
  char dir[1024] = "";
  const char *file = path;
  if (slash) {
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path + 1), path);
    file = slash + 1;
  }
  *start = (size_t)(q + 1 - code);
  c->prefix = path;
  c->plen = pl;
  if (*q == '"')
    add_headers(c, ".", dir, file); /* next to the notebook */
  add_headers(c, g_incdir, dir, file);
  add_headers(c, "/usr/local/include", dir, file);
#ifdef NBFORK_MULTIARCH /* Debian: sys/, bits/ and asm/ live here */
  add_headers(c, "/usr/include/" NBFORK_MULTIARCH, dir, file);
#endif
  add_headers(c, "/usr/include", dir, file);
  return 1;
}

static int handle_complete(json_t *req, const ex_cell_state_t *cells) {
  size_t len, pos;
  const char *code = request_code(req, &len, &pos);
  size_t lstart;
  cand_t lc = {"", 0, json_array()};
  if (complete_line_context(code, pos, &lc, &lstart))
    return reply_matches(&lc, lstart, pos);
  json_decref(lc.matches);
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
  clang_cand_t cc = {&c, 0};
  int semantic = ex_clang_complete(g_clang, cells, code, start, add_clang_name, &cc, &cc.member);
  if (semantic && cc.member) /* `p.`, `pp->`: the members clang knows, nothing else */
    return reply_matches(&c, start, pos);
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
  return reply_matches(&c, start, pos);
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

/* Inspect's text for an earlier cell's `name` (or for the member `member`
 * of its type `name`), or NULL when no cell defined it. */
static char *user_text(const ex_cell_state_t *cells, const char *name, const char *member) {
  ex_cell_name_t n;
  char *text = NULL;
  if (!ex_cell_find(cells, name, &n))
    return NULL;
  if (asprintf(&text, "%s%s%s %s, defined in %s:\n%s%s%s", member ? member : "",
               member ? ", member of " : "", n.kind, n.name, n.label, n.doc ? n.doc : "",
               n.doc ? "\n" : "", n.decl) < 0)
    text = NULL;
  return text;
}

/* A header's name as a cell includes it: `nbfork.h`, `stdio.h`, `sys/types.h`. */
static const char *header_name(const char *path) {
  const char *bases[] = {g_incdir, "/usr/local/include",
#ifdef NBFORK_MULTIARCH
                         "/usr/include/" NBFORK_MULTIARCH,
#endif
                         "/usr/include"};
  for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
    size_t n = strlen(bases[i]);
    if (n && !strncmp(path, bases[i], n) && path[n] == '/')
      return path + n + 1;
  }
  return path;
}

/* Inspect's text for code[s, e) from what libclang says it refers to
 * (ex_clang_inspect), or NULL when clang resolved nothing: the caller
 * then looks the name up lexically. */
static char *semantic_inspect(const ex_cell_state_t *cells, const char *code, size_t s, size_t e) {
  ex_clang_decl_t d;
  char *text = NULL;
  if (!ex_clang_inspect(g_clang, cells, code, s, e, &d))
    return NULL;
  if (d.origin == EX_CLANG_USER) {
    text = user_text(cells, d.parent[0] ? d.parent : d.name, d.parent[0] ? d.name : NULL);
  } else if (d.origin == EX_CLANG_CELL && d.text) {
    if (asprintf(&text, "%s%s%s (this cell):\n%s", d.name, d.parent[0] ? ", member of " : "",
                 d.parent, d.text) < 0)
      text = NULL;
  } else if (d.origin == EX_CLANG_HEADER) {
    char *header = read_text(d.path);
    char *doc = ex_decl_find(header, d.name);
    if (doc && asprintf(&text, "%s (%s):\n%s", d.name, header_name(d.path), doc) < 0)
      text = NULL;
    free(doc);
    free(header);
  }
  free(d.text);
  return text;
}

static int handle_inspect(json_t *req, const ex_cell_state_t *cells) {
  size_t len, pos, s, e;
  const char *code = request_code(req, &len, &pos);
  if (!inspect_target(code, len, pos, &s, &e))
    return ex_event_reply_ok(json_pack("{s:b, s:{}, s:{}}", "found", 0, "data", "metadata"));
  char *name = strndup(code + s, e - s);
  if (!name)
    return ex_event_reply_error("MemoryError", "out of memory", NULL);
  char *text = semantic_inspect(cells, code, s, e);
  if (!text)
    text = user_text(cells, name, NULL);
  if (!text) {
    /* the runtime's headers, then libc's: the first top-level declaration */
    for (size_t i = 0; !text && i < sizeof g_headers / sizeof *g_headers; i++) {
      char *doc = ex_decl_find(g_headers[i].text, name);
      if (doc && asprintf(&text, "%s (%s):\n%s", name, g_headers[i].name, doc) < 0)
        text = NULL;
      free(doc);
    }
  }
  free(name);
  if (!text)
    return ex_event_reply_ok(json_pack("{s:b, s:{}, s:{}}", "found", 0, "data", "metadata"));
  json_t *r = json_pack("{s:b, s:{s:s}, s:{}}", "found", 1, "data", "text/plain", text, "metadata");
  free(text);
  return ex_event_reply_ok(r);
}

/* The name of a help request (`sq?`, `??struct S`, `%timeit?`) into
 * name, and the number of '?' (1 or 2); 0 when code is not one. */
static int help_request(const char *code, char *name, size_t cap) {
  const char *s = code, *e = code + strlen(code);
  while (s < e && isspace((unsigned char)*s))
    s++;
  while (e > s && isspace((unsigned char)e[-1]))
    e--;
  int q = 0;
  while (s < e && *s == '?' && q < 2)
    s++, q++;
  if (!q)
    while (e > s && e[-1] == '?' && q < 2)
      e--, q++;
  if (!q || s >= e || (size_t)(e - s) >= cap)
    return 0;
  const char *p = s;
  while (p < e && *p == '%' && p - s < 2)
    p++;
  int words = 0;
  for (const char *w = p; w < e;) {
    if (!(isalpha((unsigned char)*w) || *w == '_'))
      return 0;
    while (w < e && is_ident(*w))
      w++;
    words++;
    if (w < e && *w != ' ')
      return 0;
    while (w < e && *w == ' ')
      w++;
  }
  if (words == 0 || words > 2 || (words == 2 && (p != s || !(!strncmp(p, "struct ", 7) ||
                                                            !strncmp(p, "union ", 6) ||
                                                            !strncmp(p, "enum ", 5)))))
    return 0;
  snprintf(name, cap, "%.*s", (int)(e - s), s);
  return q;
}

/* The pager's text for name (`??`: detail 2, the definition's source),
 * or NULL when nothing defines it. Caller frees. */
static char *help_text(const ex_cell_state_t *cells, const char *name, int detail) {
  char *text = NULL;
  if (name[0] == '%') {
    const char *h = ex_magic_help(name);
    return h ? strdup(h) : NULL;
  }
  ex_cell_name_t n;
  if (ex_cell_find(cells, name, &n)) {
    if (detail < 2)
      return user_text(cells, name, NULL);
    if (asprintf(&text, "%s %s, defined in %s:\n%s", n.kind, n.name, n.label,
                 n.source ? n.source : n.decl) < 0)
      text = NULL;
    return text;
  }
  for (size_t i = 0; !text && i < sizeof g_headers / sizeof *g_headers; i++) {
    char *doc = ex_decl_find(g_headers[i].text, name);
    if (doc && asprintf(&text, "%s (%s):\n%s", name, g_headers[i].name, doc) < 0)
      text = NULL;
    free(doc);
  }
  return text;
}

int ex_query_help(const char *code, const ex_cell_state_t *cells) {
  char name[256];
  int detail = help_request(code, name, sizeof name);
  if (!detail)
    return EX_QUERY_NOT_HELP;
  char *text = help_text(cells, name, detail);
  if (!text) {
    printf("Object `%s` not found.\n", name);
    return ex_event_reply_ok(NULL);
  }
  json_t *payload = json_pack("{s:[{s:s, s:{s:s}, s:i}]}", "payload", "source", "page", "data",
                              "text/plain", text, "start", 0);
  free(text);
  return ex_event_reply_ok(payload);
}

int ex_query_handle(const char *msg, json_t *req, const ex_cell_state_t *cells) {
  if (!strcmp(msg, "is_complete")) {
    const char *code = json_string_value(json_object_get(req, "code"));
    const char *st = ex_split_is_complete(code ? code : "");
    /* is_complete's reply carries the answer in "status" (nbf_wire.h) */
    return ex_event_send(json_pack("{s:s, s:s, s:s}", "msg", "reply", "status", st, "indent",
                                   strcmp(st, "incomplete") ? "" : "    "));
  }
  if (!strcmp(msg, "complete"))
    return handle_complete(req, cells);
  return handle_inspect(req, cells);
}
