/*
 * ex_run.c — the cell runner (see ex_run.h): compile and load a cell,
 * run its statements interruptibly, then its %timeit loop or %launch.
 */
#define _GNU_SOURCE
#include "ex_run.h"

#include <ctype.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ex_diag.h"
#include "ex_events.h"
#include "ex_jit.h"
#include "ex_memcells.h"
#include "ex_timeit.h"
#include "ex_cuda_hook.h"
#include "ln_cuda.h"
#include "ln_launch.h"
#include "nbf_param.h"
#include "nbf_wire.h"

/* Interrupts. SIGINT while a cell's statements (or its %timeit loop) run
 * jumps back to the cell runner (call_interruptible), so the state of
 * earlier cells survives; at any other time it only sets g_interrupted,
 * which the compiler wait (ex_compile), %timeit and the launcher poll.
 *
 * Caveat: siglongjmp out of a signal handler is only safe when the code
 * it leaves holds no lock and is in the middle of no update. The jump is
 * armed only while cell code runs (g_jmp_armed), never while the
 * executor itself compiles, loads or writes events, so the executor's
 * own malloc and stdio calls are never cut short. But cell code that is
 * inside malloc, printf or any other function that is not
 * async-signal-safe when the interrupt arrives is left mid-call, and the
 * executor does NOT defer the jump in that case:
 *  - stdio: glibc's FILE locks are recursive and this process has one
 *    thread, so a lock left taken does not block later output; buffered
 *    output of that call may be lost or repeated;
 *  - malloc: the arena lock is not recursive. If the jump left it taken,
 *    the executor blocks in its next allocation. When that is before its
 *    reply (the reply is built with jansson, which allocates), the kernel
 *    gets no reply within NBF_WIRE_INTERRUPT_GRACE_MS (2 s) of the
 *    interrupt, kills the executor, reports "did not stop within ... and
 *    was killed" and starts a fresh one (kn_kernel.c): the state of
 *    earlier cells is lost, the kernel lives. When the block comes after
 *    the reply, a later cell hangs until the user interrupts it, and the
 *    same grace time then ends in the same kill and fresh executor.
 * Not done: jumping only when the interrupted program counter lies in a
 * cell's own code, and otherwise retrying from a timer. A loop that is
 * worth interrupting and is unsafe to cut spends its time inside libc
 * (printf, malloc), so the retries would seldom land in cell code and
 * would end in today's jump anyway, after a delay eaten out of the
 * kernel's grace time; it would also take a timer signal from the cells
 * and per-architecture ucontext code. */
static sigjmp_buf g_jmp;
static volatile sig_atomic_t g_jmp_armed;
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
  if (g_jmp_armed) {
    g_jmp_armed = 0;
    siglongjmp(g_jmp, 1);
  }
}

/* SIGQUIT while %launch runs: the launcher prints where every rank is. */
static volatile sig_atomic_t g_status_requested;
static void on_sigquit(int sig) {
  (void)sig;
  g_status_requested = 1;
}

int ex_run_install_sigint(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; /* no SA_RESTART: blocking reads see EINTR */
  return sigaction(SIGINT, &sa, NULL);
}

volatile sig_atomic_t *ex_run_interrupt_flag(void) {
  return &g_interrupted;
}

void ex_run_clear_interrupt(void) {
  g_interrupted = 0;
}

/* Whether %ranks workers run (ex_t.ranks_hooks: registered by ex_ranks.c). */
static int ranks_running(const ex_t *ex) {
  return ex->ranks_hooks && ex->ranks_hooks->running(ex);
}

/* Report (once) the first cell after which CUDA is initialized here;
 * who called cuInit, when the interposed cuInit saw it (ex_cuda_hook.h). */
static void check_cuda(ex_t *ex, int count) {
  if (ex->cuda_cell)
    return;
  char *by = ex_cuda_hook_describe(ex->workdir);
  if (!by && !ln_cuda_initialized())
    return;
  ex->cuda_cell = count > 0 ? count : -1;
  ex->cuda_by = by;
  fprintf(stderr,
          "Warning: this cell (cell [%d]) initialized CUDA in the kernel process%s%s%s. Workers "
          "that %%launch forks from now on cannot use the GPU (every CUDA call fails with "
          "'initialization error'). Restart the kernel and move CUDA calls into the launched "
          "function.\n",
          count, by ? " (" : "", by ? by : "", by ? ")" : "");
}

