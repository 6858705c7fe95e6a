/*
 * ex_magic.c — magic lines. See ex_magic.h for the list.
 */
#define _GNU_SOURCE
#include "ex_magic.h"
#include "nbf_param.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
}

/* Where a C comment after the options starts (`num_processes=2 // 2 GPUs`):
 * `//` or slash-star after a blank, outside quotes; else end. */
static const char *comment_start(const char *p, const char *end) {
  char quote = 0;
  for (const char *q = p; q + 1 < end; q++) {
    if (quote)
      quote = *q == quote ? 0 : quote;
    else if (*q == '"' || *q == '\'')
      quote = *q;
    else if (*q == '/' && (q[1] == '/' || q[1] == '*') && (q == p || isspace((unsigned char)q[-1])))
      return q;
  }
  return end;
}

/* Split `%launch f(a, "b)") opts` into the call and the options. */
static int parse_launch(const char *args, size_t n, ex_magic_result_t *out, char *err,
                        size_t errlen) {
  const char *p = args, *end = args + n;
  while (p < end && isspace((unsigned char)*p))
    p++;
  const char *call = p;
  while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
    p++;
  if (p == call) {
    snprintf(err, errlen,
             "%%launch needs a function call first, e.g. %%launch training_loop(\"no\", 42, 64) "
             "num_processes=2");
    return -1;
  }
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  if (p >= end || *p != '(') {
    snprintf(err, errlen,
             "%%launch: '%.*s' must be called with its arguments, e.g. %%launch %.*s() "
             "num_processes=2",
             (int)(p - call), call, (int)(p - call), call);
    return -1;
  }
  int depth = 0;
  char quote = 0;
  for (; p < end; p++) {
    if (quote) {
      if (*p == '\\' && p + 1 < end)
        p++;
      else if (*p == quote)
        quote = 0;
      continue;
    }
    if (*p == '"' || *p == '\'')
      quote = *p;
    else if (*p == '(')
      depth++;
    else if (*p == ')' && --depth == 0) {
      p++;
      break;
    }
  }
  if (depth != 0 || quote) {
    snprintf(err, errlen, "%%launch: the call's parentheses or quotes are not closed");
    return -1;
  }
  out->launch_call = strndup(call, (size_t)(p - call));
  out->launch_opts = strndup(p, (size_t)(comment_start(p, end) - p));
  return 0;
}

typedef struct {
  int any;
} who_ctx_t;

/* `%timeit [-n N] [-r R] STATEMENT` */
static int parse_timeit(const char *args, size_t n, ex_magic_result_t *out, char *err,
                        size_t errlen) {
  const char *p = args, *end = args + n;
  out->timeit_repeat = 7;
  for (;;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (end - p >= 3 && p[0] == '-' && (p[1] == 'n' || p[1] == 'r') &&
        isspace((unsigned char)p[2])) {
      char opt = p[1], *stop;
      long v = strtol(p + 3, &stop, 10);
      if (stop == p + 3 || v < 1 || v > 1000000000L ||
          (stop < end && !isspace((unsigned char)*stop))) {
        snprintf(err, errlen, "%%timeit: -%c needs a positive number, e.g. %%timeit -%c 100 f(x)",
                 opt, opt);
        return -1;
      }
      if (opt == 'n')
        out->timeit_loops = v;
      else
        out->timeit_repeat = (int)(v > 1000 ? 1000 : v);
      p = stop;
      continue;
    }
    break;
  }
  while (end > p && isspace((unsigned char)end[-1]))
    end--;
  if (p == end) {
    snprintf(err, errlen,
             "%%timeit needs a statement, e.g. %%timeit sq(3)  or  %%timeit -n 1000 -r 5 sq(3)");
    return -1;
  }
  out->timeit_stmt = strndup(p, (size_t)(end - p));
  return out->timeit_stmt ? 0 : -1;
}

