/*
 * ex_ranks.c — %ranks, %%ranks and %autoranks (see ex_ranks.h).
 */
#define _GNU_SOURCE
#include "ex_ranks.h"

#include <ctype.h>
#include <dlfcn.h>
#include <jansson.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_events.h"
#include "ex_magic.h"
#include "ln_ranks.h"
#include "nbf_util.h"
#include "nbf_wire.h"
#include "nbfork.h"

struct ex_ranks {
  ln_ranks_t *group;
  int autoranks;
  int starts;              /* %ranks start/restart so far: the run id's suffix */
  int cell_active;         /* a %%ranks cell is being compiled and run        */
  unsigned char *targets;  /* its local ranks                                 */
  int group_output;        /* its --group                                     */
};

/* What the runner below asks of the ranks (ex_run.h). */
static const struct ex_run_ranks g_hooks = {ex_ranks_running, ex_ranks_cell_active,
                                             ex_ranks_run_loaded, ex_ranks_loaded};

static struct ex_ranks *state(ex_t *ex) {
  if (!ex->ranks) {
    ex->ranks = calloc(1, sizeof *ex->ranks);
    ex->ranks_hooks = ex->ranks ? &g_hooks : NULL;
  }
  return ex->ranks;
}

int ex_ranks_cell_active(const ex_t *ex) {
  return ex->ranks && ex->ranks->cell_active;
}

static int usage(const char *fmt, const char *arg) {
  char ev[512];
  snprintf(ev, sizeof ev, fmt, arg ? arg : "");
  return ex_event_reply_error("UsageError", ev, NULL);
}

static int reply_ln_error(ln_error_t *le) {
  int r = ex_event_reply_error(le->ename, le->evalue, le->traceback);
  ln_error_free(le);
  return r;
}

/* ---------------------------------------------------------- hooks */

static void *keep_make(const char *name, size_t size) {
  return acc_keep(name, size, NULL);
}

/* ln_ranks_hooks_t.sym_find, in a worker: a variable of a cell in memory
 * (`v__cTAG`) at the address the executor had when it forked it. */
static ex_t *g_ranks_ex;
static void *mem_find(const char *sym, size_t *size) {
  char name[300], found[300];
  const char *tag = strstr(sym, "__c");
  void *addr = NULL;
  if (!g_ranks_ex || !tag || (size_t)(tag - sym) >= sizeof name)
    return NULL;
  snprintf(name, sizeof name, "%.*s", (int)(tag - sym), sym);
  /* the newest definition only: the one whose symbol the kernel sent */
  if (!ex_cell_find_symbol(g_ranks_ex->cells, name, found, sizeof found) || strcmp(found, sym) ||
      !ex_cell_find_place(g_ranks_ex->cells, name, &addr, size))
    return NULL;
  return addr;
}

/* A rank's display event to the kernel; its execute_result (a cell's
 * last expression) says which rank it comes from. */
static int rank_event(int rank, const char *line, size_t len) {
  if (len < 40 || !memmem(line, len, "\"execute_result\"", 16))
    return ex_event_send_raw(line, len);
  json_t *ev = json_loadb(line, len, 0, NULL);
  json_t *data = ev ? json_object_get(ev, "data") : NULL;
  const char *plain = json_string_value(json_object_get(data, "text/plain"));
  if (!plain) {
    json_decref(ev);
    return ex_event_send_raw(line, len);
  }
  char *text = nbf_xprintf("[rank %d] %s", rank, plain);
  json_object_set_new(data, "text/plain", json_string(text ? text : plain));
  free(text);
  return ex_event_send(ev);
}

/* -------------------------------------------------- rank selection */

/* "all", "3", "1,3", "0-2", "0,2-3" (global ranks) into local flags
 * t[0..n): 0, or -1 with err. Ranks of other nodes are left out. */
