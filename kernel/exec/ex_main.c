/*
 * ex_main.c — nbfork-executor: the single-threaded process that holds
 * every cell's state, compiles and runs cells, and forks training workers
 * for %launch. The kernel process talks to it over pipes (nbf_wire.h).
 *
 * Why a separate process: fork() is only safe from a single-threaded
 * process, and the kernel has ZeroMQ threads; and a crash in cell code
 * kills this process, not the kernel, which reports it and starts a fresh
 * executor.
 *
 * This file sets the process up (work directory, compilers, SIGINT) and
 * runs the request loop; running a cell is ex_run.c's job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nbf_wire.h"
#include "ex_events.h"
#include "ex_query.h"
#include "ex_ranks.h"
#include "ex_run.h"
#include "ex_stdin.h"
#include "nbf_buf.h"
#include "nbf_param.h"
#include "nbf_util.h"
#include "nbf_workdir.h"

#ifndef NBFORK_VERSION
#define NBFORK_VERSION "0"
#endif

static ex_t *g_ex;           /* for the atexit cleanup only */
static pid_t g_executor_pid; /* a worker calling exit() runs atexit too */

static void cleanup_workdir(void) {
  if (getpid() == g_executor_pid && g_ex && g_ex->workdir[0] &&
      !nbf_param_NBFORK_KEEP_WORKDIR())
    nbf_workdir_remove(g_ex->workdir);
}

/* Die with the parent (the kernel, or `nbfork launch`): a SIGKILLed kernel
 * must not leave this process spinning in a cell, and it is in its own
 * process group, which the front end's group kill misses. The signal is
 * armed here, after exec (posix_spawn has no hook before it); a parent
 * that died before prctl is caught by comparing getppid() with the pid
 * the kernel passed (--parent PID). Returns -1 when the parent is gone. */
static int die_with_parent(int argc, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--parent"))
      return getppid() == (pid_t)atol(argv[i + 1]) ? 0 : -1;
  return 0; /* started without --parent: nothing to compare */
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
    ex->workdir_lock = -1; /* the user's folder: not ours to lock or remove */
    mkdir(ex->workdir, 0700);
    struct stat st; /* say so when other users could swap an object in it */
    if (stat(ex->workdir, &st) == 0 && (st.st_mode & 022))
      fprintf(stderr,
              "nbfork-executor: warning: NBFORK_WORKDIR %s is writable by other users (mode "
              "%04o): one could replace a cell's object before it is loaded. Run: chmod 700 %s\n",
              ex->workdir, (unsigned)(st.st_mode & 07777), ex->workdir);
  } else {
    const char *tmp = nbf_param_TMPDIR();
    int keep = nbf_param_NBFORK_KEEP_WORKDIR();
    if (nbf_workdir_create(tmp, keep, ex->workdir, sizeof ex->workdir, &ex->workdir_lock)) {
      fprintf(stderr, "nbfork-executor: cannot create a work directory in %s: %s\n", tmp,
              NBF_STRERROR(errno));
      return -1;
    }
    g_ex = ex;
    g_executor_pid = getpid();
    atexit(cleanup_workdir);
  }
  ex->cells = ex_cell_state_new();
  ex->objects = ex_objects_new();
  ex->tc.cc = nbf_param_NBFORK_CC();
  ex->nvcc = ex_compile_find_nvcc();
  ex->tc.nvcc = ex->nvcc;
  ex->tc.nvccflags = nbf_param_NBFORK_NVCCFLAGS();
  ex->tc.interrupted = ex_run_interrupt_flag();
  ex->tc.incdir = ex->incdir;
  ex->tc.libdir = ex->libdir;
  ex->tc.workdir = ex->workdir;
  /* -O2: training loops are written in cells (straight-line cells get -O0,
   * see ex_run.c cell_cflags). No -g: compile time. */
  const char *cflags = nbf_param_raw(NBF_P_NBFORK_CFLAGS);
  ex->default_cflags = cflags == NULL;
  ex->base_cflags = strdup(cflags ? cflags : "-O2 " EX_CFLAGS_ALWAYS);
  ex->flags.check = ex_run_check_flags;
  ex->flags.check_ctx = ex;
  return ex->cells && ex->objects && ex->base_cflags ? 0 : -1;
}

static int handle_execute(ex_t *ex, json_t *req) {
  const char *code = json_string_value(json_object_get(req, "code"));
  int count = (int)json_integer_value(json_object_get(req, "execution_count"));
  if (!code)
    return ex_event_reply_error("ProtocolError", "execute request without code", NULL);
  ex_run_clear_interrupt();
  int help = ex_query_help(code, ex->cells);
  if (help != EX_QUERY_NOT_HELP)
    return help; /* `name?`: answered through the pager */
  ex_stdin_begin(json_is_true(json_object_get(req, "allow_stdin")));
  int rc;
  if (ex_ranks_handle(ex, code, count, &rc)) { /* %ranks, %%ranks, %autoranks */
    ex_stdin_end();
    return rc;
  }
  ex_magic_result_t m;
  char err[2048] = "";
  const char *ename = "UsageError";
  if (ex_magic_run(code, &ex->flags, ex->cells, &m, &ename, err, sizeof err) != EX_OK) {
    ex_magic_result_free(&m);
    ex_stdin_end();
    return ex_event_reply_error(ename, err, NULL);
  }
  const char *p = m.code;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
    p++;
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
    rc = ex_run_code(ex, &m, count);
  ex_magic_result_free(&m);
  ex_stdin_end();
  return rc;
}

/* Read one line from fd. Returns the line (without newline, caller
 * frees) or NULL at EOF. What follows it stays buffered for the next
 * call. */
static char *read_line(int fd) {
  static nbf_buf_t buf;
  for (;;) {
    char *nl = buf.len ? memchr(buf.data, '\n', buf.len) : NULL;
    if (nl) {
      size_t n = (size_t)(nl - buf.data);
      char *line = strndup(buf.data, n);
      nbf_buf_consume(&buf, n + 1);
      return line;
    }
    if (nbf_buf_reserve(&buf, 65536))
      return NULL;
    ssize_t r = read(fd, buf.data + buf.len, buf.cap - buf.len - 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return NULL;
    buf.len += (size_t)r;
    buf.data[buf.len] = 0;
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--version")) {
    printf("nbfork-executor %s\n", NBFORK_VERSION);
    return 0;
  }
  if (die_with_parent(argc, argv))
    return 1; /* the parent died before prctl: nobody to serve */
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  ex_run_install_sigint();
  if (fcntl(NBF_WIRE_FD_REQUESTS, F_GETFD) < 0 || fcntl(NBF_WIRE_FD_EVENTS, F_GETFD) < 0) {
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
  while ((line = read_line(NBF_WIRE_FD_REQUESTS)) != NULL) {
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
  ex_ranks_shutdown(&ex); /* the kernel closed the pipe: no worker outlives it */
  return 0;
}
