/*
 * ex_compile.c — running the compiler on a cell's unit (the user-facing
 * text of its diagnostics is ex_diag.c's job).
 */
#define _GNU_SOURCE
#include "ex_compile.h"
#include "ex_jit.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include "nbf_buf.h"
#include "nbf_param.h"
#include "nbf_util.h"
#include "nbf_proc.h"

static int write_file(const char *path, const char *data) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  if (nbf_write_all(fd, data, strlen(data))) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return close(fd);
}

/* The compiler's argument vector. It grows: a %cflags line with hundreds
 * of -D flags must reach the compiler whole (a fixed array used to drop
 * the words past its end without a word). */
typedef struct {
  char **v; /* NULL-terminated once complete */
  int n, cap;
  wordexp_t we[2]; /* the expanded %cflags / %ldflags words v points into */
  int nwe;
} ex_argv_t;

static int argv_push(ex_argv_t *a, const char *s) {
  if (a->n + 2 > a->cap) {
    int cap = a->cap ? a->cap * 2 : 64;
    char **v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v)
      return -1;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = (char *)s;
  a->v[a->n] = NULL;
  return 0;
}

/* Append the words of `flags` (shell-like quoting, no command
 * substitution). EX_OK, EX_ERR_USAGE (the flags do not parse; a message
 * naming `what` is in out) or EX_ERR_NOMEM. */
static ex_result_t argv_words(ex_argv_t *a, const char *flags, const char *what, nbf_buf_t *out) {
  if (!flags || !*flags)
    return EX_OK;
  wordexp_t *we = &a->we[a->nwe];
  if (wordexp(flags, we, WRDE_NOCMD) != 0) {
    nbf_buf_printf(out, "cannot parse %s flags: %s\n", what, flags);
    return EX_ERR_USAGE;
  }
  a->nwe++;
  for (size_t i = 0; i < we->we_wordc; i++)
    if (argv_push(a, we->we_wordv[i]))
      return EX_ERR_NOMEM;
  return EX_OK;
}

static void argv_free(ex_argv_t *a) {
  for (int i = 0; i < a->nwe; i++)
    wordfree(&a->we[i]);
  free(a->v);
  memset(a, 0, sizeof *a);
}

/* Path of glibc's libc_nonshared.a for compiler `cc` (asked once per
 * process: `cc -print-file-name=libc_nonshared.a`), or NULL where the
 * compiler does not know one (then cells link the default libraries). */
static const char *libc_nonshared(const char *cc) {
  static char *path, *for_cc;
  static int probed;
  if (probed && for_cc && !strcmp(for_cc, cc))
    return path;
  free(path);
  free(for_cc);
  path = NULL;
  for_cc = strdup(cc);
  probed = 1;
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC))
    return NULL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return NULL;
  }
  if (pid == 0) {
    dup2(pfd[1], 1);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 2);
    }
    execlp(cc, cc, "-print-file-name=libc_nonshared.a", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char buf[4096];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(pfd[0], buf + n, sizeof buf - 1 - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
    if (n == sizeof buf - 1)
      break;
  }
  close(pfd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  buf[n] = 0;
  buf[strcspn(buf, "\n")] = 0;
  struct stat st;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && buf[0] == '/' && stat(buf, &st) == 0)
    path = strdup(buf);
  return path;
}

/* The file of the shared library that defines `sym` in this process
 * (dladdr), or NULL. */
static const char *loaded_from(const void *sym) {
  Dl_info info;
  if (dladdr(sym, &info) && info.dli_fname && info.dli_fname[0] == '/')
    return info.dli_fname;
  return NULL;
}

/* The executor's own libc and libm (libc.so.6, libm.so.6 as loaded here,
 * looked up once), or 0 where one is not found. A cell links them by
 * file name, not through libc.so's linker script: reading the shared objects' symbols is
 * what makes ld record each reference's default version (GLIBC_2.3 of
 * realpath, GLIBC_2.3.2 of pthread_cond_wait, GLIBC_2.29 of exp); a
 * reference without one binds at load time to the symbol's oldest version
 * (realpath(p, NULL) then fails with EINVAL: exec.difftest.g_versioned_libc_symbols). */
static int loaded_libc(const char **libc, const char **libm) {
  static const char *c, *m; /* looked up once: what is loaded does not change */
  static int probed;
  if (!probed) {
    double (*volatile cos_fn)(double) = cos; /* a libm function, as loaded here */
    c = loaded_from((const void *)&printf);
    m = loaded_from((const void *)cos_fn);
    probed = 1;
  }
  *libc = c;
  *libm = m;
  return c && m;
}