static void who_print(const ex_cell_name_t *n, void *ctx) {
  ((who_ctx_t *)ctx)->any = 1;
  if (!strcmp(n->kind, "function") || !strcmp(n->kind, "variable"))
    printf("%-24s %-9s %s  (%s)\n", n->name, n->kind, n->decl, n->label);
  else
    printf("%-24s %-9s (%s)\n", n->name, n->kind, n->label);
}

static void set_flags(char **slot, const char *args, size_t n, const char *what) {
  const char *p = skip_ws(args);
  size_t len = n - (size_t)(p - args);
  while (len && isspace((unsigned char)p[len - 1]))
    len--;
  if (len == 7 && !strncmp(p, "--clear", 7)) {
    free(*slot);
    *slot = NULL;
  } else if (len) {
    free(*slot);
    *slot = strndup(p, len);
  }
  printf("%s for the next cells: %s\n", what, *slot && **slot ? *slot : "(none)");
}

/* What a magic's handler works on. */
typedef struct {
  ex_flags_t *flags;
  const ex_cell_state_t *st;
  ex_magic_result_t *out;
  char *err;
  size_t errlen;
} magic_ctx_t;

static ex_result_t magic_launch(magic_ctx_t *c, const char *args, size_t an) {
  return parse_launch(args, an, c->out, c->err, c->errlen) ? EX_ERR_USAGE : EX_OK;
}

static ex_result_t magic_timeit(magic_ctx_t *c, const char *args, size_t an) {
  return parse_timeit(args, an, c->out, c->err, c->errlen) ? EX_ERR_USAGE : EX_OK;
}

static ex_result_t magic_cflags(magic_ctx_t *c, const char *args, size_t an) {
  set_flags(&c->flags->cflags, args, an, "extra compiler flags");
  return EX_OK;
}

static ex_result_t magic_ldflags(magic_ctx_t *c, const char *args, size_t an) {
  set_flags(&c->flags->ldflags, args, an, "extra linker flags");
  return EX_OK;
}

/* %env: all variables; %env NAME: one; %env NAME=VALUE: set it (workers
 * forked later inherit it). */
static ex_result_t magic_env(magic_ctx_t *c, const char *args, size_t an) {
  char *a = strndup(skip_ws(args), an - (size_t)(skip_ws(args) - args));
  if (!a) {
    snprintf(c->err, c->errlen, "out of memory");
    return EX_ERR_NOMEM;
  }
  size_t al = strlen(a);
  while (al && isspace((unsigned char)a[al - 1]))
    a[--al] = 0;
  char *eq = strchr(a, '=');
  if (!*a) {
    for (char **e = environ; *e; e++)
      printf("%s\n", *e);
  } else if (eq) {
    *eq = 0;
    setenv(a, eq + 1, 1);
    printf("env: %s=%s\n", a, eq + 1);
  } else {
    const char *v = nbf_env_get(a);
    printf("%s\n", v ? v : "(not set)");
  }
  free(a);
  return EX_OK;
}

static ex_result_t magic_who(magic_ctx_t *c, const char *args, size_t an) {
  (void)args;
  (void)an;
  who_ctx_t w = {0};
  ex_cell_each_name(c->st, who_print, &w);
  if (!w.any)
    printf("Nothing defined yet.\n");
  return EX_OK;
}

static ex_result_t magic_lsmagic(magic_ctx_t *c, const char *args, size_t an) {
  (void)c;
  (void)args;
  (void)an;
  printf("Line magics: %%launch %%timeit %%cflags %%ldflags %%env %%who %%lsmagic\n"
         "Cell magics: %%%%cuda\n");
  return EX_OK;
}

/* The line magics. `once`: the offset of the result field the magic
 * fills when a cell may hold only one of it, else -1. */