static int send_event_line(const char *line, size_t len) {
  return ex_event_send_raw(line, len);
}

static int reply_interrupted(void) {
  return ex_event_reply_error("KeyboardInterrupt",
                              "the cell was interrupted; the state of earlier cells is kept", NULL);
}

/* exit() called by cell code. A notebook kernel does not end because a
 * cell called exit (IPython turns sys.exit into SystemExit and keeps
 * running): while cell code runs in the executor, the executor's own
 * `exit` (exported to the cells' objects, which bind libc's functions
 * at load: CMakeLists.txt, --export-dynamic-symbol=exit) jumps back to
 * the cell runner like an interrupt, and the cell answers SystemExit.
 * atexit handlers do not run then: the process goes on. Anywhere else
 * (the executor itself, a %launch worker, a cell's own forked child)
 * it is libc's exit; a thread the cell started ends the process. */
static volatile sig_atomic_t g_exit_called;
static int g_exit_status;
static pid_t g_runner_pid;

void exit(int status) {
  /* the jump is for the executor's one thread only: a thread a cell
   * started (OpenMP, its own) ends the process as exit always does */
  if (g_jmp_armed && getpid() == g_runner_pid && gettid() == g_runner_pid) {
    g_jmp_armed = 0;
    g_exit_called = 1;
    g_exit_status = status;
    siglongjmp(g_jmp, 2);
  }
  void (*libc_exit)(int) = (void (*)(int))dlsym(RTLD_NEXT, "exit");
  if (libc_exit)
    libc_exit(status);
  _exit(status);
}

/* Call fn(arg) with SIGINT armed to jump back here (on_sigint): EX_OK
 * when it returned, EX_ERR_INTERRUPTED when an interrupt (g_interrupted
 * set) or the cell's call of exit (g_exit_called set) cut it short. */
static ex_result_t call_interruptible(void (*fn)(void *), void *arg) {
  g_exit_called = 0;
  g_runner_pid = getpid();
  if (sigsetjmp(g_jmp, 1) != 0)
    return EX_ERR_INTERRUPTED;
  g_jmp_armed = 1;
  fn(arg);
  g_jmp_armed = 0;
  return EX_OK;
}

/* The reply to a cell cut short by its own exit(status). */
static int reply_exit(void) {
  char ev[160];
  snprintf(ev, sizeof ev,
           "exit(%d) was called: the cell stopped there; the kernel and the state of earlier "
           "cells are kept",
           g_exit_status);
  return ex_event_reply_error(
      "SystemExit", ev,
      "exit() ends a program, not a notebook kernel: return from the cell instead, or restart "
      "the kernel to start afresh. Handlers registered with atexit() did not run.");
}

static void run_statements(void *run) {
  (*(void (**)(void))run)();
}

typedef struct {
  void (*loop)(long);
  const ex_magic_result_t *m;
  ex_timeit_result_t r;
  ex_time_result_t once; /* %time */
} timeit_call_t;

static void timeit_body(void *arg) {
  timeit_call_t *t = arg;
  if (t->m->time_once)
    ex_time_once(t->loop, &t->once);
  else
    ex_timeit_run(t->loop, t->m->timeit_loops, t->m->timeit_repeat, &g_interrupted, &t->r);
}

/* %timeit: time the compiled loop in this process (ex_timeit.h) and
 * print IPython's line (%time: run it once, print IPython's CPU and wall
 * times); an interrupt stops it like any statement. */
static int run_timeit(ex_t *ex, const ex_magic_result_t *m, int count, void (*loop)(long)) {
  timeit_call_t t = {.loop = loop, .m = m};
  call_interruptible(timeit_body, &t);
  fflush(stdout);
  fflush(stderr);
  check_cuda(ex, count);
  if (g_interrupted || g_exit_called)
    return g_exit_called ? reply_exit() : reply_interrupted();
  char line[256];
  if (m->time_once)
    ex_time_format(&t.once, line, sizeof line);
  else
    ex_timeit_format(&t.r, line, sizeof line);
  printf("%s\n", line);
  fflush(stdout);
  return ex_event_reply_ok(NULL);
}

/* The reply to a compile that failed with `r` (not EX_OK), from the
 * compiler's cleaned diagnostics `d`. */
