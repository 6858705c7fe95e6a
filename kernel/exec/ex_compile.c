/*
 * ex_compile.c — compiler invocation and diagnostics capture.
 */
#define _GNU_SOURCE
#include "ex_compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include "ex_buf.h"

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

int ex_compile(const ex_toolchain_t *tc, const char *source, const char *tag, int cuda,
               char **so_path, char **diag) {
  *so_path = NULL;
  *diag = NULL;
  char *src = dup_printf(cuda ? "%s/cell_%s.cu" : "%s/cell_%s.c", tc->workdir, tag);
  char *so = dup_printf("%s/cell_%s.so", tc->workdir, tag);
  char *tmp = dup_printf("%s/cell_%s.so.tmp", tc->workdir, tag);
  char *inc = dup_printf("-I%s%s", tc->incdir, "");
  char *libp = dup_printf("-L%s%s", tc->libdir, "");
  char *rpath = dup_printf("-Wl,-rpath,%s%s", tc->libdir, "");
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
  if (write_file(src, source)) {
    ex_buf_printf(&out, "cannot write %s: %s\n", src, strerror(errno));
    goto done;
  }
  char *argv[128];
  int argc = 0;
  if (cuda) {
    argv[argc++] = (char *)tc->nvcc;
    argv[argc++] = "-Xcompiler";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-shared";
  } else {
    argv[argc++] = (char *)tc->cc;
    argv[argc++] = "-std=gnu11";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-shared";
    argv[argc++] = "-fdiagnostics-color=never";
    argv[argc++] = "-pipe";
  }
  argv[argc++] = inc;
  argc = add_words(argv, argc, 100, tc->cflags, &we_c);
  if (argc < 0) {
    ex_buf_printf(&out, "cannot parse compiler flags: %s\n", tc->cflags);
    goto done;
  }
  have_c = tc->cflags && *tc->cflags;
  argv[argc++] = "-o";
  argv[argc++] = tmp;
  argv[argc++] = src;
  /* No -lnbfork: the executor has libnbfork loaded in its global scope,
   * where dlopen resolves the cell's references (linking it again costs
   * ~10 ms per cell for the linker to walk its dependencies). The search
   * path still serves %ldflags libraries installed beside it. */
  argv[argc++] = libp;
  argv[argc++] = rpath;
  int base = argc;
  argc = add_words(argv, argc, 124, tc->ldflags, &we_l);
  if (argc < 0) {
    argc = base;
    ex_buf_printf(&out, "cannot parse linker flags: %s\n", tc->ldflags);
    goto done;
  }
  have_l = tc->ldflags && *tc->ldflags;
  argv[argc++] = "-lm";
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
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    setenv("LC_ALL", "C", 1); /* plain ASCII quotes in diagnostics */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    execvp(argv[0], argv);
    dprintf(2, "cannot run the compiler '%s': %s (set NBFORK_CC)\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  char buf[4096];
  for (;;) {
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
    ;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && rename(tmp, so) == 0) {
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

char *ex_compile_summary(const char *diag) {
  const char *p = diag ? strstr(diag, "error:") : NULL;
  if (!p)
    return strdup(diag && *diag ? "the compiler rejected the cell" : "compilation failed");
  const char *s = p;
  while (s > diag && s[-1] != '\n')
    s--;
  const char *e = strchr(p, '\n');
  size_t n = e ? (size_t)(e - s) : strlen(s);
  char *r = malloc(n + 1);
  if (r) {
    memcpy(r, s, n);
    r[n] = 0;
  }
  return r;
}