/* The paths of one compile: WORKDIR/cell_TAG.{c,cu,so,so.tmp,warnings}
 * and the -I/-L/rpath words that point at nbfork's header and library. */
typedef struct {
  char src[PATH_MAX], so[PATH_MAX], tmp[PATH_MAX], warn[PATH_MAX];
  char inc[PATH_MAX], libp[PATH_MAX], rpath[PATH_MAX];
} ex_paths_t;

/* 0, or -1 when a directory is too long for a path. */
static int paths_init(ex_paths_t *p, const ex_toolchain_t *tc, const char *tag, int cuda) {
  const char *wd = tc->workdir;
  int fits =
      snprintf(p->src, sizeof p->src, "%s/cell_%s.%s", wd, tag, cuda ? "cu" : "c") < PATH_MAX;
  fits &= snprintf(p->so, sizeof p->so, "%s/cell_%s.so", wd, tag) < PATH_MAX;
  fits &= snprintf(p->tmp, sizeof p->tmp, "%s/cell_%s.so.tmp", wd, tag) < PATH_MAX;
  fits &= snprintf(p->warn, sizeof p->warn, "%s/cell_%s.warnings", wd, tag) < PATH_MAX;
  fits &= snprintf(p->inc, sizeof p->inc, "-I%s", tc->incdir) < PATH_MAX;
  fits &= snprintf(p->libp, sizeof p->libp, "-L%s", tc->libdir) < PATH_MAX;
  fits &= snprintf(p->rpath, sizeof p->rpath, "%s%s", cuda ? "-rpath=" : "-Wl,-rpath,",
                   tc->libdir) < PATH_MAX;
  return fits ? 0 : -1;
}

/* The driver and the flags every cell gets, before the user's flags. */
static int argv_head(ex_argv_t *a, const ex_toolchain_t *tc, int cuda, const char *nonshared,
                     const ex_paths_t *p) {
  static const char *const c_head[] = {
      "-std=gnu11", "-fPIC", "-shared", "-pipe", "-fdiagnostics-color=never", NULL};
  /* nvcc compiles the unit as C++ (extern "C" entry points) */
  static const char *const cuda_head[] = {"-Xcompiler", "-fPIC", "-shared", NULL};
  int bad = argv_push(a, cuda ? tc->nvcc : tc->cc);
  for (const char *const *w = cuda ? cuda_head : c_head; *w; w++)
    bad |= argv_push(a, *w);
  if (nonshared)
    bad |= argv_push(a, "-nodefaultlibs");
  /* GCC counts columns in display cells only where it can read the file
   * (a `#line "cell[3]"` unit it cannot): bytes, always, which ex_diag
   * turns into the cell's characters. Clang counts bytes already. */
  if (!cuda && !strstr(tc->cc, "clang")) {
    bad |= argv_push(a, "-fdiagnostics-column-unit=byte");
    /* collect2 would have ld load GCC's LTO plugin (liblto_plugin.so) for
     * every cell, though no cell object is LTO bytecode unless %cflags
     * says -flto, which GCC then links without the plugin: 2-4 ms of a
     * trivial cell's ~30 (bench/kernel_latency.py, issue 15) */
    bad |= argv_push(a, "-fno-use-linker-plugin");
  }
  /* `#include "mylib.h"` finds headers next to the notebook (the
   * executor's directory), not only next to the generated source */
  if (cuda)
    bad |= argv_push(a, "-I.");
  else
    bad |= argv_push(a, "-iquote") | argv_push(a, ".");
  return bad | argv_push(a, p->inc);
}

/* The whole command line: head, user flags (%cflags or NBFORK_NVCCFLAGS),
 * output and input, nbfork's library, %ldflags, then the runtime
 * libraries. EX_OK, EX_ERR_USAGE or EX_ERR_NOMEM (message in out). */
