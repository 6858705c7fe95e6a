/*
 * ex_magic.c — magic lines. See ex_magic.h for the list.
 */
#define _GNU_SOURCE
#include "ex_magic.h"
#include "nbf_param.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
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
  out->launch_opts = strndup(p, (size_t)(end - p));
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

int ex_magic_run(const char *src, ex_flags_t *flags, const ex_cell_state_t *st,
                 ex_magic_result_t *out, const char **ename, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  *ename = "UsageError";
  const char *p = src;
  for (;;) {
    const char *line = p;
    while (*line == ' ' || *line == '\t' || *line == '\n' || *line == '\r')
      line++;
    if (*line != '%') {
      out->code = p;
      return 0;
    }
    const char *eol = strchr(line, '\n');
    size_t n = eol ? (size_t)(eol - line) : strlen(line);
    const char *next = eol ? eol + 1 : line + n;
    size_t nl = 1;
    while (nl < n && (isalnum((unsigned char)line[nl]) || line[nl] == '%' || line[nl] == '_'))
      nl++;
    const char *args = line + nl;
    size_t an = n - nl;
    if (!strncmp(line, "%%cuda", 6) && nl == 6) {
      out->cuda = 1;
      out->code = next;
      return 0;
    } else if (nl == 7 && !strncmp(line, "%launch", 7)) {
      *ename = "LaunchError";
      if (out->launch_call) {
        snprintf(err, errlen, "only one %%launch per cell");
        return -1;
      }
      if (parse_launch(args, an, out, err, errlen))
        return -1;
      *ename = "UsageError";
    } else if (nl == 7 && !strncmp(line, "%timeit", 7)) {
      if (out->timeit_stmt) {
        snprintf(err, errlen, "only one %%timeit per cell");
        return -1;
      }
      if (parse_timeit(args, an, out, err, errlen))
        return -1;
    } else if (nl == 7 && !strncmp(line, "%cflags", 7)) {
      set_flags(&flags->cflags, args, an, "extra compiler flags");
    } else if (nl == 8 && !strncmp(line, "%ldflags", 8)) {
      set_flags(&flags->ldflags, args, an, "extra linker flags");
    } else if (nl == 4 && !strncmp(line, "%env", 4)) {
      char *a = strndup(skip_ws(args), an - (size_t)(skip_ws(args) - args));
      if (!a)
        return -1;
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
    } else if (nl == 4 && !strncmp(line, "%who", 4)) {
      who_ctx_t w = {0};
      ex_cell_each_name(st, who_print, &w);
      if (!w.any)
        printf("Nothing defined yet.\n");
    } else if (nl == 8 && !strncmp(line, "%lsmagic", 8)) {
      printf("Line magics: %%launch %%timeit %%cflags %%ldflags %%env %%who %%lsmagic\n"
             "Cell magics: %%%%cuda\n");
    } else {
      snprintf(
          err, errlen,
          "unknown magic '%.*s'. Available: %%launch, %%timeit, %%cflags, %%ldflags, %%env, %%who, "
          "%%lsmagic, %%%%cuda (first line only)",
          (int)nl, line);
      return -1;
    }
    p = next;
    if (!eol) {
      out->code = p;
      return 0;
    }
  }
}

void ex_magic_result_free(ex_magic_result_t *r) {
  free(r->launch_call);
  free(r->launch_opts);
  free(r->timeit_stmt);
  memset(r, 0, sizeof *r);
}
