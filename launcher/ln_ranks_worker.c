/*
 * ln_ranks_worker.c — the rank worker's loop (ln_ranks_wire.h): wait for
 * a command, do it, reply; the process and everything cells left in it
 * (globals, an acc_t, a model) stay for the next command.
 *
 * Interrupts: SIGINT is blocked except while a cell's code runs; then its
 * handler jumps back here (siglongjmp), the cell answers "interrupted"
 * and the worker waits for the next command with its state kept. The
 * caveat of the executor's interrupt (ex_run.c) holds here too: code cut
 * inside malloc or a collective may leave a lock taken or a peer waiting;
 * the executor kills a worker that does not answer within 1 s.
 */
#define _GNU_SOURCE
#include "ln_ranks_wire.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nbf_util.h"
#include "nbfork.h"

static sigjmp_buf g_jmp;
static volatile sig_atomic_t g_armed;

static void on_sigint(int sig) {
  (void)sig;
  /* only the thread that armed the jump may take it: a thread a cell
   * started (Gloo's loop) inherits SIGINT unblocked */
  if (g_armed && gettid() == getpid()) {
    g_armed = 0;
    siglongjmp(g_jmp, 1);
  }
}

int ln_rk_read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = 0;
      return -1;
    }
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

int ln_rk_write_all(int fd, const void *p, size_t n) {
  return nbf_write_all(fd, p, n);
}

static void reply(int fd, uint32_t status, uint64_t arg, const void *data, size_t n) {
  fflush(stdout);
  fflush(stderr);
  ln_rk_reply_t h = {status, 0, n, arg};
  if (ln_rk_write_all(fd, &h, sizeof h) || (n && ln_rk_write_all(fd, data, n)))
    _exit(0); /* the executor is gone */
}

static void reply_text(int fd, uint32_t status, const char *text) {
  reply(fd, status, 0, text, strlen(text));
}

/* Drop a SIGINT that arrived after the cell's reply (meant for it). */
static void drain_sigint(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&s, NULL, &zero) == SIGINT)
    ;
}

/* Run `fn` with SIGINT unblocked and able to jump back: 0, or 1 when
 * interrupted. */
static int run_interruptible(void (*fn)(void)) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  if (sigsetjmp(g_jmp, 1) != 0) {
    sigprocmask(SIG_BLOCK, &s, NULL);
    return 1;
  }
  g_armed = 1;
  sigprocmask(SIG_UNBLOCK, &s, NULL);
  fn();
  sigprocmask(SIG_BLOCK, &s, NULL);
  g_armed = 0;
  return 0;
}

static void do_run(int fd, const char *path, const char *symbol) {
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  void (*fn)(void) = h ? (void (*)(void))dlsym(h, symbol) : NULL;
  if (!fn) {
    const char *e = dlerror();
    reply_text(fd, LN_RK_ERROR, e ? e : "cannot load the cell");
    return;
  }
  int interrupted = run_interruptible(fn);
  reply(fd, interrupted ? LN_RK_INTERRUPTED : LN_RK_OK, 0, NULL, 0);
  drain_sigint();
}

static void do_load(int fd, const char *path) {
  if (dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
    reply(fd, LN_RK_OK, 0, NULL, 0);
    return;
  }
  const char *e = dlerror();
  reply_text(fd, LN_RK_ERROR, e ? e : "cannot load the object");
}

/* A global by assembler name: its address and its size from the symbol
 * table (st_size). NULL when this process has no such symbol. */
static void *find_sym(const char *name, size_t *size) {
  void *p = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!p || !dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
    return NULL;
  *size = (size_t)sym->st_size;
  return p;
}

static void *find_value(const ln_ranks_hooks_t *hooks, const char *kind, const char *name,
                        size_t *size) {
  if (!strcmp(kind, "sym"))
    return find_sym(name, size);
  return hooks->keep_find ? hooks->keep_find(name, size) : NULL;
}

static void do_pull(int fd, const ln_ranks_hooks_t *hooks, const char *kind, const char *name) {
  size_t size = 0;
  void *p = find_value(hooks, kind, name, &size);
  if (!p) {
    reply_text(fd, LN_RK_ERROR, "not found");
    return;
  }
  reply(fd, LN_RK_OK, 0, p, size);
}

/* Read `n` bytes of push data into dst, or drop them (dst NULL). */
static void take_data(int fd, void *dst, size_t n) {
  if (dst) {
    if (ln_rk_read_all(fd, dst, n))
      _exit(0);
    return;
  }
  char buf[65536];
  while (n) {
    size_t k = n < sizeof buf ? n : sizeof buf;
    if (ln_rk_read_all(fd, buf, k))
      _exit(0);
    n -= k;
  }
}

static void do_push(int fd, const ln_ranks_hooks_t *hooks, const char *kind, const char *name,
                    size_t n) {
  size_t size = 0;
  void *p = find_value(hooks, kind, name, &size);
  if (!p && !strcmp(kind, "keep") && hooks->keep_make) {
    p = hooks->keep_make(name, n);
    size = n;
  }
  if (!p || size != n) {
    take_data(fd, NULL, n);
    if (p)
      reply(fd, LN_RK_MISMATCH, size, NULL, 0);
    else
      reply_text(fd, LN_RK_ERROR, "not found");
    return;
  }
  take_data(fd, p, n);
  reply(fd, LN_RK_OK, 0, NULL, 0);
}

void ln_ranks_worker_serve(int fd, const int *close_fds, int n, const ln_ranks_hooks_t *hooks) {
  for (int i = 0; i < n; i++)
    if (close_fds[i] >= 0 && close_fds[i] != fd)
      close(close_fds[i]);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigprocmask(SIG_BLOCK, &s, NULL);
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  for (;;) {
    ln_rk_cmd_t c;
    if (ln_rk_read_all(fd, &c, sizeof c))
      break;
    char *payload = malloc(c.len + 2);
    if (!payload || ln_rk_read_all(fd, payload, c.len))
      break;
    payload[c.len] = payload[c.len + 1] = 0;
    const char *a = payload, *b = payload + strlen(payload) + 1;
    switch (c.op) {
    case LN_RK_RUN:
      do_run(fd, a, b);
      break;
    case LN_RK_LOAD:
      do_load(fd, a);
      break;
    case LN_RK_PULL:
      do_pull(fd, hooks, a, b);
      break;
    case LN_RK_PUSH:
      do_push(fd, hooks, a, b, (size_t)c.arg);
      break;
    case LN_RK_REBUILD:
      acc_rebuild_process_groups((unsigned)c.arg);
      reply(fd, LN_RK_OK, 0, NULL, 0);
      break;
    default:
      reply_text(fd, LN_RK_ERROR, "unknown command");
    }
    free(payload);
  }
  fflush(stdout);
  fflush(stderr);
  _exit(0);
}
