/*
 * ex_main.c — nbfork-executor: the single-threaded process that holds
 * every cell's state, compiles and runs cells, and forks training workers
 * for %launch. The kernel process talks to it over pipes (kn_wire.h).
 *
 * Why a separate process: fork() is only safe from a single-threaded
 * process, and the kernel has ZeroMQ threads; and a crash in cell code
 * kills this process, not the kernel, which reports it and starts a fresh
 * executor.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kn_wire.h"
#include "ex_cell.h"
#include "ex_compile.h"
#include "ex_events.h"
#include "ex_jit.h"
#include "ex_magic.h"
#include "ex_query.h"
#include "ex_stdin.h"
#include "ex_timeit.h"
#include "ln_cuda.h"
#include "ln_launch.h"
#include "nbf_param.h"
#include "nbf_util.h"

#ifndef NBFORK_VERSION
#define NBFORK_VERSION "0"
#endif

/* Interrupts: SIGINT while a cell's statements run jumps back to the cell
 * runner, so state survives; at any other time it only sets a flag that
 * the compiler wait and the launcher poll. */
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

typedef struct {
  ex_cell_state_t *cells;
  ex_toolchain_t tc;
  ex_flags_t flags;
  char *base_cflags;  /* NBFORK_CFLAGS, or the default below */
  int default_cflags; /* NBFORK_CFLAGS is not set */
  char workdir[PATH_MAX];
  char incdir[PATH_MAX];
  char libdir[PATH_MAX];
  int cuda_cell; /* execution count of the cell that initialized CUDA */
  char *nvcc;    /* CUDA compiler found at start, or NULL */
} ex_t;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* Flags every C cell gets by default: calling an undeclared function is
 * an error (C99 dropped implicit declarations; the link would otherwise
 * fail later, or call it with the wrong types). */
#define EX_CFLAGS_ALWAYS "-Werror=implicit-function-declaration"

static ex_t *g_ex;           /* for the atexit cleanup only */
static pid_t g_executor_pid; /* a worker calling exit() runs atexit too */