static const struct {
  const char *name;
  const char *ename; /* the error name of its failures */
  ptrdiff_t once;
  ex_result_t (*run)(magic_ctx_t *c, const char *args, size_t an);
} magics[] = {
    {"%launch", "LaunchError", offsetof(ex_magic_result_t, launch_call), magic_launch},
    {"%timeit", "UsageError", offsetof(ex_magic_result_t, timeit_stmt), magic_timeit},
    {"%cflags", "UsageError", -1, magic_cflags},
    {"%ldflags", "UsageError", -1, magic_ldflags},
    {"%env", "UsageError", -1, magic_env},
    {"%who", "UsageError", -1, magic_who},
    {"%lsmagic", "UsageError", -1, magic_lsmagic},
};

const char *ex_magic_name(size_t i) {
  return i < sizeof magics / sizeof magics[0] ? magics[i].name : NULL;
}

/* Run the magic line `line` whose name is its first `nl` bytes. */
static ex_result_t run_line_magic(magic_ctx_t *c, const char *line, size_t nl, size_t n,
                                  const char **ename) {
  for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++) {
    if (strlen(magics[i].name) != nl || strncmp(line, magics[i].name, nl))
      continue;
    *ename = magics[i].ename;
    if (magics[i].once >= 0 && *(char **)((char *)c->out + magics[i].once)) {
      snprintf(c->err, c->errlen, "only one %s per cell", magics[i].name);
      return EX_ERR_USAGE;
    }
    ex_result_t r = magics[i].run(c, line + nl, n - nl);
    if (r == EX_OK)
      *ename = "UsageError";
    return r;
  }
  snprintf(c->err, c->errlen,
           "unknown magic '%.*s'. Available: %%launch, %%timeit, %%cflags, %%ldflags, %%env, "
           "%%who, %%lsmagic, %%%%cuda (first line only)",
           (int)nl, line);
  return EX_ERR_USAGE;
}

/* The cell's line number (1-based) of the byte at `at`. */
static int line_of(const char *src, const char *at) {
  int n = 1;
  for (const char *p = src; p < at; p++)
    n += *p == '\n';
  return n;
}

/* Blank the n bytes of a magic line at `line` (a pointer into src) in
 * the code buffer: spaces, so the cell's other lines keep their numbers
 * and columns. */
static void blank_line(ex_magic_result_t *out, const char *src, const char *line, size_t n) {
  memset(out->code_buf + (line - src), ' ', n);
}

/* Walk C text from p (`bol`: p starts a line). With `any_code`: the first
 * byte that is neither blank nor in a comment; else the first '%' that
 * begins a line (after blanks), outside comments and literals. NULL when
 * there is none. */
static const char *scan_c(const char *p, int any_code, int bol) {
  while (*p) {
    if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      if (!e)
        return NULL;
      p = e + 2;
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n')
        p += p[0] == '\\' && p[1] == '\n' ? 2 : 1;
    } else if (*p == '\n') {
      bol = 1;
      p++;
    } else if (isspace((unsigned char)*p)) {
      p++;
    } else if (any_code || (*p == '%' && bol)) {
      return p;
    } else if (*p == '"' || *p == '\'') {
      char q = *p++;
      while (*p && *p != q && *p != '\n')
        p += p[0] == '\\' && p[1] ? 2 : 1;
      p += *p == q;
      bol = 0;
    } else {
      p++;
      bol = 0;
    }
  }
  return NULL;
}

/* Length of the magic name at line ('%' then letters, digits, '%', '_'). */
static size_t magic_name_len(const char *line, size_t n) {
  size_t nl = 1;
  while (nl < n && (isalnum((unsigned char)line[nl]) || line[nl] == '%' || line[nl] == '_'))
    nl++;
  return nl;
}

/* Record where the %launch call starts: diagnostics of the thunk point
 * at the cell's %launch line (ex_launch_thunk.h). */
static void set_launch_pos(ex_magic_result_t *out, const char *src, const char *line, size_t nl) {
  const char *call = skip_ws(line + nl), *bol = line;
  while (bol > src && bol[-1] != '\n')
    bol--;
  out->launch_line = line_of(src, line);
  out->launch_col = (int)(call - bol) + 1;
}