static int reply_compile_failure(ex_result_t r, const char *d) {
  if (r == EX_ERR_INTERRUPTED)
    return ex_event_reply_error("KeyboardInterrupt",
                                "the cell was interrupted while it compiled; the state of "
                                "earlier cells is kept",
                                NULL);
  int rejected = r == EX_ERR_COMPILE;
  char *summary = rejected ? ex_diag_summary(d) : strndup(d, strcspn(d, "\n"));
  /* a failure of the link step alone (a missing -lNAME) is a LinkError */
  int link_only = rejected && summary &&
                  (strstr(summary, "cannot find") || strstr(summary, "undefined reference") ||
                   !strncmp(summary, "collect2:", 9));
  int sent = ex_event_reply_error(!rejected   ? "SystemError"
                                  : link_only ? "LinkError"
                                              : "CompileError",
                                  summary ? summary : "compilation failed", d);
  free(summary);
  return sent;
}

/* Is `name` a function in the unit `src`: written anywhere as a word
 * followed by `(` (a declaration or a call)? Else it is taken for a
 * variable (`extern int n;` and its uses). */
static int used_as_function(const char *src, const char *name) {
  size_t n = strlen(name);
  for (const char *p = src; n && (p = strstr(p, name)) != NULL; p += n) {
    int starts = p == src || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    const char *q = p + n;
    while (*q == ' ' || *q == '\t' || *q == '\n')
      q++;
    if (starts && *q == '(')
      return 1;
  }
  return 0;
}

/* dlopen failed: "/tmp/.../cell_TAG.so: undefined symbol: f__cTAG" is
 * shown as "cell[3]: undefined function: f" (or "undefined variable: n"
 * when the unit uses the name as an object). */
static int reply_load_failure(const char *label, const ex_cell_unit_t *u) {
  const char *de = dlerror();
  const char *tail = de ? strstr(de, ".so: ") : NULL;
  char *msg = ex_diag_clean(tail ? tail + 5 : de ? de : "cannot load the cell");
  static const char undef[] = "undefined symbol: ";
  const char *sym = msg && !strncmp(msg, undef, sizeof undef - 1) ? msg + sizeof undef - 1 : NULL;
  char ev[1024], tb[1024];
  if (sym) {
    int n = (int)strcspn(sym, "\n");
    char name[256];
    snprintf(name, sizeof name, "%.*s", n, sym);
    int fn = used_as_function(u->source, name);
    snprintf(ev, sizeof ev, "%s: undefined %s: %s", label, fn ? "function" : "variable", name);
    snprintf(tb, sizeof tb,
             "The cell compiled but could not be loaded: the %s '%s' is declared but no cell "
             "and no library defines it. Define it in a cell (%s), or add the library that "
             "does with %%ldflags -lNAME.",
             fn ? "function" : "variable", name,
             fn ? "a function with a body" : "a declaration without 'extern'");
  } else {
    snprintf(ev, sizeof ev, "%s: %.*s", label, msg ? (int)strcspn(msg, "\n") : 0, msg ? msg : "");
    snprintf(tb, sizeof tb,
             "The cell compiled but could not be loaded: a library is missing "
             "(add it with %%ldflags -lNAME).");
  }
  free(msg);
  return ex_event_reply_error("LinkError", ev, tb);
}

/* Whether the text is empty or only spaces (an unset %cflags/%ldflags). */
static int blank(const char *s) {
  return !s || !s[strspn(s, " \t\r\n")];
}

/* A C cell with the default toolchain and flags may go through TinyCC
 * first (ex_jit.h: ex_jit_cell_so) when it is straight-line too
 * (ex_cell_unit_t.tinycc, decided by ex_cell_generate_at). */
static int tinycc_fits(const ex_t *ex, const ex_magic_result_t *m) {
  return ex_jit_enabled() && !m->cuda && ex->default_cflags && blank(ex->flags.cflags) &&
         blank(ex->flags.ldflags) && !nbf_param_raw(NBF_P_NBFORK_CC) &&
         ex_jit_cell_safe(ex->cells, m->code);
}

static ex_result_t regenerate(ex_t *ex, const ex_magic_result_t *m, const char *label,
                              ex_cell_unit_t *u, int *replied);

/* An object ex_memcells loaded was linked without libc (ex_jit.h): it
 * is renamed cell_TAG.mem.so, out of the compile cache's way (which
 * would give it to a later dlopen(), %ranks running), kept for a look. */