static void cleanup_workdir(void) {
  if (getpid() == g_executor_pid && g_ex && g_ex->workdir[0] && !nbf_param_bool(NBF_P_NBFORK_KEEP_WORKDIR, 0))
    nftw(g_ex->workdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Find nbfork.h and libnbfork.so: NBFORK_INCLUDE_DIR / NBFORK_LIB_DIR, or
 * ../include and ../lib next to this binary (build tree and install tree
 * have the same shape). */
static int find_dirs(ex_t *ex) {
  char exe[PATH_MAX - 32];
  if (nbf_self_exe(exe, sizeof exe))
    return -1;
  char *slash = strrchr(exe, '/');
  if (slash)
    *slash = 0;
  const char *inc = nbf_param_raw(NBF_P_NBFORK_INCLUDE_DIR);
  const char *lib = nbf_param_raw(NBF_P_NBFORK_LIB_DIR);
  if (inc)
    snprintf(ex->incdir, sizeof ex->incdir, "%s", inc);
  else
    snprintf(ex->incdir, sizeof ex->incdir, "%s/../include", exe);
  if (lib)
    snprintf(ex->libdir, sizeof ex->libdir, "%s", lib);
  else
    snprintf(ex->libdir, sizeof ex->libdir, "%s/../lib", exe);
  char probe[PATH_MAX + 16];
  snprintf(probe, sizeof probe, "%s/nbfork.h", ex->incdir);
  if (access(probe, R_OK) != 0) {
    fprintf(stderr, "nbfork-executor: cannot find nbfork.h in %s (set NBFORK_INCLUDE_DIR)\n",
            ex->incdir);
    return -1;
  }
  return 0;
}

static int setup(ex_t *ex) {
  if (find_dirs(ex))
    return -1;
  const char *wd = nbf_param_raw(NBF_P_NBFORK_WORKDIR);
  if (wd) {
    snprintf(ex->workdir, sizeof ex->workdir, "%s", wd);
    mkdir(ex->workdir, 0700);
  } else {
    const char *tmp = nbf_param_str(NBF_P_TMPDIR);
    snprintf(ex->workdir, sizeof ex->workdir, "%s/nbfork-%d-XXXXXX", tmp, (int)getpid());
    if (!mkdtemp(ex->workdir)) {
      fprintf(stderr, "nbfork-executor: cannot create a work directory in %s: %s\n", tmp,
              NBF_STRERROR(errno));
      return -1;
    }
    g_ex = ex;
    g_executor_pid = getpid();
    atexit(cleanup_workdir);
  }
  ex->cells = ex_cell_state_new();
  ex->tc.cc = nbf_param_str(NBF_P_NBFORK_CC);
  ex->nvcc = ex_compile_find_nvcc();
  ex->tc.nvcc = ex->nvcc;
  ex->tc.nvccflags = nbf_param_str(NBF_P_NBFORK_NVCCFLAGS);
  ex->tc.interrupted = &g_interrupted;
  ex->tc.incdir = ex->incdir;
  ex->tc.libdir = ex->libdir;
  ex->tc.workdir = ex->workdir;
  /* -O2: training loops are written in cells (straight-line cells get -O0,
   * see run_code). No -g: compile time. */
  const char *cflags = nbf_param_raw(NBF_P_NBFORK_CFLAGS);
  ex->default_cflags = cflags == NULL;
  ex->base_cflags = strdup(cflags ? cflags : "-O2 " EX_CFLAGS_ALWAYS);
  return ex->cells && ex->base_cflags ? 0 : -1;
}

/* Report (once) the first cell after which CUDA is initialized here. */
static void check_cuda(ex_t *ex, int count) {
  if (ex->cuda_cell || !ln_cuda_initialized())
    return;
  ex->cuda_cell = count > 0 ? count : -1;
  fprintf(stderr,
          "Warning: this cell (cell [%d]) initialized CUDA in the kernel process. Workers that "
          "%%launch forks from now on cannot use the GPU (every CUDA call fails with "
          "'initialization error'). Restart the kernel and move CUDA calls into the launched "
          "function.\n",
          count);
}

static int send_event_line(const char *line, size_t len) {
  return ex_event_send_raw(line, len);
}

static int reply_interrupted(void) {
  return ex_event_reply_error("KeyboardInterrupt",
                              "the cell was interrupted; the state of earlier cells is kept", NULL);
}

/* Call fn(arg) with SIGINT armed to jump back here (on_sigint): 0 when
 * it returned, 1 when an interrupt cut it short (g_interrupted is set). */
static int call_interruptible(void (*fn)(void *), void *arg) {
  if (sigsetjmp(g_jmp, 1) != 0)
    return 1;
  g_jmp_armed = 1;
  fn(arg);
  g_jmp_armed = 0;
  return 0;
}

static void run_statements(void *run) {
  (*(void (**)(void))run)();
}

typedef struct {
  void (*loop)(long);
  const ex_magic_result_t *m;
  ex_timeit_result_t r;
} timeit_call_t;

static void timeit_body(void *arg) {
  timeit_call_t *t = arg;
  ex_timeit_run(t->loop, t->m->timeit_loops, t->m->timeit_repeat, &g_interrupted, &t->r);
}

/* %timeit: time the compiled loop in this process (ex_timeit.h) and
 * print IPython's line; an interrupt stops it like any statement. */
static int run_timeit(ex_t *ex, const ex_magic_result_t *m, int count, void (*loop)(long)) {
  timeit_call_t t = {.loop = loop, .m = m};
  call_interruptible(timeit_body, &t);
  fflush(stdout);
  fflush(stderr);
  check_cuda(ex, count);
  if (g_interrupted)
    return reply_interrupted();
  char line[256];
  ex_timeit_format(&t.r, line, sizeof line);
  printf("%s\n", line);
  fflush(stdout);
  return ex_event_reply_ok(NULL);
}

/* Compile `u` with the system compiler and load it (RTLD_GLOBAL: later
 * cells bind to its symbols). Returns the handle, or NULL after replying
 * with the error (*replied = what that reply returned). */
static void *compile_and_load(ex_t *ex, int cuda, const ex_cell_unit_t *u, const char *label,
                              const char *cflags, int *replied) {
  ex->tc.cflags = cflags;
  ex->tc.ldflags = ex->flags.ldflags;
  char *so = NULL, *diag = NULL;
  int rc = ex_compile(&ex->tc, u->source, u->tag, cuda, &so, &diag);
  ex->tc.cflags = NULL;
  if (rc == 2) {
    free(diag);
    *replied = ex_event_reply_error("KeyboardInterrupt",
                                    "the cell was interrupted while it compiled; the state of "
                                    "earlier cells is kept",
                                    NULL);
    return NULL;
  }
  char *clean = diag ? ex_compile_clean(diag) : NULL;
  free(diag);
  if (rc != 0) {
    const char *d = clean ? clean : "";
    char *summary = rc > 0 ? ex_compile_summary(d) : strndup(d, strcspn(d, "\n"));
    /* a failure of the link step alone (a missing -lNAME) is a LinkError */
    int link_only = rc > 0 && summary &&
                    (strstr(summary, "cannot find") || strstr(summary, "undefined reference") ||
                     !strncmp(summary, "collect2:", 9));
    *replied = ex_event_reply_error(rc < 0      ? "SystemError"
                                    : link_only ? "LinkError"
                                                : "CompileError",
                                    summary ? summary : "compilation failed", d);
    free(summary);
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
  if (!h) {
    /* "/tmp/.../cell_TAG.so: undefined symbol: f__cTAG" -> "cell[3]:
     * undefined symbol: f" */
    const char *de = dlerror();
    const char *tail = de ? strstr(de, ".so: ") : NULL;
    char *msg = ex_compile_clean(tail ? tail + 5 : de ? de : "cannot load the cell");
    char ev[1024];
    snprintf(ev, sizeof ev, "%s: %.*s", label, msg ? (int)strcspn(msg, "\n") : 0, msg ? msg : "");
    free(msg);
    *replied = ex_event_reply_error(
        "LinkError", ev,
        "The cell compiled but could not be loaded: a function it calls is declared but not "
        "defined, or a library is missing (add it with %ldflags -lNAME).");
  }
  return h;
}

/* Compile, load and run one cell (magic lines already handled). */
static int run_code(ex_t *ex, const ex_magic_result_t *m, int count) {
  char label[32], err[512] = "";
  snprintf(label, sizeof label, "cell[%d]", count);
  const char *user = ex->flags.cflags ? ex->flags.cflags : "";
  /* The salt is what, besides the unit's text, decides the object: the
   * compilers and their flags. The -O0 choice below follows from the text
   * and these, so it needs no place in it. */
  char *salt = NULL;
  if (asprintf(&salt, "%s|%s %s|%s|%s|%s|%d", ex->tc.cc, ex->base_cflags, user,
               ex->tc.nvcc ? ex->tc.nvcc : "", ex->tc.nvccflags,
               ex->flags.ldflags ? ex->flags.ldflags : "", m->cuda) < 0)
    return ex_event_reply_error("MemoryError", "out of memory", NULL);
  ex_cell_unit_t u;
  int g = ex_cell_generate(ex->cells, m->code, m->cuda, label, m->launch_call, m->timeit_stmt, salt,
                           &u, err, sizeof err);
  free(salt);
  if (g) {
    char ev[600];
    snprintf(ev, sizeof ev, "%s: %s", label, err);
    return ex_event_reply_error("CompileError", ev, NULL);
  }
  /* A straight-line cell (no function, no loop) runs once and briefly:
   * -O0 compiles it faster (measured: bench/kernel_latency.py) unless the
   * user chose flags (NBFORK_CFLAGS, or an -O in %cflags). */
  int quick = u.straight && ex->default_cflags && !strstr(user, "-O");
  char *cflags = NULL;
  if (asprintf(&cflags, "%s %s", quick ? "-O0 " EX_CFLAGS_ALWAYS : ex->base_cflags, user) < 0) {
    ex_cell_unit_free(&u);
    return ex_event_reply_error("MemoryError", "out of memory", NULL);
  }
  /* A cell that holds only `%launch f(...)` (nothing later cells link
   * against): its thunk compiles in memory when TinyCC accepts it
   * (ex_jit.h), else through the system compiler like any cell. */
  void (*run)(void) = NULL;
  int (*launch)(void) = NULL;
  void (*timeit)(long) = NULL;
  if (m->launch_call && !m->cuda && u.split.count == 0)
    launch = ex_jit_launch(ex->cells, m->launch_call, u.source, u.tag, u.launch_symbol, ex->incdir,
                           cflags);
  if (!launch) {
    int replied = 0;
    void *h = compile_and_load(ex, m->cuda, &u, label, cflags, &replied);
    if (!h) {
      free(cflags);
      ex_cell_unit_free(&u);
      return replied;
    }
    run = (void (*)(void))dlsym(h, u.run_symbol);
    launch = u.has_launch ? (int (*)(void))dlsym(h, u.launch_symbol) : NULL;
    timeit = u.has_timeit ? (void (*)(long))dlsym(h, u.timeit_symbol) : NULL;
  }
  free(cflags);
  ex_cell_commit(ex->cells, &u);
  ex_cell_unit_free(&u);
  if (g_interrupted) {
    check_cuda(ex, count);
    return reply_interrupted();
  }
  if (run && call_interruptible(run_statements, &run)) {
    fflush(stdout);
    fflush(stderr);
    check_cuda(ex, count);
    return reply_interrupted();
  }
  fflush(stdout);
  fflush(stderr);
  check_cuda(ex, count);
  if (timeit)
    return run_timeit(ex, m, count, timeit);
  if (!m->launch_call)
    return ex_event_reply_ok(NULL);

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
  static const int private_fds[] = {KN_WIRE_FD_REQUESTS};
  ln_context_t ctx = {send_event_line, &g_interrupted, ex->cuda_cell > 0 ? ex->cuda_cell : 0,
                      private_fds, 1};
  ln_error_t le;
  if (ln_launch(&o, launch, &ctx, &le) == 0)
    return ex_event_reply_ok(NULL);
  int r = ex_event_reply_error(le.ename, le.evalue, le.traceback);
  ln_error_free(&le);
  return r;
}

static int handle_execute(ex_t *ex, json_t *req) {
  const char *code = json_string_value(json_object_get(req, "code"));
  int count = (int)json_integer_value(json_object_get(req, "execution_count"));
  if (!code)
    return ex_event_reply_error("ProtocolError", "execute request without code", NULL);
  g_interrupted = 0;
  ex_stdin_begin(json_is_true(json_object_get(req, "allow_stdin")));
  ex_magic_result_t m;
  char err[512] = "";
  const char *ename = "UsageError";
  if (ex_magic_run(code, &ex->flags, ex->cells, &m, &ename, err, sizeof err)) {
    ex_magic_result_free(&m);
    ex_stdin_end();
    return ex_event_reply_error(ename, err, NULL);
  }
  const char *p = m.code;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
    p++;
  int rc;
  if (m.launch_call && m.timeit_stmt)
    rc = ex_event_reply_error("UsageError", "%launch and %timeit cannot share a cell", NULL);
  else if (!*p && !m.launch_call && !m.timeit_stmt)
    rc = ex_event_reply_ok(NULL); /* magics only, or an empty cell */
  else if (m.cuda && !ex->tc.nvcc)
    rc = ex_event_reply_error("CompileError", "%%cuda cell: no CUDA compiler (nvcc) found",
                              "%%cuda cell: no CUDA compiler (nvcc) found on PATH, in "
                              "$CUDA_HOME/bin or in /usr/local/cuda/bin.\nInstall the CUDA "
                              "toolkit or set NBFORK_NVCC to nvcc's path.");
  else
    rc = run_code(ex, &m, count);
  ex_magic_result_free(&m);
  ex_stdin_end();
  return rc;
}

/* Read one line from fd into a growing buffer. Returns the line (without
 * newline, caller frees) or NULL at EOF. */
static char *read_line(int fd) {
  static char *buf;
  static size_t len, cap;
  for (;;) {
    char *nl = len ? memchr(buf, '\n', len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - buf);
      char *line = strndup(buf, n);
      memmove(buf, nl + 1, len - n - 1);
      len -= n + 1;
      return line;
    }
    if (len + 65536 > cap) {
      size_t nc = cap ? cap * 2 : 131072;
      char *b = realloc(buf, nc);
      if (!b)
        return NULL;
      buf = b;
      cap = nc;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return NULL;
    len += (size_t)r;
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--version")) {
    printf("nbfork-executor %s\n", NBFORK_VERSION);
    return 0;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; /* no SA_RESTART: blocking reads see EINTR */
  sigaction(SIGINT, &sa, NULL);
  if (fcntl(KN_WIRE_FD_REQUESTS, F_GETFD) < 0 || fcntl(KN_WIRE_FD_EVENTS, F_GETFD) < 0) {
    fprintf(stderr, "nbfork-executor: started without the kernel's pipes on fd 3 and 4; it is "
                    "run by nbfork-kernel, not by hand\n");
    return 2;
  }
  static ex_t ex;
  if (setup(&ex))
    return 1;
  ex_query_init(ex.incdir);
  ex_stdin_install();
  char *line;
  while ((line = read_line(KN_WIRE_FD_REQUESTS)) != NULL) {
    json_error_t jerr;
    json_t *req = json_loads(line, 0, &jerr);
    free(line);
    const char *msg = req ? json_string_value(json_object_get(req, "msg")) : NULL;
    if (!msg)
      ex_event_reply_error("ProtocolError", "malformed request from the kernel", NULL);
    else if (!strcmp(msg, "execute"))
      handle_execute(&ex, req);
    else if (!strcmp(msg, "is_complete") || !strcmp(msg, "complete") || !strcmp(msg, "inspect"))
      ex_query_handle(msg, req, ex.cells);
    else
      ex_event_reply_error("ProtocolError", "unknown request", msg);
    json_decref(req);
  }
  return 0;
}
