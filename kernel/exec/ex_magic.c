/*
 * ex_magic.c — magic lines. See ex_magic.h for the list.
 */
#define _GNU_SOURCE
#include "ex_magic.h"
#include "nbf_param.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbf_util.h"

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

/* The -n/-r options of `%timeit` and `%%timeit` (IPython's spelling:
 * `-n 5` or `-n5`) from [*pp, end); *pp moves past them. Any other
 * `-LETTERS` word is refused (a UsageError, as IPython's getopt). */
static int parse_timeit_opts(const char **pp, const char *end, const char *magic,
                             ex_magic_result_t *out, char *err, size_t errlen) {
  const char *p = *pp;
  out->timeit_repeat = 7;
  for (;;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (end - p < 2 || p[0] != '-' || !isalpha((unsigned char)p[1]))
      break;
    const char *w = p + 1;
    while (w < end && isalnum((unsigned char)*w))
      w++;
    if (w < end && !isspace((unsigned char)*w))
      break; /* `-x;`, `-f(x)`: a statement */
    char opt = p[1];
    if (opt != 'n' && opt != 'r') {
      snprintf(err, errlen, "%s: unknown option -%.*s (options: -n LOOPS, -r RUNS)", magic,
               (int)(w - p - 1), p + 1);
      return -1;
    }
    const char *v = p + 2;
    while (v < end && (*v == ' ' || *v == '\t'))
      v++;
    char *stop;
    long n = strtol(v, &stop, 10);
    if (stop == v || n < 1 || n > 1000000000L || (stop < end && !isspace((unsigned char)*stop))) {
      snprintf(err, errlen, "%s: -%c needs a positive number, e.g. %s -%c 100 f(x)", magic, opt,
               magic, opt);
      return -1;
    }
    if (opt == 'n')
      out->timeit_loops = n;
    else
      out->timeit_repeat = (int)(n > 1000 ? 1000 : n);
    p = stop;
  }
  *pp = p;
  return 0;
}