static void set_aside(const char *so) {
  size_t n = strlen(so);
  char *to = malloc(n + 5);
  if (to && n > 3 && !strcmp(so + n - 3, ".so")) {
    memcpy(to, so, n - 3);
    memcpy(to + n - 3, ".mem.so", 8);
    if (rename(so, to))
      unlink(so);
  } else {
    unlink(so);
  }
  free(to);
}

/* Compile `u` (TinyCC where u->tinycc, else the system compiler) and
 * load it (RTLD_GLOBAL: later cells bind to its symbols). Returns the
 * handle, or NULL after replying with the error (*replied = what that
 * reply returned). */
static void *compile_and_load(ex_t *ex, const ex_magic_result_t *m, ex_cell_unit_t *u,
                              const char *label, const char *cflags, int *replied,
                              const ex_memcell_t **mem) {
  ex->tc.cflags = cflags;
  ex->tc.ldflags = ex->flags.ldflags;
  ex->tc.memsyms = ex_memcells_script(ex->memcells);
  char *so = NULL, *diag = NULL;
  ex_result_t r = EX_ERR_COMPILE;
  /* %ranks workers load each new cell's object by its path: none in memory then */
  int in_memory = u->tinycc && ex->memcells && !ranks_running(ex);
  *mem = in_memory ? ex_memcells_find(ex->memcells, u->tag) : NULL;
  if (*mem)
    return NULL;   /* a re-run: the same code, already in memory */
  if (u->tinycc) { /* TinyCC's unit is TinyCC's only: see ex_cell_state_indirect */
    ex->tc.tinycc = 2;
    ex->tc.in_memory = in_memory;
    r = ex_compile(&ex->tc, u->source, u->tag, m->cuda, &so, &diag);
    free(diag);
    diag = NULL;
    if (r == EX_OK && in_memory && (*mem = ex_memcells_load(ex->memcells, u, so))) {
      set_aside(so); /* linked for ex_memcells only: no later dlopen() may reuse it */
      free(so);
      ex->tc.cflags = NULL;
      ex->tc.tinycc = ex->tc.in_memory = 0;
      return NULL;
    }
    if (r == EX_OK && in_memory) { /* not in memory after all: dlopen() needs libc linked */
      unlink(so);
      free(so);
      so = NULL;
      ex->tc.in_memory = 0;
      r = ex_compile(&ex->tc, u->source, u->tag, m->cuda, &so, &diag);
      free(diag);
      diag = NULL;
    }
    ex->tc.in_memory = 0;
    if (r != EX_OK && regenerate(ex, m, label, u, replied) != EX_OK) {
      ex->tc.cflags = NULL;
      ex->tc.tinycc = 0;
      return NULL;
    }
  }
  ex->tc.tinycc = 0;
  if (!so)
    r = ex_compile(&ex->tc, u->source, u->tag, m->cuda, &so, &diag);
  ex->tc.cflags = NULL;
  ex->tc.tinycc = 0;
  char *clean = diag && r != EX_ERR_INTERRUPTED ? ex_diag_clean(diag) : NULL;
  free(diag);
  if (clean && !m->cuda) { /* columns in the cell's characters */
    char *cols = ex_diag_columns(clean, label, m->code);
    if (cols) {
      free(clean);
      clean = cols;
    }
  }
  if (r != EX_OK) {
    *replied = reply_compile_failure(r, clean ? clean : "");
    free(clean);
    return NULL;
  }
  if (clean && *clean) { /* warnings: the cell compiled */
    fputs(clean, stderr);
    fflush(stderr);
  }
  free(clean);
  void *h = dlopen(so, RTLD_NOW | RTLD_GLOBAL);
  free(so);
  if (!h)
    *replied = reply_load_failure(label, u);
  return h;
}

/* Generate the cell's unit (ex_cell.h), for TinyCC where tinycc_fits
 * and `fast`. EX_OK, or a failure after replying with the error
 * (*replied = what that reply returned). */