static ex_result_t build_argv(ex_argv_t *a, const ex_toolchain_t *tc, int cuda, const ex_paths_t *p,
                              nbf_buf_t *out) {
  /* C cells link libnbfork, libgcc (static), glibc's small static part
   * and the executor's own libc.so.6/libm.so.6 by path (loaded_libc), not
   * the default libraries through libc.so's linker script and the search
   * path: a quarter of a trivial cell's compile time less, and the same
   * versioned references a default link records. */
  const char *libc = NULL, *libm = NULL;
  const char *nonshared = cuda || !loaded_libc(&libc, &libm) ? NULL : libc_nonshared(tc->cc);
  ex_result_t r = argv_head(a, tc, cuda, nonshared, p) ? EX_ERR_NOMEM : EX_OK;
  if (r == EX_OK)
    r = argv_words(a, cuda ? tc->nvccflags : tc->cflags, "compiler", out);
  if (r != EX_OK)
    return r;
  int bad =
      argv_push(a, "-o") | argv_push(a, p->tmp) | argv_push(a, p->src) | argv_push(a, p->libp);
  if (tc->memsyms) /* an input file ld reads as a script: PROVIDE(v__cTAG = ADDR); */
    bad |= (cuda ? argv_push(a, "-Xlinker") : 0) | argv_push(a, tc->memsyms);
  if (cuda)
    bad |= argv_push(a, "-Xlinker");
  bad |= argv_push(a, p->rpath) | argv_push(a, "-lnbfork");
  if (bad)
    return EX_ERR_NOMEM;
  EX_CHECK(argv_words(a, tc->ldflags, "linker", out));
  if (nonshared)
    bad = argv_push(a, "-lgcc") | argv_push(a, nonshared) | argv_push(a, libc) | argv_push(a, libm);
  else
    bad = argv_push(a, "-lm");
  return bad ? EX_ERR_NOMEM : EX_OK;
}

/* The child: its own process group (an interrupt kills the driver and
 * cc1, as, ld, or nvcc's helpers, at once), output into the pipe. */
static void exec_compiler(char **argv, int out_fd, int cuda) {
  setpgid(0, 0);
  umask(077); /* objects 0600/0700: no other user may replace one before dlopen */
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  setenv("LC_ALL", "C", 1); /* plain ASCII quotes in diagnostics */
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0)
    dup2(devnull, 0);
  /* the kernel interrupts the executor, never the compiler */
  signal(SIGINT, SIG_DFL);
  execvp(argv[0], argv);
  dprintf(2, "cannot run the compiler '%s': %s (set %s)\n", argv[0], NBF_STRERROR(errno),
          cuda ? "NBFORK_NVCC" : "NBFORK_CC");
  _exit(127);
}

static int stop_requested(const ex_toolchain_t *tc) {
  return tc->interrupted && *tc->interrupted;
}

/* Run argv, its output (stdout and stderr) appended to out, and wait.
 * EX_OK with *status the wait status, EX_ERR_INTERRUPTED when
 * *tc->interrupted became set (the process group is killed), or
 * EX_ERR_SYSTEM when pipe or fork failed (the reason in out). */