/* `%timeit [-n N] [-r R] STATEMENT` */
static int parse_timeit(const char *args, size_t n, ex_magic_result_t *out, char *err,
                        size_t errlen) {
  const char *p = args, *end = args + n;
  if (parse_timeit_opts(&p, end, "%timeit", out, err, errlen))
    return -1;
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

/* The FLAGS of `%cflags`/`%ldflags` (args, n bytes): blanks trimmed,
 * into *out (caller frees; NULL for none). 1 for `--clear`, 0 else, -1
 * when memory ran out. */
static int flags_arg(const char *args, size_t n, char **out) {
  const char *p = skip_ws(args);
  size_t len = n - (size_t)(p - args);
  while (len && isspace((unsigned char)p[len - 1]))
    len--;
  *out = NULL;
  if (len == 7 && !strncmp(p, "--clear", 7))
    return 1;
  if (len && !(*out = strndup(p, len)))
    return -1;
  return 0;
}

/* %cflags / %ldflags: set (test-compiling a trivial unit with the new
 * flags first, so flags the compiler or linker rejects are refused now,
 * not on every later cell), clear, or show. */
static ex_result_t set_flags(ex_flags_t *f, int ld, const char *args, size_t n, char *err,
                             size_t errlen) {
  char **slot = ld ? &f->ldflags : &f->cflags;
  const char *what = ld ? "extra linker flags" : "extra compiler flags";
  char *v;
  int clear = flags_arg(args, n, &v);
  if (clear < 0) {
    snprintf(err, errlen, "out of memory");
    return EX_ERR_NOMEM;
  }
  if (v && f->check) {
    char why[1024] = "";
    if (f->check(f->check_ctx, ld ? f->cflags : v, ld ? v : f->ldflags, why, sizeof why)) {
      snprintf(err, errlen, "%s %s: the %s rejects these flags, so they are not set (now: %s):\n%s",
               ld ? "%ldflags" : "%cflags", v, ld ? "linker" : "compiler",
               *slot && **slot ? *slot : "(none)", why);
      free(v);
      return EX_ERR_USAGE;
    }
  }
  if (clear || v) {
    free(*slot);
    *slot = v;
  }
  printf("%s for the next cells: %s\n", what, *slot && **slot ? *slot : "(none)");
  return EX_OK;
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

/* `%time STATEMENT`: the statement runs once, timed (ex_timeit_once). */
static ex_result_t magic_time(magic_ctx_t *c, const char *args, size_t an) {
  const char *p = skip_ws(args), *end = args + an;
  while (end > p && isspace((unsigned char)end[-1]))
    end--;
  if (p == end || (p[0] == '-' && end - p > 1 && isalpha((unsigned char)p[1]) &&
                   (end - p == 2 || isspace((unsigned char)p[2])))) {
    snprintf(c->err, c->errlen,
             p == end ? "%%time needs a statement, e.g. %%time train(10)"
                      : "%%time takes no options: %%time STATEMENT, e.g. %%time train(10)");
    return EX_ERR_USAGE;
  }
  c->out->timeit_stmt = strndup(p, (size_t)(end - p));
  c->out->timeit_loops = 1;
  c->out->timeit_repeat = 1;
  c->out->time_once = 1;
  return c->out->timeit_stmt ? EX_OK : EX_ERR_NOMEM;
}

static ex_result_t magic_cflags(magic_ctx_t *c, const char *args, size_t an) {
  return set_flags(c->flags, 0, args, an, c->err, c->errlen);
}

static ex_result_t magic_ldflags(magic_ctx_t *c, const char *args, size_t an) {
  return set_flags(c->flags, 1, args, an, c->err, c->errlen);
}

/* A magic that takes no arguments: `%who x` is a UsageError. */
static ex_result_t no_args(magic_ctx_t *c, const char *name, const char *args, size_t an) {
  const char *p = skip_ws(args);
  size_t len = an - (size_t)(p - args);
  while (len && isspace((unsigned char)p[len - 1]))
    len--;
  if (!len)
    return EX_OK;
  snprintf(c->err, c->errlen, "%s takes no arguments (got '%.*s')", name, (int)len, p);
  return EX_ERR_USAGE;
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
  size_t name_len = eq ? (size_t)(eq - a) : al;
  int bad = eq && !name_len;
  for (size_t i = 0; i < name_len && !bad; i++)
    bad = isspace((unsigned char)a[i]);
  if (bad) {
    snprintf(c->err, c->errlen,
             "%%env: '%s' is not NAME or NAME=VALUE (a name without blanks, e.g. %%env "
             "OMP_NUM_THREADS=4)",
             a);
    free(a);
    return EX_ERR_USAGE;
  }
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
  EX_CHECK(no_args(c, "%who", args, an));
  who_ctx_t w = {0};
  ex_cell_each_name(c->st, who_print, &w);
  if (!w.any)
    printf("Nothing defined yet.\n");
  return EX_OK;
}

static ex_result_t magic_lsmagic(magic_ctx_t *c, const char *args, size_t an) {
  EX_CHECK(no_args(c, "%lsmagic", args, an));
  printf("Line magics: %%launch %%time %%timeit %%cflags %%ldflags %%env %%who %%lsmagic "
         "%%ranks %%autoranks\n"
         "Cell magics: %%%%cuda %%%%timeit %%%%writefile %%%%file %%%%ranks\n"
         "Help: NAME? (NAME?? for its source), %%MAGIC?\n");
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
    {"%time", "UsageError", offsetof(ex_magic_result_t, timeit_stmt), magic_time},
    {"%cflags", "UsageError", -1, magic_cflags},
    {"%ldflags", "UsageError", -1, magic_ldflags},
    {"%env", "UsageError", -1, magic_env},
    {"%who", "UsageError", -1, magic_who},
    {"%lsmagic", "UsageError", -1, magic_lsmagic},
};

/* What `%timeit?` shows: each magic's usage, as IPython's docstrings. */
static const struct {
  const char *name, *help;
} helps[] = {
    {"%launch", "%launch CALL [key=value ...]\n\nFork num_processes workers that run CALL, a C "
                "call expression type-checked against its declaration (Accelerate's "
                "notebook_launcher). The cell's last line. Options: num_processes=N "
                "mixed_precision=no|fp16|bf16 use_port=29500 master_addr node_rank num_nodes "
                "max_restarts monitor_interval log_line_prefix_template rdzv_id rdzv_endpoint "
                "rdzv_timeout."},
    {"%time", "%time STATEMENT\n\nRun STATEMENT once (compiled like function code, -O2) and "
              "print IPython's CPU and wall times:\nCPU times: user 1.2 ms, sys: 0 ns, total: 1.2 "
              "ms\nWall time: 1.5 ms"},
    {"%timeit", "%timeit [-n N] [-r R] STATEMENT\n\nTime STATEMENT as IPython's %timeit: R runs "
                "(7) of N loops (chosen so a run takes at least 0.2 s); prints the mean and "
                "standard deviation per loop."},
    {"%%timeit", "%%timeit [-n N] [-r R] [SETUP]\n<statements>\n\nTime the cell's other lines "
                 "as %timeit times a statement; SETUP (C code on the magic's line) runs once "
                 "first."},
    {"%cflags", "%cflags [FLAGS | --clear]\n\nExtra compiler flags for later cells (-O3 "
                "-march=native). A trivial unit is compiled with them first: flags the compiler "
                "rejects are a UsageError and are not set. Without FLAGS: show them."},
    {"%ldflags", "%ldflags [FLAGS | --clear]\n\nExtra linker flags for later cells (-lsqlite3), "
                 "checked by linking a trivial unit first."},
    {"%env", "%env [NAME[=VALUE]]\n\nShow all environment variables, one, or set one (workers "
             "inherit it)."},
    {"%who", "%who\n\nList the functions, globals, types and macros defined so far."},
    {"%lsmagic", "%lsmagic\n\nList the magics."},
    {"%%cuda", "%%cuda\n\nThe cell is CUDA C++, compiled by nvcc."},
    {"%%writefile", "%%writefile [-a] FILE\n<text>\n\nWrite the cell's other lines to FILE "
                    "(-a: append), as IPython's %%writefile. %%file is the same."},
    {"%%file", "%%file [-a] FILE\n<text>\n\nThe same as %%writefile."},
    /* run by ex_ranks.c before the magics above (README, "Interactive ranks") */
    {"%ranks", "%ranks start num_processes=N [%launch's options] | stop | restart | status | "
               "pull NAME [from=R] | push NAME [to=RANKS]\n\nRank workers that stay: forked "
               "as %launch forks, they run %%ranks cells. status: per rank pid, device, RSS and "
               "state (idle, running cell [k], cut inside a collective, exited with its cause) "
               "from its state record. pull/push copy a global or an acc_keep block between "
               "a rank and the kernel (sizes must match)."},
    {"%%ranks", "%%ranks [all | 0 | 1,3 | 0-2] [--group]\n<C code>\n\nCompile the cell once "
                "and run it on those ranks (default all); output prefixed [rank k] live, or "
                "with --group one block per rank at the end. An interrupt mid-collective "
                "rebuilds the process groups at their next collective."},
    {"%autoranks", "%autoranks on|off\n\nSend every later cell to the ranks (ipyparallel's "
                   "%autopx)."},
};

const char *ex_magic_help(const char *name) {
  for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
    if (!strcmp(helps[i].name, name))
      return helps[i].help;
  return NULL;
}

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
           "unknown magic '%.*s'. Available: %%launch, %%time, %%timeit, %%cflags, %%ldflags, "
           "%%env, %%who, %%lsmagic, %%ranks, %%autoranks; cell magics (first line): %%%%cuda, "
           "%%%%timeit, %%%%writefile, %%%%file, %%%%ranks",
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

/* `%%writefile [-a] FILE` (alias `%%file`), IPython's: the cell's other
 * lines (with a final newline) go to FILE, created, replaced or (-a)
 * appended to; prints `Writing FILE`, `Overwriting FILE` or `Appending
 * to FILE`. FILE may be quoted; `~/` is the home directory. */
static ex_result_t cell_writefile(magic_ctx_t *c, const char *magic, const char *args, size_t an,
                                 const char *body, const char **ename) {
  const char *p = args, *end = args + an;
  int append = 0;
  for (;;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    const char *w = p;
    while (w < end && !isspace((unsigned char)*w))
      w++;
    if (p >= end || *p != '-' || w - p < 2)
      break;
    if ((w - p == 2 && p[1] == 'a') || (w - p == 8 && !strncmp(p, "--append", 8))) {
      append = 1;
      p = w;
      continue;
    }
    snprintf(c->err, c->errlen, "%s: unknown option %.*s (usage: %s [-a] FILE)", magic,
             (int)(w - p), p, magic);
    return EX_ERR_USAGE;
  }
  while (end > p && isspace((unsigned char)end[-1]))
    end--;
  if (end - p >= 2 && (*p == '"' || *p == '\'') && end[-1] == *p)
    p++, end--;
  if (p >= end) {
    snprintf(c->err, c->errlen, "%s needs a file name: %s [-a] FILE", magic, magic);
    return EX_ERR_USAGE;
  }
  const char *home = end - p >= 2 && p[0] == '~' && p[1] == '/' ? nbf_env_get("HOME") : NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s%.*s", home ? home : "", (int)(end - p - (home ? 1 : 0)),
           p + (home ? 1 : 0));
  printf("%s %.*s\n", access(path, F_OK) ? "Writing" : append ? "Appending to" : "Overwriting",
         (int)(end - p), p);
  size_t bl = strlen(body);
  FILE *f = fopen(path, append ? "a" : "w");
  int bad = !f || fwrite(body, 1, bl, f) != bl || (bl && body[bl - 1] != '\n' && fputc('\n', f) < 0);
  if (f && fclose(f))
    bad = 1;
  if (bad) {
    *ename = "OSError";
    snprintf(c->err, c->errlen, "[Errno %d] %s: '%s'", errno, NBF_STRERROR(errno), path);
    return EX_ERR_USAGE;
  }
  return EX_OK;
}

/* `%%timeit [-n N] [-r R] [SETUP]`: the cell's other lines are the timed
 * statement (a block); SETUP, on the magic's line, runs first as the
 * cell's own code (its globals are there for the timed block). */
static ex_result_t cell_timeit(magic_ctx_t *c, const char *src, const char *line, size_t n) {
  const char *p = line + 8, *end = line + n;
  if (parse_timeit_opts(&p, end, "%%timeit", c->out, c->err, c->errlen))
    return EX_ERR_USAGE;
  const char *body = line[n] ? line + n + 1 : line + n;
  if (!body[strspn(body, " \t\r\n")]) {
    snprintf(c->err, c->errlen,
             "%%%%timeit needs the statements to time on the lines below it, e.g.\n"
             "%%%%timeit -n 100\nsq(3);");
    return EX_ERR_USAGE;
  }
  if (asprintf(&c->out->timeit_stmt, "{%s\n}", body) < 0) {
    c->out->timeit_stmt = NULL;
    return EX_ERR_NOMEM;
  }
  /* the setup stays in the code, at its columns; the body is the loop's */
  memset(c->out->code_buf + (line - src), ' ', (size_t)(p - line));
  c->out->code_buf[body - src] = 0;
  return EX_OK;
}

/* A cell magic on the cell's first line (`line`, n bytes, its name nl
 * bytes): 1 when it was one (its result in *r), else 0. */
static int cell_magic(magic_ctx_t *c, const char *src, const char *line, size_t n, size_t nl,
                      const char **ename, ex_result_t *r) {
  const char *body = line[n] ? line + n + 1 : line + n;
  if ((nl == 11 && !strncmp(line, "%%writefile", 11)) || (nl == 6 && !strncmp(line, "%%file", 6))) {
    char magic[16];
    snprintf(magic, sizeof magic, "%.*s", (int)nl, line);
    *r = cell_writefile(c, magic, line + nl, n - nl, body, ename);
    c->out->code_buf[0] = 0; /* nothing to compile */
    return 1;
  }
  if (nl == 8 && !strncmp(line, "%%timeit", 8)) {
    *r = cell_timeit(c, src, line, n);
    return 1;
  }
  return 0;
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
    ex_result_t cr;
    if (line == src + strspn(src, " \t\r\n") && cell_magic(&c, src, line, n, nl, ename, &cr))
      return cr;
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