static ex_result_t generate_for(ex_t *ex, const ex_magic_result_t *m, const char *label, int fast,
                                ex_cell_unit_t *u, int *replied) {
  char err[2048] = "";
  const char *user = ex->flags.cflags ? ex->flags.cflags : "";
  /* The salt is what, besides the unit's text, decides the object: the
   * compilers and their flags. The -O0 choice (cell_cflags) follows from
   * the text and these, so it needs no place in it. */
  char *salt = NULL;
  /* and the addresses of variables in memory the link may give it */
  if (asprintf(&salt, "%s|%s %s|%s|%s|%s|%d|%016llx", ex->tc.cc, ex->base_cflags, user,
               ex->tc.nvcc ? ex->tc.nvcc : "", ex->tc.nvccflags,
               ex->flags.ldflags ? ex->flags.ldflags : "", m->cuda,
               (unsigned long long)ex_memcells_hash(ex->memcells)) < 0) {
    *replied = ex_event_reply_error("MemoryError", "out of memory", NULL);
    return EX_ERR_NOMEM;
  }
  ex_launch_site_t site = {m->launch_call, label, m->launch_line, m->launch_col};
  ex_result_t r =
      ex_cell_generate_at(ex->cells, m->code, m->cuda, label, m->launch_call ? &site : NULL,
                          m->timeit_stmt, salt, fast && tinycc_fits(ex, m), u, err, sizeof err);
  free(salt);
  if (r != EX_OK) {
    char ev[2100];
    snprintf(ev, sizeof ev, "%s: %s", label, err);
    *replied = ex_event_reply_error("CompileError", ev, NULL);
  }
  return r;
}

static ex_result_t generate(ex_t *ex, const ex_magic_result_t *m, const char *label,
                            ex_cell_unit_t *u, int *replied) {
  return generate_for(ex, m, label, 1, u, replied);
}

/* TinyCC declined the unit made for it: the unit for the system compiler
 * replaces it in *u (another tag; no pointers to earlier globals). */
static ex_result_t regenerate(ex_t *ex, const ex_magic_result_t *m, const char *label,
                              ex_cell_unit_t *u, int *replied) {
  ex_cell_unit_t g;
  ex_result_t r = generate_for(ex, m, label, 0, &g, replied);
  if (r == EX_OK) {
    ex_cell_unit_free(u);
    *u = g;
  }
  return r;
}

/* Statements (counted by `;`) in text. */
static size_t count_statements(const char *text) {
  size_t n = 0;
  for (const char *p = text; p && (p = strchr(p, ';')) != NULL; p++)
    n++;
  return n;
}

/* The largest function of the cell, in statements: its functions' bodies
 * and its run function (the top-level statements); *name gets the
 * function's name (NULL for the run function). */
static size_t largest_function(const ex_cell_unit_t *u, const char **name) {
  size_t top = 0, most = 0;
  *name = NULL;
  for (size_t i = 0; i < u->split.count; i++) {
    const ex_chunk_t *k = &u->split.chunks[i];
    if (k->kind == EX_CHUNK_STATEMENT || k->kind == EX_CHUNK_EXPRESSION)
      top += count_statements(k->text) + 1;
    size_t n = k->kind == EX_CHUNK_FUNCTION ? count_statements(k->body) : 0;
    if (n > most) {
      most = n;
      *name = k->name;
    }
  }
  if (top > most) {
    most = top;
    *name = NULL;
  }
  return most;
}

/* The C flags of this cell (caller frees; NULL when out of memory). A
 * straight-line cell (no function, no loop) runs once and briefly: -O0
 * compiles it faster (measured: bench/kernel_latency.py); a function
 * larger than EX_LARGE_FUNCTION_STATEMENTS gets -O1, said on stderr;
 * neither when the user chose flags (NBFORK_CFLAGS, or an -O in %cflags). */
static char *cell_cflags(const ex_t *ex, const ex_cell_unit_t *u) {
  const char *user = ex->flags.cflags ? ex->flags.cflags : "";
  int chosen = !ex->default_cflags || strstr(user, "-O");
  int quick = u->straight && !chosen;
  const char *big = NULL;
  size_t size = chosen || u->cxx ? 0 : largest_function(u, &big);
  int large = !quick && size > EX_LARGE_FUNCTION_STATEMENTS;
  if (large) {
    fprintf(stderr,
            "%s: %s%s%s has %zu statements (more than %d): compiled at -O1 instead of -O2, "
            "whose compile time grows much faster with a function's size; %%cflags -O2 "
            "overrides\n",
            u->label, big ? "function '" : "the cell's top-level code", big ? big : "",
            big ? "'" : "", size, EX_LARGE_FUNCTION_STATEMENTS);
    fflush(stderr);
  }
  char *cflags = NULL;
  const char *base = quick   ? "-O0 " EX_CFLAGS_ALWAYS
                     : large ? "-O1 " EX_CFLAGS_ALWAYS
                             : ex->base_cflags;
  if (asprintf(&cflags, "%s %s", base, user) < 0)
    return NULL;
  return cflags;
}

