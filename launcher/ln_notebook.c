/*
 * ln_notebook.c — a notebook's cells through an nbfork-executor.
 */
#define _GNU_SOURCE
#include "ln_notebook.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ln_cmd.h"
#include "ln_display_view.h"
#include "nbf_buf.h"
#include "nbf_executor.h"
#include "nbf_util.h"
#include "nbf_wire.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* The cell's `%launch` line (its '%'), or NULL: the first line that
 * starts with it after blanks; it may follow comments and code (the
 * executor's ex_magic.h). */
static const char *launch_line(const char *src) {
  for (const char *p = src; p;) {
    const char *q = p + strspn(p, " \t\r");
    if (!strncmp(q, "%launch", 7) && (q[7] == ' ' || q[7] == '\t'))
      return q;
    p = strchr(p, '\n');
    p = p ? p + 1 : NULL;
  }
  return NULL;
}

static int blank(const char *p, const char *end) {
  for (; p < end; p++)
    if (!isspace((unsigned char)*p))
      return 0;
  return 1;
}

/* The end of the call in `%launch f(a, ")") opts`: just past its closing
 * parenthesis (quotes skipped), or NULL. */
static const char *call_end(const char *p) {
  int depth = 0;
  char quote = 0;
  for (; *p; p++) {
    if (quote) {
      if (*p == '\\' && p[1])
        p++;
      else if (*p == quote)
        quote = 0;
    } else if (*p == '"' || *p == '\'') {
      quote = *p;
    } else if (*p == '(') {
      depth++;
    } else if (*p == ')' && --depth == 0) {
      return p + 1;
    }
  }
  return NULL;
}

/* The next option word of [*p, end) (a quoted value with spaces is one
 * word): its start, its length in *n, *p moved past it; NULL at the end. */
static const char *next_word(const char **p, const char *end, size_t *n) {
  const char *q = *p;
  while (q < end && isspace((unsigned char)*q))
    q++;
  const char *t = q;
  char quote = 0;
  while (q < end && (quote || !isspace((unsigned char)*q))) {
    if (quote ? *q == quote : (*q == '"' || *q == '\''))
      quote = quote ? 0 : *q;
    q++;
  }
  *p = q;
  *n = (size_t)(q - t);
  return *n ? t : NULL;
}

/* The word of `opts` that sets the same option as `key=...` at p (n
 * bytes), or NULL; its length in *len. */
static const char *same_option(const char *p, size_t n, const char *opts, size_t *len) {
  const char *eq = memchr(p, '=', n);
  if (!eq || !opts)
    return NULL;
  const char *end = opts + strlen(opts), *w;
  for (const char *q = opts; (w = next_word(&q, end, len));)
    if (*len > (size_t)(eq - p) && !strncmp(w, p, (size_t)(eq - p) + 1))
      return w;
  return NULL;
}

/* The %launch line [line, end) with the options `opts` gives removed,
 * then `opts` (the command line's replace the cell's: a repeated option
 * is an error, ln_options_parse), then the options of `defaults` the
 * cell does not give (the config file's: the cell's own win). Each value
 * of the cell that is replaced, and each of the config file's that is
 * not used, gets a line in `notes`. */
static void launch_with(nbf_buf_t *b, const char *line, const char *end, const char *opts,
                        const char *defaults, nbf_buf_t *notes) {
  const char *call = call_end(line);
  if (!call || call > end)
    call = end;
  nbf_buf_append(b, line, (size_t)(call - line));
  size_t n, m;
  const char *t, *o;
  for (const char *p = call; (t = next_word(&p, end, &n));) {
    if ((o = same_option(t, n, opts, &m))) {
      if ((m != n || memcmp(o, t, n)) && notes)
        nbf_buf_printf(notes,
                       "nbfork launch: %.*s from the command line replaces the cell's %.*s\n",
                       (int)m, o, (int)n, t);
      continue;
    }
    nbf_buf_puts(b, " ");
    nbf_buf_append(b, t, n);
    if ((o = same_option(t, n, defaults, &m)) && (m != n || memcmp(o, t, n)) && notes)
      nbf_buf_printf(notes,
                     "nbfork launch: the cell's %.*s is used, not %.*s from the config file "
                     "(precedence: command line > cell > config file)\n",
                     (int)n, t, (int)m, o);
  }
  nbf_buf_puts(b, opts ? opts : "");
  const char *dend = defaults ? defaults + strlen(defaults) : NULL;
  for (const char *p = defaults; p && (t = next_word(&p, dend, &n));)
    if (!same_option(t, n, b->data + (call - line), &m)) {
      nbf_buf_puts(b, " ");
      nbf_buf_append(b, t, n);
    }
}

char *ln_notebook_cell(const char *source, const char *opts, const char *defaults, const char *call,
                       nbf_buf_t *notes) {
  const char *line = launch_line(source);
  if (!line)
    return strdup(source);
  const char *end = line + strcspn(line, "\n"), *rest = end;
  while (end > line && isspace((unsigned char)end[-1]))
    end--;
  int alone = blank(source, line) && blank(rest, rest + strlen(rest));
  if (call) /* CALL replaces the notebook's launches: the code above stays */
    return alone ? NULL : nbf_xprintf("%.*s%s", (int)(line - source), source, rest);
  nbf_buf_t b = {0};
  nbf_buf_append(&b, source, (size_t)(line - source));
  nbf_buf_t l = {0}; /* the launch line alone: launch_with reads its options back */
  launch_with(&l, line, end, opts, defaults, notes);
  nbf_buf_append(&b, l.data ? l.data : "", l.len);
  nbf_buf_free(&l);
  if (!blank(rest, rest + strlen(rest)))
    nbf_buf_puts(&b, rest);
  return nbf_buf_take(&b);
}

/* A cell's source: a string or a list of lines (nbformat 4). */
static char *cell_source(json_t *cell) {
  json_t *src = json_object_get(cell, "source");
  if (json_is_string(src))
    return strdup(json_string_value(src));
  nbf_buf_t b = {0};
  size_t i;
  json_t *line;
  json_array_foreach(src, i, line) {
    if (json_is_string(line))
      nbf_buf_append(&b, json_string_value(line), json_string_length(line));
  }
  char *text = nbf_buf_take(&b);
  return text ? text : strdup("");
}

/* Display events (progress bars redrawn in place) go to the view
 * (ln_display_view.c): this hook is the only coupling. */
static ln_display_view_t *g_view;

/* Show an event: outputs' text/plain; an error's traceback. Returns 1
 * for the reply (2 when it is an error), 0 otherwise. */
static int show_event(json_t *e) {
  const char *msg = json_string_value(json_object_get(e, "msg"));
  if (!msg || ln_display_view_event(g_view, e, nbf_now_ms()))
    return 0;
  ln_display_view_end_cell(g_view); /* final states before other output */
  if (!strcmp(msg, "reply")) {
    if (strcmp(json_string_value(json_object_get(e, "status")) ?: "", "error"))
      return 1;
    fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(e, "ename")) ?: "Error",
            json_string_value(json_object_get(e, "evalue")) ?: "");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(e, "traceback"), i, t) {
      fprintf(stderr, "%s\n", json_string_value(t) ?: "");
    }
    return 2;
  }
  const char *text = json_string_value(json_object_get(json_object_get(e, "data"), "text/plain"));
  if (text && (!strcmp(msg, "execute_result") || !strcmp(msg, "display_data")))
    printf("%s\n", text), fflush(stdout);
  return 0;
}