/* A second %launch (at `at`) in the cell: refused. */
static ex_result_t second_launch(magic_ctx_t *c, const char *src, const char *at) {
  snprintf(c->err, c->errlen, "only one %%launch per cell (a second one on line %d)",
           line_of(src, at));
  return EX_ERR_USAGE;
}

/* Refuse code after the %launch line: the cell's code runs before the
 * launch, so code below it would run in the wrong order. */
static ex_result_t refuse_code_after(magic_ctx_t *c, const char *src, const char *from) {
  const char *code = scan_c(from, 1, 1);
  if (!code)
    return EX_OK;
  if (!strncmp(code, "%launch", 7))
    return second_launch(c, src, code);
  snprintf(c->err, c->errlen,
           "code after %%launch (line %d): a cell's code runs before its launch, so nothing may "
           "follow the %%launch line (comments and blank lines aside). Move that code to the next "
           "cell, or above the %%launch line if it must run before the launch",
           line_of(src, code));
  return EX_ERR_USAGE;
}

/* After the leading magic lines (`from`): find a %launch line further
 * down (after comments, #includes or code), which must be the cell's
 * last; any other magic there is refused. */
static ex_result_t later_magics(magic_ctx_t *c, const char *src, const char *from,
                                const char **ename) {
  ex_magic_result_t *out = c->out;
  int bol = 1;
  for (const char *q = from; (q = scan_c(q, 0, bol)) != NULL; q++, bol = 0) {
    const char *eol = strchr(q, '\n');
    size_t n = eol ? (size_t)(eol - q) : strlen(q), nl = magic_name_len(q, n);
    if (nl == 7 && !strncmp(q, "%launch", 7)) {
      if (out->launch_call)
        return second_launch(c, src, q);
      EX_CHECK(run_line_magic(c, q, nl, n, ename));
      set_launch_pos(out, src, q, nl);
      blank_line(out, src, q, n);
      return eol ? refuse_code_after(c, src, eol + 1) : EX_OK;
    }
    for (size_t i = 0; ex_magic_name(i); i++)
      if (strlen(ex_magic_name(i)) == nl && !strncmp(q, ex_magic_name(i), nl)) {
        snprintf(c->err, c->errlen,
                 "%.*s (line %d) must come before the cell's code: put the line magics on the "
                 "cell's first lines (only %%launch may follow code, as the last line)",
                 (int)nl, q, line_of(src, q));
        return EX_ERR_USAGE;
      }
  }
  return out->launch_call ? refuse_code_after(c, src, from) : EX_OK;
}

ex_result_t ex_magic_run(const char *src, ex_flags_t *flags, const ex_cell_state_t *st,
                         ex_magic_result_t *out, const char **ename, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  *ename = "UsageError";
  out->code = out->code_buf = strdup(src);
  if (!out->code_buf) {
    snprintf(err, errlen, "out of memory");
    return EX_ERR_NOMEM;
  }
  magic_ctx_t c = {flags, st, out, err, errlen};
  const char *p = src;
  for (;;) {
    const char *line = p;
    while (*line == ' ' || *line == '\t' || *line == '\n' || *line == '\r')
      line++;
    if (*line != '%')
      return later_magics(&c, src, p, ename);
    const char *eol = strchr(line, '\n');
    size_t n = eol ? (size_t)(eol - line) : strlen(line);
    const char *next = eol ? eol + 1 : line + n;
    size_t nl = magic_name_len(line, n);
    if (!strncmp(line, "%%cuda", 6) && nl == 6) {
      out->cuda = 1;
      blank_line(out, src, line, n);
      return later_magics(&c, src, next, ename);
    }
    EX_CHECK(run_line_magic(&c, line, nl, n, ename));
    if (out->launch_call && !out->launch_line)
      set_launch_pos(out, src, line, nl);
    blank_line(out, src, line, n);
    p = next;
    if (!eol)
      return EX_OK;
  }
}

void ex_magic_result_free(ex_magic_result_t *r) {
  free(r->launch_call);
  free(r->launch_opts);
  free(r->timeit_stmt);
  free(r->code_buf);
  memset(r, 0, sizeof *r);
}