/* What a loaded cell offers the runner; NULL where it has none. */
typedef struct {
  void (*run)(void);
  int (*launch)(void);
  void (*timeit)(long);
  const ex_memcell_t *mem; /* the cell runs from memory (ex_memcells.h) */
} entry_points_t;

/* Get the cell's entry points. A cell that holds only `%launch f(...)`
 * (nothing later cells link against): its thunk compiles in memory when
 * TinyCC accepts it (ex_jit.h), else through the system compiler like
 * any cell. 0, or -1 after replying with the error (*replied). */
static int load_entry_points(ex_t *ex, const ex_magic_result_t *m, ex_cell_unit_t *u,
                             const char *label, const char *cflags, entry_points_t *ep,
                             int *replied) {
  memset(ep, 0, sizeof *ep);
  if (m->launch_call && !m->cuda && u->split.count == 0)
    ep->launch = ex_jit_launch(ex->cells, m->launch_call, u->source, u->tag, u->launch_symbol,
                               ex->incdir, cflags);
  if (ep->launch)
    return 0;
  void *h = compile_and_load(ex, m, u, label, cflags, replied, &ep->mem);
  if (ep->mem) {
    ep->run = ep->mem->run;
    ep->launch = ep->mem->launch;
    return 0;
  }
  if (!h)
    return -1;
  ex_objects_add(
      ex->objects, h, u->tag,
      ex_objects_may_unload(ex->cells, u, m->code, m->launch_call != NULL, m->timeit_stmt != NULL));
  ep->run = (void (*)(void))dlsym(h, u->run_symbol);
  ep->launch = u->has_launch ? (int (*)(void))dlsym(h, u->launch_symbol) : NULL;
  ep->timeit = u->has_timeit ? (void (*)(long))dlsym(h, u->timeit_symbol) : NULL;
  return 0;
}

/* %launch: parse the options and fork the workers (ln_launch.h). */
static int run_launch(ex_t *ex, const ex_magic_result_t *m, int (*launch)(void)) {
  char err[512] = "";
  ln_options_t o;
  ln_options_init(&o);
  if (ln_options_parse(m->launch_opts, &o, err, sizeof err))
    return ex_event_reply_error("LaunchError", err,
                                "Options of %launch (Accelerate's notebook_launcher): "
                                "num_processes=N [mixed_precision=no|fp16|bf16] [use_port=29500] "
                                "[master_addr=127.0.0.1] [node_rank=0] [num_nodes=1] "
                                "[max_restarts=0] [monitor_interval=0.1] "
                                "[log_line_prefix_template='[rank{rank}]: '] [rdzv_id=ID] "
                                "[rdzv_endpoint=HOST:PORT] [rdzv_timeout=300]");
  if (!launch)
    return ex_event_reply_error("LinkError", "the launch thunk was not found in the cell", NULL);
  if (ranks_running(ex)) /* their store is a thread here: the fork guard would refuse */
    return ex_event_reply_error("LaunchError",
                                "the rank workers of %ranks are running; %launch forks only from "
                                "a kernel without them",
                                "Run %ranks stop first (or train in a %%ranks cell).");
  static const int private_fds[] = {NBF_WIRE_FD_REQUESTS};
  /* where every rank is, while the cell runs: `cat <workdir>/ranks-status`
   * from a terminal, or SIGQUIT to this process (the view in the cell's
   * output) */
  char status_file[sizeof ex->workdir + 16];
  snprintf(status_file, sizeof status_file, "%s/ranks-status", ex->workdir);
  ln_context_t ctx = {
      send_event_line,     &g_interrupted, ex->cuda_cell > 0 ? ex->cuda_cell : 0, private_fds, 1,
      &g_status_requested, status_file, ex->cuda_by};
  struct sigaction sa = {0}, old_quit;
  sa.sa_handler = on_sigquit;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGQUIT, &sa, &old_quit);
  ln_error_t le;
  int rc = ln_launch(&o, launch, &ctx, &le);
  sigaction(SIGQUIT, &old_quit, NULL);
  if (rc == 0)
    return ex_event_reply_ok(NULL);
  int r = ex_event_reply_error(le.ename, le.evalue, le.traceback);
  ln_error_free(&le);
  return r;
}

