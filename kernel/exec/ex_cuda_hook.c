#define _GNU_SOURCE
#include "ex_cuda_hook.h"

#include "nbf_util.h"

#include <ctype.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_FRAMES 48
#define CUDA_ERROR_NO_DEVICE 100

static int g_cell_count;
static const char *g_cell_code;

/* The record of the first successful cuInit: written once by the thread
 * that wins g_claimed, read after g_recorded is set. */
static atomic_int g_claimed, g_recorded;
static void *g_frames[HOOK_FRAMES];
static int g_nframes, g_count;
static char *g_code; /* copy of the cell's code at that moment, or NULL */

void ex_cuda_hook_cell(int count, const char *code) {
  g_cell_count = count;
  g_cell_code = code;
}

/* backtrace() loads libgcc_s at its first call: done here, at start, not
 * inside the first cuInit (which a library constructor may make while the
 * loader is busy loading it). */
__attribute__((constructor)) static void warm_backtrace(void) {
  void *f[2];
  backtrace(f, 2);
}

typedef int (*cu_init_fn)(unsigned);

/* libcuda's own cuInit: the next definition after this executable's, or
 * the one of libcuda.so.1 loaded here (a library linked with -lcuda has
 * loaded it already; dlopen then only takes a reference, kept). */
static cu_init_fn real_cu_init(void) {
  extern int cuInit(unsigned);
  cu_init_fn f = (cu_init_fn)dlsym(RTLD_NEXT, "cuInit");
  if (f && f != cuInit)
    return f;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  f = h ? (cu_init_fn)dlsym(h, "cuInit") : NULL;
  return f != cuInit ? f : NULL;
}

/* The driver's first entry, interposed (see ex_cuda_hook.h). Without a
 * driver it answers as a machine without a GPU does. */
int cuInit(unsigned flags) {
  cu_init_fn real = real_cu_init();
  int r = real ? real(flags) : CUDA_ERROR_NO_DEVICE;
  if (r == 0 && !atomic_exchange(&g_claimed, 1)) {
    g_nframes = backtrace(g_frames, HOOK_FRAMES);
    g_count = g_cell_count;
    g_code = g_cell_code ? strdup(g_cell_code) : NULL;
    atomic_store(&g_recorded, 1);
  }
  return r;
}

/* The text from the line's start to p declares `name` rather than
 * calling it: only words and '*' stand before it, and the word just
 * before is not `return` (`int gpu_setup(void);` against
 * `rc = gpu_setup();`, `if (gpu_setup())`, `gpu_setup();`). */
static int declares(const char *bol, const char *p) {
  const char *last = NULL;
  int words = 0;
  for (const char *q = bol; q < p; q++) {
    if (isalnum((unsigned char)*q) || *q == '_') {
      if (q == bol || !(isalnum((unsigned char)q[-1]) || q[-1] == '_')) {
        last = q;
        words++;
      }
    } else if (*q != ' ' && *q != '\t' && *q != '*') {
      return 0;
    }
  }
  return words > 0 && strncmp(last, "return", 6) != 0;
}

/* 1-based line of the first call of `name` (the identifier followed by
 * `(`, not a declaration of it) in a cell's code, or 0: the line is
 * read from the code, as the cells' objects carry no line tables. */
int ex_cuda_hook_call_line(const char *code, const char *name) {
  size_t n = strlen(name);
  int line = 1;
  const char *bol = code;
  for (const char *p = code; *p; p++) {
    if (*p == '\n') {
      line++;
      bol = p + 1;
      continue;
    }
    if (strncmp(p, name, n) || (p > code && (isalnum((unsigned char)p[-1]) || p[-1] == '_')))
      continue;
    const char *q = p + n;
    while (*q == ' ' || *q == '\t')
      q++;
    if (*q == '(' && !declares(bol, p))
      return line;
  }
  return 0;
}

static const char *base_name(const char *path) {
  const char *s = path ? strrchr(path, '/') : NULL;
  return s ? s + 1 : path ? path : "?";
}

typedef struct {
  Dl_info caller;  /* the frame that called cuInit (outside this executable and libcuda) */
  Dl_info entry;   /* the frame the cell called (its callee), when the cell is on the stack */
  int have_caller, have_entry, cell_called_direct;
} hook_stack_t;

static int in_cell(const Dl_info *d, const char *workdir) {
  size_t n = strlen(workdir);
  return d->dli_fname && !strncmp(d->dli_fname, workdir, n) &&
         !strncmp(d->dli_fname + n, "/cell_", 6);
}

/* Walk the recorded frames, innermost first, past this executable's and
 * the driver's own, to the caller of cuInit and the cell's callee. */
static void read_stack(const char *workdir, hook_stack_t *s) {
  Dl_info self;
  memset(s, 0, sizeof *s);
  if (!dladdr((void *)cuInit, &self))
    return;
  Dl_info prev = {0};
  for (int i = 0; i < g_nframes; i++) {
    Dl_info d;
    if (!dladdr(g_frames[i], &d) || d.dli_fbase == self.dli_fbase ||
        strstr(base_name(d.dli_fname), "libcuda."))
      continue;
    if (in_cell(&d, workdir)) {
      s->cell_called_direct = !s->have_caller;
      s->entry = prev;
      s->have_entry = s->have_caller;
      return;
    }
    if (!s->have_caller) {
      s->caller = d;
      s->have_caller = 1;
    }
    prev = d;
  }
}

static char *function_text(const Dl_info *d) {
  return d->dli_sname ? nbf_xprintf("%s()", d->dli_sname) : nbf_xprintf("a function without a symbol");
}

char *ex_cuda_hook_describe(const char *workdir) {
  if (!atomic_load(&g_recorded))
    return NULL;
  hook_stack_t s;
  read_stack(workdir, &s);
  const char *name = s.cell_called_direct ? "cuInit" : s.have_entry ? s.entry.dli_sname : NULL;
  int line = name && g_code ? ex_cuda_hook_call_line(g_code, name) : 0;
  char where[64];
  if (g_count > 0 && line > 0)
    snprintf(where, sizeof where, "cell [%d], line %d", g_count, line);
  else if (g_count > 0)
    snprintf(where, sizeof where, "cell [%d]", g_count);
  else
    snprintf(where, sizeof where, "code run between cells");
  if (s.cell_called_direct)
    return nbf_xprintf("%s, which called cuInit", where);
  if (!s.have_caller)
    return nbf_xprintf("%s (cuInit's caller could not be read from the stack)", where);
  char *fn = function_text(&s.caller);
  char *out;
  if (s.have_entry && s.entry.dli_sname && s.caller.dli_sname &&
      strcmp(s.entry.dli_sname, s.caller.dli_sname)) {
    out = nbf_xprintf("%s: it called %s() of %s, whose %s called cuInit", where, s.entry.dli_sname,
                      base_name(s.entry.dli_fname), fn);
  } else {
    out = nbf_xprintf("%s: %s of %s called cuInit", where, fn, base_name(s.caller.dli_fname));
  }
  free(fn);
  return out;
}