/* The reply of the request in flight, as show_event read it: 0 none
 * yet, 1 ok, 2 error. */
static void on_event(void *arg, json_t *e) {
  int *reply = arg;
  int r = show_event(e);
  if (r && !*reply)
    *reply = r;
}

/* Wait for the reply of the request in flight; forward a stop request
 * as one interrupt (nbf_executor_interrupt), then kill the executor when
 * no reply comes within the grace. Returns 0 (ok), 1 (error reply), -1
 * (the executor died). */
static int executor_wait(nbf_executor_t *x) {
  int reply = 0, interrupted = 0;
  for (;;) {
    if (g_stop && !interrupted) {
      interrupted = 1;
      nbf_executor_interrupt(x, NBF_WIRE_INTERRUPT_GRACE_MS);
    }
    if (nbf_executor_interrupt_expired(x))
      nbf_executor_kill(x);
    if (x->fd_ev < 0) /* killed, or it closed its events: gone */
      return -1;
    struct pollfd p[2] = {{x->fd_ev, POLLIN, 0}, {x->fd_req, POLLOUT, 0}};
    if (poll(p, nbf_executor_wants_req_write(x) ? 2 : 1, 100) <= 0)
      continue;
    nbf_executor_flush(x);
    int r = nbf_executor_read_events(x, on_event, &reply);
    if (reply)
      return reply == 1 ? 0 : 1;
    if (r != 0)
      return -1;
  }
}