/* Run the loaded cell: its statements, then its %timeit loop or its
 * %launch. Returns what sending the reply returned. */
static int run_loaded(ex_t *ex, const ex_magic_result_t *m, int count, const entry_points_t *ep) {
  ex_cuda_hook_cell(count, m->code); /* a cuInit now is this cell's */
  if (ex->ranks_hooks && ex->ranks_hooks->cell_active(ex)) /* a %%ranks cell: its ranks run it */
    return g_interrupted ? reply_interrupted() : ex->ranks_hooks->run_loaded(ex, count, ep->run);
  if (g_interrupted) {
    check_cuda(ex, count);
    return reply_interrupted();
  }
  ex_result_t r = ep->run ? call_interruptible(run_statements, (void *)&ep->run) : EX_OK;
  fflush(stdout);
  fflush(stderr);
  check_cuda(ex, count);
  if (r == EX_ERR_INTERRUPTED)
    return g_exit_called ? reply_exit() : reply_interrupted();
  if (ep->timeit)
    return run_timeit(ex, m, count, ep->timeit);
  if (!m->launch_call)
    return ex_event_reply_ok(NULL);
  return run_launch(ex, m, ep->launch);
}

int ex_run_check_flags(void *ctx, const char *cflags, const char *ldflags, char *err,
                       size_t errlen) {
  ex_t *ex = ctx;
  static const char probe[] = "/* nbfork: %cflags/%ldflags probe */\n#include <nbfork.h>\n"
                              "int __nbf_flags_probe(void) { return 0; }\n";
  char *all = NULL, *so = NULL, *diag = NULL, tag[32];
  if (asprintf(&all, "%s %s", ex->base_cflags, cflags ? cflags : "") < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  ex_toolchain_t tc = ex->tc;
  tc.cflags = all;
  tc.ldflags = ldflags;
  tc.tinycc = 0;
  /* a name of its own per process and call: never a cell's cached object */
  static unsigned serial;
  snprintf(tag, sizeof tag, "flags%d_%u", (int)getpid(), ++serial);
  ex_result_t r = ex_compile(&tc, probe, tag, 0, &so, &diag);
  free(all);
  static const char *const left[] = {"so", "c", "warnings"}; /* the probe's files */
  for (size_t i = 0; i < sizeof left / sizeof *left; i++) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/cell_%s.%s", ex->workdir, tag, left[i]);
    unlink(path);
  }
  free(so);
  if (r != EX_OK) {
    char *clean = diag ? ex_diag_clean(diag) : NULL;
    snprintf(err, errlen, "%s",
             clean && *clean           ? clean
             : r == EX_ERR_INTERRUPTED ? "interrupted"
                                       : "compilation failed");
    size_t l = strlen(err);
    while (l && (err[l - 1] == '\n' || err[l - 1] == ' '))
      err[--l] = 0;
    free(clean);
  }
  free(diag);
  return r == EX_OK ? 0 : -1;
}

int ex_run_code(ex_t *ex, const ex_magic_result_t *m, int count) {
  char label[32];
  snprintf(label, sizeof label, "cell[%d]", count);
  ex_cell_unit_t u;
  int replied = 0;
  if (generate(ex, m, label, &u, &replied) != EX_OK)
    return replied;
  char *cflags = cell_cflags(ex, &u);
  entry_points_t ep;
  if (!cflags)
    replied = ex_event_reply_error("MemoryError", "out of memory", NULL);
  int loaded = cflags && load_entry_points(ex, m, &u, label, cflags, &ep, &replied) == 0;
  free(cflags);
  if (loaded) {
    ex_cell_commit(ex->cells, &u);
    if (ep.mem && ex_memcells_publish(ex->memcells, ep.mem, ex->cells)) {
      fprintf(stderr, "Warning: cannot write %s: later cells may not link\n",
              ex_memcells_script(ex->memcells));
      fflush(stderr);
    }
    if (ex->ranks_hooks)
      ex->ranks_hooks->loaded(ex, ep.run); /* the ranks see its definitions too */
  }
  ex_cell_unit_free(&u);
  if (!loaded)
    return replied;
  int sent = run_loaded(ex, m, count, &ep);
  ex_cuda_hook_cell(0, NULL);
  /* no cell code runs now: objects nothing names can go */
  ex_objects_sweep(ex->objects, ex->cells);
  return sent;
}
