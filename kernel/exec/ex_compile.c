/*
 * ex_compile.c — compiler invocation and diagnostics capture.
 */
#define _GNU_SOURCE
#include "ex_compile.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include "ex_buf.h"
#include "nbf_param.h"

static char *dup_printf(const char *fmt, const char *a, const char *b) {
  size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
  char *r = malloc(n);
  if (r)
    snprintf(r, n, fmt, a, b);
  return r;
}

static int write_file(const char *path, const char *data) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  size_t len = strlen(data), off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  return close(fd);
}

/* Append the words of `flags` (shell-like quoting, no command
 * substitution) to argv. Returns the new argc or -1. */
static int add_words(char **argv, int argc, int max, const char *flags, wordexp_t *we) {
  if (!flags || !*flags)
    return argc;
  if (wordexp(flags, we, WRDE_NOCMD) != 0)
    return -1;
  for (size_t i = 0; i < we->we_wordc && argc < max - 1; i++)
    argv[argc++] = we->we_wordv[i];
  return argc;
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

int ex_compile(const ex_toolchain_t *tc, const char *source, const char *tag, int cuda,
               char **so_path, char **diag) {
  *so_path = NULL;
  *diag = NULL;
  char *src = dup_printf(cuda ? "%s/cell_%s.cu" : "%s/cell_%s.c", tc->workdir, tag);
  char *so = dup_printf("%s/cell_%s.so", tc->workdir, tag);
  char *tmp = dup_printf("%s/cell_%s.so.tmp", tc->workdir, tag);
  char *inc = dup_printf("-I%s%s", tc->incdir, "");
  char *libp = dup_printf("-L%s%s", tc->libdir, "");
  char *rpath = dup_printf(cuda ? "-rpath=%s%s" : "-Wl,-rpath,%s%s", tc->libdir, "");
  wordexp_t we_c = {0}, we_l = {0};
  int have_c = 0, have_l = 0, rc = -1;
  ex_buf_t out = {0};
  if (!src || !so || !tmp || !inc || !libp || !rpath)
    goto done;
  struct stat stt;
  if (stat(so, &stt) == 0) { /* compile cache: same unit, same flags */
    *so_path = so;
    so = NULL;
    rc = 0;
    goto done;
  }
  if (cuda && !tc->nvcc) {
    ex_buf_printf(&out, "no CUDA compiler (nvcc) found: install the CUDA toolkit or set "
                        "NBFORK_NVCC to nvcc's path\n");
    goto done;
  }
  if (write_file(src, source)) {
    ex_buf_printf(&out, "cannot write %s: %s\n", src, strerror(errno));
    goto done;
  }
  char *argv[128];
  int argc = 0;
  const char *flags = cuda ? tc->nvccflags : tc->cflags;
  /* C cells link only libnbfork, libgcc (static) and glibc's small static
   * part: libc and libm are in the executor already and a cell's
   * references to them bind there when it is loaded (to the same default
   * symbol versions a link would record). Skipping the shared libc/libm
   * at link time saves a quarter of a trivial cell's compile time. */
  const char *nonshared = cuda ? NULL : libc_nonshared(tc->cc);
  if (cuda) {
    /* nvcc compiles the unit as C++ (extern "C" entry points) */
    argv[argc++] = (char *)tc->nvcc;
    argv[argc++] = "-Xcompiler";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-shared";
  } else {
    argv[argc++] = (char *)tc->cc;
    argv[argc++] = "-std=gnu11";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-shared";
    argv[argc++] = "-pipe";
    argv[argc++] = "-fdiagnostics-color=never";
    if (nonshared)
      argv[argc++] = "-nodefaultlibs";
  }
  /* `#include "mylib.h"` finds headers next to the notebook (the
   * executor's directory), not only next to the generated source */
  if (cuda) {
    argv[argc++] = "-I.";
  } else {
    argv[argc++] = "-iquote";
    argv[argc++] = ".";
  }
  argv[argc++] = inc;
  argc = add_words(argv, argc, 100, flags, &we_c);
  if (argc < 0) {
    ex_buf_printf(&out, "cannot parse compiler flags: %s\n", flags);
    goto done;
  }
  have_c = flags && *flags;
  argv[argc++] = "-o";
  argv[argc++] = tmp;
  argv[argc++] = src;
  argv[argc++] = libp;
  if (cuda)
    argv[argc++] = "-Xlinker";
  argv[argc++] = rpath;
  argv[argc++] = "-lnbfork";
  int base = argc;
  argc = add_words(argv, argc, 124, tc->ldflags, &we_l);
  if (argc < 0) {
    argc = base;
    ex_buf_printf(&out, "cannot parse linker flags: %s\n", tc->ldflags);
    goto done;
  }
  have_l = tc->ldflags && *tc->ldflags;
  if (nonshared) {
    argv[argc++] = "-lgcc";
    argv[argc++] = (char *)nonshared;
  } else {
    argv[argc++] = "-lm";
  }
  argv[argc] = NULL;

  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC)) {
    ex_buf_printf(&out, "pipe: %s\n", strerror(errno));
    goto done;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    ex_buf_printf(&out, "fork: %s\n", strerror(errno));
    close(pfd[0]);
    close(pfd[1]);
    goto done;
  }
  if (pid == 0) {
    /* its own process group: an interrupt kills the driver and cc1, as,
     * ld (or nvcc's helpers) at once */
    setpgid(0, 0);
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    setenv("LC_ALL", "C", 1); /* plain ASCII quotes in diagnostics */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    /* the kernel interrupts the executor, never the compiler */
    signal(SIGINT, SIG_DFL);
    execvp(argv[0], argv);
    dprintf(2, "cannot run the compiler '%s': %s (set %s)\n", argv[0], strerror(errno),
            cuda ? "NBFORK_NVCC" : "NBFORK_CC");
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no race with the child's own call */
  close(pfd[1]);
  char buf[4096];
  int killed = 0;
  for (;;) {
    if (tc->interrupted && *tc->interrupted) {
      kill(-pid, SIGKILL);
      killed = 1;
      break;
    }
    ssize_t r = read(pfd[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    ex_buf_append(&out, buf, (size_t)r);
  }
  close(pfd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    if (tc->interrupted && *tc->interrupted && !killed) {
      kill(-pid, SIGKILL);
      killed = 1;
    }
  if (killed || (tc->interrupted && *tc->interrupted)) {
    unlink(tmp);
    rc = 2;
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && rename(tmp, so) == 0) {
    *so_path = so;
    so = NULL;
    rc = 0;
  } else {
    unlink(tmp);
    rc = (WIFEXITED(status) && WEXITSTATUS(status) == 127) ? -1 : 1;
  }
done:
  if (have_c)
    wordfree(&we_c);
  if (have_l)
    wordfree(&we_l);
  if (out.len)
    *diag = ex_buf_take(&out);
  ex_buf_free(&out);
  free(src);
  free(so);
  free(tmp);
  free(inc);
  free(libp);
  free(rpath);
  return rc;
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

/* Does the n-byte line l contain `needle`? (memmem, without GCC 12's
 * -Wnonnull false positive under -fsanitize=undefined) */
static int line_has(const char *l, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (l[i] == needle[0] && !memcmp(l + i, needle, k))
      return 1;
  return 0;
}

/* Should this diagnostics line be hidden from the user? `cell_errors`:
 * the diagnostics report an error in the cell itself, so what follows
 * from it inside nbfork's generated helpers is noise. */
static int hidden_line(const char *l, size_t n, int cell_errors) {
  static const char *const hide[] = {"In function '__nbf_",
                                     "In function \xe2\x80\x98__nbf_", /* our wrappers */
                                     "some warnings being treated as errors",
                                     "in definition of macro '__nbf_",
                                     "in expansion of macro '__nbf_",
                                     NULL};
  if (n == 0)
    return 1;
  for (int i = 0; hide[i]; i++)
    if (line_has(l, n, hide[i]))
      return 1;
  /* lines pointing into nbfork's generated helpers: notes always, errors
   * when they only follow from an error in the cell */
  if (n > 9 && !strncmp(l, "<nbfork>:", 9) && (cell_errors || line_has(l, n, "note:")))
    return 1;
  return 0;
}

char *ex_compile_clean(const char *diag) {
  ex_buf_t out = {0};
  if (!diag)
    return strdup("");
  int cell_errors = 0;
  for (size_t off = 0; diag[off];) {
    const char *p = diag + off;
    size_t n = strcspn(p, "\n");
    if (line_has(p, n, "error") && strncmp(p, "<nbfork>:", 9) != 0)
      cell_errors = 1;
    off += n + (p[n] == '\n');
  }
  for (size_t off = 0; diag[off];) {
    const char *p = diag + off;
    size_t n = strcspn(p, "\n");
    off += n + (p[n] == '\n');
    if (!hidden_line(p, n, cell_errors)) {
      /* sq__c0123456789abcdef -> sq */
      ex_buf_t line = {0};
      for (size_t i = 0; i < n; i++) {
        if (i + 19 <= n && p[i] == '_' && p[i + 1] == '_' && p[i + 2] == 'c') {
          size_t h = 0;
          while (h < 16 && isxdigit((unsigned char)p[i + 3 + h]) &&
                 !isupper((unsigned char)p[i + 3 + h]))
            h++;
          if (h == 16 &&
              (i + 19 == n || !(isalnum((unsigned char)p[i + 19]) || p[i + 19] == '_'))) {
            i += 18;
            continue;
          }
        }
        ex_buf_append(&line, p + i, 1);
      }
      /* drop a line already shown (one error, expanded twice, is one) */
      int dup = 0;
      if (line.data && out.data) {
        for (const char *q = out.data; *q;) {
          const char *qe = strchr(q, '\n');
          size_t qn = qe ? (size_t)(qe - q) : strlen(q);
          if (qn == line.len && !memcmp(q, line.data, qn)) {
            dup = 1;
            break;
          }
          q = qe ? qe + 1 : q + qn;
        }
      }
      if (line.data && !dup) {
        ex_buf_append(&out, line.data, line.len);
        ex_buf_append(&out, "\n", 1);
      }
      ex_buf_free(&line);
    }
  }
  char *r = ex_buf_take(&out);
  return r ? r : strdup("");
}

char *ex_compile_summary(const char *diag) {
  /* the first compiler error; a linker's "collect2: error: ld returned"
   * only when nothing better is there */
  const char *best = NULL;
  for (const char *p = diag; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (line_has(p, n, "error") && strncmp(p, "collect2:", 9) != 0) {
      best = p;
      break;
    }
    if (!best && (line_has(p, n, "cannot find") || line_has(p, n, "undefined reference")))
      best = p;
    p = e ? e + 1 : p + n;
  }
  if (!best)
    best = diag && *diag ? diag : NULL;
  if (!best)
    return strdup("compilation failed");
  size_t n = strcspn(best, "\n");
  while (n && (best[n - 1] == ' ' || best[n - 1] == '\r'))
    n--;
  return strndup(best, n);
}