static ex_result_t run_compiler(const ex_toolchain_t *tc, char **argv, int cuda, nbf_buf_t *out,
                                int *status) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC)) {
    nbf_buf_printf(out, "pipe: %s\n", NBF_STRERROR(errno));
    return EX_ERR_SYSTEM;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    nbf_buf_printf(out, "fork: %s\n", NBF_STRERROR(errno));
    close(pfd[0]);
    close(pfd[1]);
    return EX_ERR_SYSTEM;
  }
  if (pid == 0)
    exec_compiler(argv, pfd[1], cuda);
  setpgid(pid, pid); /* also here: no race with the child's own call */
  close(pfd[1]);
  char buf[4096];
  int killed = 0;
  for (;;) {
    if (stop_requested(tc)) {
      nbf_proc_kill(pid);
      killed = 1;
      break;
    }
    ssize_t r = read(pfd[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    nbf_buf_append(out, buf, (size_t)r);
  }
  close(pfd[0]);
  *status = 0;
  while (waitpid(pid, status, 0) < 0 && errno == EINTR)
    if (stop_requested(tc) && !killed) {
      nbf_proc_kill(pid);
      killed = 1;
    }
  return killed || stop_requested(tc) ? EX_ERR_INTERRUPTED : EX_OK;
}

/* Everything after the cache check: write the source, build the command
 * line, run it, and keep the object under its final name. */
static ex_result_t compile_unit(const ex_toolchain_t *tc, const char *source, int cuda,
                                const ex_paths_t *p, nbf_buf_t *out) {
  if (cuda && !tc->nvcc) {
    nbf_buf_printf(out, "no CUDA compiler (nvcc) found: install the CUDA toolkit or set "
                        "NBFORK_NVCC to nvcc's path\n");
    return EX_ERR_SYSTEM;
  }
  if (write_file(p->src, source)) {
    nbf_buf_printf(out, "cannot write %s: %s\n", p->src, NBF_STRERROR(errno));
    return EX_ERR_SYSTEM;
  }
  ex_argv_t a = {0};
  int status = 0;
  ex_result_t r = build_argv(&a, tc, cuda, p, out);
  if (r == EX_ERR_NOMEM)
    nbf_buf_printf(out, "out of memory building the compiler's command line (%d words)\n", a.n);
  if (r == EX_OK)
    r = run_compiler(tc, a.v, cuda, out, &status);
  argv_free(&a);
  int ok = r == EX_OK && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  /* the warnings are kept beside the object, for a cached re-run to show
   * them again (a failed write only loses that) */
  if (ok && out->len)
    (void)write_file(p->warn, out->data);
  if (ok && rename(p->tmp, p->so) == 0)
    return EX_OK;
  unlink(p->tmp);
  if (r != EX_OK)
    return r;
  /* 127: the compiler could not be run at all (exec_compiler said why) */
  return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? EX_ERR_SYSTEM : EX_ERR_COMPILE;
}

/* A cached object: the warnings its compile gave, appended to out. */
static void replay_warnings(const ex_paths_t *p, nbf_buf_t *out) {
  FILE *f = fopen(p->warn, "r");
  if (!f)
    return;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    nbf_buf_append(out, chunk, n);
  fclose(f);
}

/* The unit through TinyCC (ex_jit_cell_so), which reads it from memory:
 * 0, or -1 to use the system compiler (which writes the source itself).
 * On success the source is written too, as the system compiler's path
 * does, so a kept work directory (NBFORK_KEEP_WORKDIR) shows every cell. */
static int tinycc_unit(const ex_toolchain_t *tc, const char *source, int cuda,
                       const ex_paths_t *p) {
  if (!tc->tinycc || cuda)
    return -1;
  /* private as the system compiler's objects are (its child runs under
   * umask 077): TinyCC writes from this process */
  const char *libs[3] = {NULL, NULL, NULL};
  /* an object dlopen() binds links libc and libm (ex_jit.h) */
  if (!tc->in_memory && !loaded_libc(&libs[0], &libs[1]))
    return -1;
  mode_t mask = umask(077);
  int rc = ex_jit_cell_so(source, tc->incdir, p->tmp, tc->in_memory ? NULL : libs);
  umask(mask);
  if (rc)
    return -1;
  if (write_file(p->src, source) == 0 && rename(p->tmp, p->so) == 0)
    return 0;
  unlink(p->tmp);
  return -1;
}

ex_result_t ex_compile(const ex_toolchain_t *tc, const char *source, const char *tag, int cuda,
                       char **so_path, char **diag) {
  *so_path = NULL;
  *diag = NULL;
  ex_paths_t *p = malloc(sizeof *p); /* 24 KiB: not on the stack */
  nbf_buf_t out = {0};
  ex_result_t r = EX_ERR_NOMEM;
  struct stat st;
  if (p && paths_init(p, tc, tag, cuda)) {
    nbf_buf_printf(&out, "the work directory's path is too long: %s\n", tc->workdir);
    r = EX_ERR_SYSTEM;
  } else if (p) {
    /* compile cache: same unit, same flags */
    if (stat(p->so, &st) == 0) {
      replay_warnings(p, &out);
      r = EX_OK;
    } else {
      r = tinycc_unit(tc, source, cuda, p) == 0 ? EX_OK
          : tc->tinycc == 2                     ? EX_ERR_COMPILE
                                                : compile_unit(tc, source, cuda, p, &out);
    }
    if (r == EX_OK && !(*so_path = strdup(p->so)))
      r = EX_ERR_NOMEM;
  }
  if (out.len)
    *diag = nbf_buf_take(&out);
  nbf_buf_free(&out);
  free(p);
  return r;
}

static int is_exec(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

char *ex_compile_find_nvcc(void) {
  const char *env = nbf_param_raw(NBF_P_NBFORK_NVCC);
  if (env && *env) {
    if (strchr(env, '/'))
      return is_exec(env) ? strdup(env) : NULL;
    /* a bare name: look it up on PATH below */
  }
  const char *name = env && *env ? env : "nvcc";
  const char *path = nbf_param_raw(NBF_P_PATH);
  char cand[4096];
  if (path) {
    for (const char *p = path; *p;) {
      const char *e = strchr(p, ':');
      size_t n = e ? (size_t)(e - p) : strlen(p);
      if (n && snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, name) < (int)sizeof cand &&
          is_exec(cand))
        return strdup(cand);
      if (!e)
        break;
      p = e + 1;
    }
  }
  if (env && *env)
    return NULL;
  const char *home = nbf_param_raw(NBF_P_CUDA_HOME);
  if (home && *home && snprintf(cand, sizeof cand, "%s/bin/nvcc", home) < (int)sizeof cand &&
      is_exec(cand))
    return strdup(cand);
  if (is_exec("/usr/local/cuda/bin/nvcc"))
    return strdup("/usr/local/cuda/bin/nvcc");
  return NULL;
}