static int parse_targets(const char *spec, const ln_ranks_t *g, unsigned char *t, char *err,
                         size_t errlen) {
  int n = ln_ranks_count(g), first = ln_ranks_first(g);
  int world = ln_ranks_options(g)->num_nodes * n;
  memset(t, 0, (size_t)n);
  if (!spec || !*spec || !strcmp(spec, "all")) {
    memset(t, 1, (size_t)n);
    return 0;
  }
  for (const char *p = spec; *p;) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p)
      goto bad;
    if (*end == '-') {
      const char *q = end + 1;
      b = strtol(q, &end, 10);
      if (end == q)
        goto bad;
    }
    if (a < 0 || b < a || b >= world) {
      snprintf(err, errlen, "ranks '%s': the ranks are 0-%d", spec, world - 1);
      return -1;
    }
    for (long k = a; k <= b; k++)
      if (k >= first && k < first + n)
        t[k - first] = 1;
    if (*end == ',')
      end++;
    else if (*end)
      goto bad;
    p = end;
  }
  return 0;
bad:
  snprintf(err, errlen,
           "ranks '%s' not understood: all, a rank (0), a list (1,3) or a range (0-2)", spec);
  return -1;
}

/* ------------------------------------------------------- %%ranks */

/* The words of the %%ranks line (after the name): targets and --group. */
static int parse_cell_line(ex_t *ex, const char *args, size_t n, char *err, size_t errlen) {
  struct ex_ranks *rs = ex->ranks;
  char *a = strndup(args, n), *save = NULL, *spec = NULL;
  rs->group_output = 0;
  for (char *w = strtok_r(a, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
    if (!strcmp(w, "--group"))
      rs->group_output = 1;
    else if (w[0] == '-' && !isdigit((unsigned char)w[1])) {
      snprintf(err, errlen, "%%%%ranks: unknown option '%s' (--group)", w);
      free(a);
      return -1;
    } else
      spec = w;
  }
  free(rs->targets);
  rs->targets = malloc((size_t)ln_ranks_count(rs->group));
  int rc = rs->targets ? parse_targets(spec, rs->group, rs->targets, err, errlen) : -1;
  free(a);
  return rc;
}

/* A %%ranks cell: `body` is the cell with its %%ranks line blanked. */
static int run_cell(ex_t *ex, const char *body, int count) {
  ex_magic_result_t m;
  char err[512] = "";
  const char *ename = "UsageError";
  if (ex_magic_run(body, &ex->flags, ex->cells, &m, &ename, err, sizeof err) != EX_OK) {
    ex_magic_result_free(&m);
    return ex_event_reply_error(ename, err, NULL);
  }
  int rc;
  const char *p = m.code + strspn(m.code, " \t\r\n");
  if (m.launch_call || m.timeit_stmt)
    rc = usage("%s cannot run in a %%%%ranks cell: the ranks run the cell's code itself",
               m.launch_call ? "%launch" : "%timeit");
  else if (!*p)
    rc = ex_event_reply_ok(NULL);
  else if (m.cuda && !ex->tc.nvcc)
    rc = ex_event_reply_error("CompileError", "%%cuda cell: no CUDA compiler (nvcc) found", NULL);
  else {
    ex->ranks->cell_active = 1;
    rc = ex_run_code(ex, &m, count);
    ex->ranks->cell_active = 0;
  }
  ex_magic_result_free(&m);
  return rc;
}

/* `%%ranks ...` first line (at `line`, n bytes) then the cell; line
 * NULL: the whole cell runs on every rank (%autoranks). */
static int ranks_cell(ex_t *ex, const char *code, const char *line, size_t n, int count) {
  struct ex_ranks *rs = ex->ranks;
  if (!rs->group)
    return usage("no rank workers: run %%ranks start num_processes=N first%s", NULL);
  char err[512] = "";
  if (parse_cell_line(ex, line ? line + 7 : "", line ? n - 7 : 0, err, sizeof err))
    return ex_event_reply_error("UsageError", err, NULL);
  char *body = strdup(code);
  if (!body)
    return ex_event_reply_error("MemoryError", "out of memory", NULL);
  if (line)
    memset(body + (line - code), ' ', n); /* lines keep their numbers */
  int rc = run_cell(ex, body, count);
  free(body);
  return rc;
}

/* Where the loaded function `fn` comes from: its object's path and its
 * symbol name. 0, or -1. */
static int where(void (*fn)(void), Dl_info *info) {
  return fn && dladdr((void *)fn, info) && info->dli_fname && info->dli_sname ? 0 : -1;
}

int ex_ranks_run_loaded(ex_t *ex, int count, void (*run)(void)) {
  struct ex_ranks *rs = ex->ranks;
  Dl_info info;
  if (where(run, &info))
    return ex_event_reply_error("LinkError", "the cell's run function was not found", NULL);
  ln_error_t le;
  if (ln_ranks_run(rs->group, info.dli_fname, info.dli_sname, count, rs->targets,
                   rs->group_output, &le) == 0)
    return ex_event_reply_ok(NULL);
  return reply_ln_error(&le);
}

void ex_ranks_loaded(ex_t *ex, void (*run)(void)) {
  struct ex_ranks *rs = ex->ranks;
  Dl_info info;
  if (!rs || !rs->group || rs->cell_active || where(run, &info))
    return;
  ln_error_t le;
  if (ln_ranks_load(rs->group, info.dli_fname, &le) == 0)
    return;
  fprintf(stderr, "Warning: the ranks could not load this cell's definitions: %s\n", le.evalue);
  fflush(stderr);
  ln_error_free(&le);
}

int ex_ranks_running(const ex_t *ex) {
  return ex->ranks && ex->ranks->group;
}

void ex_ranks_shutdown(ex_t *ex) {
  if (ex->ranks)
    ln_ranks_stop(&ex->ranks->group);
}

/* ----------------------------------------------- start, stop, status */

static int start(ex_t *ex, const ln_options_t *o) {
  struct ex_ranks *rs = ex->ranks;
  static const int private_fds[] = {NBF_WIRE_FD_REQUESTS};
  ln_context_t ctx = {NULL, ex_run_interrupt_flag(), ex->cuda_cell > 0 ? ex->cuda_cell : 0,
                      private_fds, 1, NULL, NULL, ex->cuda_by};
  ln_ranks_hooks_t hooks = {acc_keep_find, keep_make, rank_event, mem_find};
  g_ranks_ex = ex;
  ln_error_t le;
  if (ln_ranks_start(&rs->group, o, &ctx, &hooks, rs->starts++, &le))
    return reply_ln_error(&le);
  int n = ln_ranks_count(rs->group), first = ln_ranks_first(rs->group);
  printf("Started %d rank worker%s (ranks %d-%d): %%%%ranks cells run on them.\n", n,
         n == 1 ? "" : "s", first, first + n - 1);
  if (o->num_nodes > 1) /* one group: the same cells must run on every node */
    printf("They are node %d of %d in one process group of world size %d: run the same "
           "%%%%ranks cells, in the same order, in every node's notebook.\n",
           o->node_rank, o->num_nodes, o->num_nodes * n);
  fflush(stdout);
  return ex_event_reply_ok(NULL);
}

static int magic_start(ex_t *ex, const char *args) {
  struct ex_ranks *rs = ex->ranks;
  if (rs->group)
    return usage("the rank workers are running: %%ranks stop or %%ranks restart first%s", NULL);
  char err[512] = "";
  ln_options_t o;
  ln_options_init(&o);
  if (ln_options_parse(args, &o, err, sizeof err))
    return ex_event_reply_error("LaunchError", err,
                                "Options of %ranks start are those of %launch: num_processes=N "
                                "[mixed_precision=no|fp16|bf16] [use_port=29500] "
                                "[master_addr=127.0.0.1] [node_rank=0] [num_nodes=1] "
                                "[rdzv_id=ID] [rdzv_conf=secret=TEXT] [rdzv_timeout=300] "
                                "[log_line_prefix_template='[rank {rank}] ']");
  return start(ex, &o);
}

static int magic_restart(ex_t *ex) {
  struct ex_ranks *rs = ex->ranks;
  if (!rs->group)
    return usage("no rank workers to restart: %%ranks start num_processes=N%s", NULL);
  ln_options_t o = *ln_ranks_options(rs->group);
  ln_ranks_stop(&rs->group);
  return start(ex, &o);
}

static int magic_stop(ex_t *ex) {
  struct ex_ranks *rs = ex->ranks;
  if (!rs->group) {
    printf("No rank workers are running.\n");
    return ex_event_reply_ok(NULL);
  }
  int n = ln_ranks_count(rs->group);
  ln_ranks_stop(&rs->group);
  rs->autoranks = 0;
  printf("Stopped %d rank worker%s.\n", n, n == 1 ? "" : "s");
  return ex_event_reply_ok(NULL);
}

static int magic_status(ex_t *ex) {
  struct ex_ranks *rs = ex->ranks;
  if (!rs->group)
    printf("No rank workers (%%ranks start num_processes=N starts them).\n");
  else
    ln_ranks_status(rs->group, stdout);
  fflush(stdout);
  return ex_event_reply_ok(NULL);
}

/* ---------------------------------------------------- pull, push */

/* A named value in the executor: a global (its assembler name, address,
 * size, declaration) or an acc_keep block. */
typedef struct {
  const char *name;
  char kind[8]; /* "sym" or "keep" */
  char sym[300];
  void *addr;
  size_t size;
  ex_cell_name_t def;
  size_t have; /* pull into keep: the kernel's block size, or 0 */
  int pointer;  /* a global holding a pointer: only its acc_keep block can go */
} value_t;

/* Resolve `name`: 0, or -1 after replying (*rc). */
static int resolve(ex_t *ex, const char *name, value_t *v, int *rc) {
  memset(v, 0, sizeof *v);
  v->name = name;
  if (!ex_cell_find(ex->cells, name, &v->def)) {
    snprintf(v->kind, sizeof v->kind, "keep");
    v->addr = acc_keep_find(name, &v->size);
    return 0;
  }
  if (strcmp(v->def.kind, "variable") != 0) {
    *rc = usage("'%s' is not a global variable: pull and push copy a global's bytes or an "
                "acc_keep block",
                name);
    return -1;
  }
  if (strchr(v->def.decl, '*')) { /* `float *w = acc_keep("w", ...)`: the block */
    snprintf(v->kind, sizeof v->kind, "keep");
    v->addr = acc_keep_find(name, &v->size);
    v->pointer = 1;
    return 0;
  }
  snprintf(v->kind, sizeof v->kind, "sym");
  const ElfW(Sym) *s = NULL;
  Dl_info info;
  if (ex_cell_find_symbol(ex->cells, name, v->sym, sizeof v->sym) &&
      ex_cell_find_place(ex->cells, name, &v->addr, &v->size))
    return 0; /* a cell in memory (ex_memcells.h): no symbol names it */
  if (v->sym[0])
    v->addr = dlsym(RTLD_DEFAULT, v->sym);
  if (!v->addr || !dladdr1(v->addr, &info, (void **)&s, RTLD_DL_SYMENT) || !s) {
    *rc = usage("'%s' is not loaded in the kernel", name);
    return -1;
  }
  v->size = (size_t)s->st_size;
  return 0;
}

/* pull's destination: the executor's value when the size matches. */
static void *pull_dest(void *ctx, size_t n) {
  value_t *v = ctx;
  if (!strcmp(v->kind, "sym"))
    return n == v->size ? v->addr : NULL;
  if (v->addr) {
    v->have = v->size;
    return n == v->size ? v->addr : NULL;
  }
  v->size = n;
  return v->addr = acc_keep(v->name, n, NULL);
}

static int mismatch(const value_t *v, int rank, size_t theirs, const char *dir) {
  char ev[800];
  char what[400];
  if (!strcmp(v->kind, "sym"))
    snprintf(what, sizeof what, "%s (%s, %s)", v->name, v->def.decl, v->def.label);
  else
    snprintf(what, sizeof what, "acc_keep block '%s'", v->name);
  snprintf(ev, sizeof ev,
           "%s: size mismatch: rank %d's '%s' is %zu bytes, the kernel's %s is %zu bytes", dir,
           rank, v->name, theirs, what, strcmp(v->kind, "sym") ? v->have : v->size);
  return ex_event_reply_error("ValueError", ev, NULL);
}

/* The words NAME [key=R] of pull/push; *opt the value of key, or NULL. */
static int name_and_opt(const char *args, const char *key, char *name, size_t nn, char **opt) {
  *opt = NULL;
  char *a = strdup(args), *save = NULL;
  int rc = -1;
  size_t kl = strlen(key);
  for (char *w = strtok_r(a, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
    if (!strncmp(w, key, kl) && w[kl] == '=')
      *opt = strdup(w + kl + 1);
    else if (!name[0] && (isalpha((unsigned char)*w) || *w == '_') && strlen(w) < nn) {
      snprintf(name, nn, "%s", w);
      rc = 0;
    } else {
      rc = -1;
      break;
    }
  }
  free(a);
  return rc;
}

static int magic_pull(ex_t *ex, const char *args) {
  struct ex_ranks *rs = ex->ranks;
  char name[256] = "", *from = NULL;
  if (name_and_opt(args, "from", name, sizeof name, &from))
    return usage("usage: %%ranks pull NAME [from=RANK]%s", NULL);
  int rank = from ? atoi(from) : 0, local = rank - ln_ranks_first(rs->group);
  char said[32];
  snprintf(said, sizeof said, "%.20s", from ? from : "0");
  free(from);
  if (local < 0 || local >= ln_ranks_count(rs->group))
    return usage("pull: rank %s is not one of this node's ranks", said);
  value_t v;
  int rc;
  if (resolve(ex, name, &v, &rc))
    return rc;
  int64_t t0 = nbf_now_ms();
  size_t n = 0;
  ln_error_t le;
  int r = ln_ranks_pull(rs->group, local, v.kind, strcmp(v.kind, "sym") ? name : v.sym, pull_dest,
                        &v, &n, &le);
  if (r == 1)
    return mismatch(&v, rank, n, "pull");
  if (r < 0 && le.evalue && strstr(le.evalue, "not found")) {
    ln_error_free(&le);
    char ev[1200];
    if (v.pointer)
      snprintf(ev, sizeof ev,
               "'%s' (%s) holds a pointer, whose value means nothing in another process, and "
               "rank %d has no acc_keep block named '%s' to copy instead: keep the data with "
               "acc_keep(\"%s\", size, NULL), or in an array global",
               name, v.def.decl, rank, name, name);
    else
      snprintf(ev, sizeof ev, "rank %d has no global or acc_keep block named '%s'", rank, name);
    return ex_event_reply_error("NameError", ev, NULL);
  }
  if (r < 0)
    return reply_ln_error(&le);
  printf("pulled %s (%zu bytes) from rank %d in %lld ms\n", name, n, rank,
         (long long)(nbf_now_ms() - t0));
  return ex_event_reply_ok(NULL);
}

static int magic_push(ex_t *ex, const char *args) {
  struct ex_ranks *rs = ex->ranks;
  char name[256] = "", *to = NULL, err[300] = "";
  if (name_and_opt(args, "to", name, sizeof name, &to))
    return usage("usage: %%ranks push NAME [to=RANKS]%s", NULL);
  unsigned char *t = malloc((size_t)ln_ranks_count(rs->group));
  int bad = !t || parse_targets(to, rs->group, t, err, sizeof err);
  free(to);
  value_t v;
  int rc;
  if (bad) {
    free(t);
    return ex_event_reply_error("UsageError", err, NULL);
  }
  if (resolve(ex, name, &v, &rc)) {
    free(t);
    return rc;
  }
  if (!v.addr) {
    free(t);
    return usage(v.pointer ? "'%s' holds a pointer and the kernel has no acc_keep block of that "
                             "name to copy instead"
                           : "the kernel has no global or acc_keep block named '%s'",
                 name);
  }
  int64_t t0 = nbf_now_ms();
  ln_error_t le;
  int r = ln_ranks_push(rs->group, t, v.kind, strcmp(v.kind, "sym") ? name : v.sym, v.addr,
                        v.size, &le);
  free(t);
  if (r < 0 && !strcmp(le.ename, "ValueError")) {
    size_t theirs = 0;
    int rank = 0;
    sscanf(le.evalue, "size mismatch: rank %d's %*s is %zu", &rank, &theirs);
    ln_error_free(&le);
    v.have = v.size;
    return mismatch(&v, rank, theirs, "push");
  }
  if (r < 0)
    return reply_ln_error(&le);
  printf("pushed %s (%zu bytes) in %lld ms\n", name, v.size, (long long)(nbf_now_ms() - t0));
  return ex_event_reply_ok(NULL);
}

/* ------------------------------------------------------- dispatch */

static int ranks_line(ex_t *ex, const char *args) {
  while (*args == ' ' || *args == '\t')
    args++;
  size_t n = strcspn(args, " \t\r\n");
  const char *rest = args + n;
  if (n == 5 && !strncmp(args, "start", 5))
    return magic_start(ex, rest);
  if (n == 6 && !strncmp(args, "status", 6))
    return magic_status(ex);
  if (n == 4 && !strncmp(args, "stop", 4))
    return magic_stop(ex);
  if (n == 7 && !strncmp(args, "restart", 7))
    return magic_restart(ex);
  int pull = n == 4 && !strncmp(args, "pull", 4), push = n == 4 && !strncmp(args, "push", 4);
  if ((pull || push) && !ex->ranks->group)
    return usage("no rank workers: run %%ranks start num_processes=N first%s", NULL);
  if (pull)
    return magic_pull(ex, rest);
  if (push)
    return magic_push(ex, rest);
  return usage("%%ranks: start, stop, restart, status, pull NAME [from=R], push NAME "
               "[to=RANKS] (got '%s')",
               args);
}

static int autoranks(ex_t *ex, const char *args) {
  struct ex_ranks *rs = ex->ranks;
  while (*args == ' ' || *args == '\t')
    args++;
  if (!*args)
    rs->autoranks = !rs->autoranks;
  else if (!strcmp(args, "on") || !strcmp(args, "off"))
    rs->autoranks = !strcmp(args, "on");
  else
    return usage("%%autoranks on|off (got '%s')", args);
  if (rs->autoranks && !rs->group) {
    rs->autoranks = 0;
    return usage("no rank workers: run %%ranks start num_processes=N first%s", NULL);
  }
  printf("%%autoranks is %s: %s\n", rs->autoranks ? "on" : "off",
         rs->autoranks ? "every cell runs on all ranks (%autoranks off to stop)"
                       : "cells run in the kernel");
  return ex_event_reply_ok(NULL);
}

/* The cell's first line if it starts with `word` as a whole magic name. */
static int starts_with(const char *line, const char *word) {
  size_t n = strlen(word);
  return !strncmp(line, word, n) && (isspace((unsigned char)line[n]) || !line[n]);
}

/* A line magic alone in its cell: the rest must be blank. */
static int only_line(const char *line, size_t n) {
  const char *rest = line + n;
  return !rest[strspn(rest, " \t\r\n")];
}

int ex_ranks_handle(ex_t *ex, const char *code, int count, int *rc) {
  const char *line = code + strspn(code, " \t\r\n");
  size_t n = strcspn(line, "\n");
  int cell = starts_with(line, "%%ranks"), magic = starts_with(line, "%ranks"),
      aut = starts_with(line, "%autoranks");
  if (!cell && !magic && !aut && !(ex->ranks && ex->ranks->autoranks))
    return 0;
  if (!state(ex)) {
    *rc = ex_event_reply_error("MemoryError", "out of memory", NULL);
    return 1;
  }
  if (cell) {
    *rc = ranks_cell(ex, code, line, n, count);
    return 1;
  }
  if ((magic || aut) && !only_line(line, n)) {
    *rc = usage("%s must be alone in its cell", magic ? "%ranks" : "%autoranks");
    return 1;
  }
  char *args = magic || aut ? strndup(line + (magic ? 6 : 10), n - (magic ? 6 : 10)) : NULL;
  if (args) {
    size_t l = strlen(args);
    while (l && isspace((unsigned char)args[l - 1]))
      args[--l] = 0;
  }
  if (magic)
    *rc = ranks_line(ex, args ? args : "");
  else if (aut)
    *rc = autoranks(ex, args ? args : "");
  else /* %autoranks on: the cell is a %%ranks all cell */
    *rc = ranks_cell(ex, code, NULL, 0, count);
  free(args);
  return 1;
}