static int executor_execute(nbf_executor_t *x, const char *code, int count) {
  json_t *rq = json_pack("{s:s,s:s,s:i,s:b,s:b}", "msg", "execute", "code", code, "execution_count",
                         count, "silent", 0, "allow_stdin", 0);
  int rc = rq && nbf_executor_send(x, rq) >= 0 ? executor_wait(x) : -1;
  json_decref(rq);
  return rc;
}

/* Run every code cell, then (with CALL) the launch. */
static int run_cells(nbf_executor_t *x, json_t *cells, const ln_cli_t *c, const char *opts,
                     const char *defaults, const char *call) {
  size_t i;
  json_t *cell;
  int count = 0, rc = 0;
  json_array_foreach(cells, i, cell) {
    if (strcmp(json_string_value(json_object_get(cell, "cell_type")) ?: "", "code"))
      continue;
    nbf_buf_t notes = {0};
    char *src = cell_source(cell), *code = ln_notebook_cell(src, opts, defaults, call, &notes);
    free(src);
    if (notes.len) { /* which value won, before the launch's own output */
      fprintf(stderr, "%s", notes.data);
      if (strstr(notes.data, "config file"))
        fprintf(stderr, "nbfork launch: the config file is %s\n", c->config_file);
    }
    nbf_buf_free(&notes);
    if (code)
      rc = executor_execute(x, code, ++count);
    free(code);
    if (rc || g_stop)
      return rc ? rc : 1;
  }
  if (!call)
    return 0;
  char *code = nbf_xprintf("%%launch %s%s", call, opts);
  rc = executor_execute(x, code, ++count);
  free(code);
  return rc;
}

static json_t *load_cells(const char *path) {
  json_error_t je;
  json_t *nb = json_load_file(path, 0, &je);
  json_t *cells = nb ? json_object_get(nb, "cells") : NULL;
  if (!nb || !json_is_array(cells)) {
    if (!nb)
      fprintf(stderr, "nbfork launch: error: %s:%d:%d: not a notebook: %s\n", path, je.line,
              je.column, je.text);
    else
      fprintf(stderr, "nbfork launch: error: %s: not a notebook (no \"cells\" list)\n", path);
    json_decref(nb);
    return NULL;
  }
  json_incref(cells);
  json_decref(nb);
  return cells;
}

int ln_notebook_launch(ln_cli_t *c, const char *path, const char *call, int nextra) {
  if (nextra > 1) {
    fprintf(stderr, "nbfork launch: error: after NOTEBOOK.ipynb give at most one CALL, quoted, "
                    "e.g. 'training_loop(\"no\", 42, 64)'\n");
    return LN_EXIT_USAGE;
  }
  char exe[PATH_MAX] = "", err[PATH_MAX + 128];
  json_t *cells = load_cells(path);
  if (!cells)
    return LN_EXIT_USAGE;
  if (nbf_executor_find(exe, sizeof exe) != 0 || access(exe, X_OK) != 0) {
    fprintf(stderr, "nbfork launch: error: the executor %s is missing; build nbfork\n", exe);
    json_decref(cells);
    return LN_EXIT_USAGE;
  }
  /* with CALL every setting in effect; else the command line's over the
   * cells' own, the config file's under them (ln_cli.h) */
  char *opts = ln_cli_launch_options(c, call ? LN_OPTS_ALL : LN_OPTS_FLAGS);
  char *defaults = call ? NULL : ln_cli_launch_options(c, LN_OPTS_CONFIG);
  ln_cli_export_env(c);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a dead executor is an EPIPE here, then reported */
  nbf_executor_t x;
  nbf_executor_init(&x);
  int rc = LN_EXIT_FAILED;
  g_view = ln_display_view_new(stdout, isatty(STDOUT_FILENO), 2000);
  if (nbf_executor_spawn(&x, exe, NBF_EXECUTOR_INHERIT, err, sizeof err) == 0) {
    int r = run_cells(&x, cells, c, opts ? opts : "", defaults, call);
    int st = nbf_executor_stop(&x, 1000); /* reaped: its work directory is removed too */
    rc = g_stop ? LN_EXIT_INTERRUPTED : r == 0 ? 0 : LN_EXIT_FAILED;
    if (r < 0)
      fprintf(stderr, "nbfork launch: the executor died (%s %d) while running %s\n",
              WIFSIGNALED(st) ? "signal" : "exit code",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), path);
  } else {
    fprintf(stderr, "nbfork launch: %s\n", err);
  }
  ln_display_view_destroy(&g_view);
  free(opts);
  free(defaults);
  json_decref(cells);
  return rc;
}
