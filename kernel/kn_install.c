/* kn_install.c — the install subcommand (see kn_install.h). */
#define _GNU_SOURCE
#include "kn_install.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kn_log.h"
#include "nbf_param.h"
#include "nbf_util.h"

#ifndef NBFORK_KERNELSPEC_SOURCE_DIR
#define NBFORK_KERNELSPEC_SOURCE_DIR ""
#endif

static int usage(FILE *f) {
  fprintf(f, "usage: nbfork-kernel install [--user | --prefix DIR] [--name NAME]\n"
             "  --user         install into the user's Jupyter data dir\n"
             "                 ($JUPYTER_DATA_DIR or ~/.local/share/jupyter)\n"
             "  --prefix DIR   install into DIR/share/jupyter\n"
             "                 (default: /usr/local/share/jupyter)\n"
             "  --name NAME    kernelspec name (default: nbfork)\n");
  return f == stderr ? 2 : 0;
}

static int mkdir_p(const char *path) {
  char tmp[PATH_MAX];
  int n = snprintf(tmp, sizeof tmp, "%s", path);
  if (n < 0 || (size_t)n >= sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  if (!in)
    return -1;
  FILE *out = fopen(to, "wb");
  if (!out) {
    fclose(in);
    return -1;
  }
  char buf[65536];
  size_t n;
  int rc = 0;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n)
      rc = -1;
  if (ferror(in))
    rc = -1;
  fclose(in);
  if (fclose(out) != 0)
    rc = -1;
  return rc;
}

static int valid_name(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '.' || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

static void user_data_dir(char *out, size_t len) {
  const char *v = nbf_param_raw(NBF_P_JUPYTER_DATA_DIR);
  if (v) {
    snprintf(out, len, "%s", v);
    return;
  }
  v = nbf_param_raw(NBF_P_XDG_DATA_HOME);
  if (v) {
    snprintf(out, len, "%s/jupyter", v);
    return;
  }
  const char *home = nbf_param_raw(NBF_P_HOME);
  snprintf(out, len, "%s/.local/share/jupyter", home ? home : ".");
}

/* The kernelspec/ folder with the logos: next to the binary's install
 * tree (BIN/../share/nbfork/kernelspec), else the source tree's. */
static int find_logo_dir(const char *self, char *out, size_t len) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", self);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  const char *candidates[2] = {NULL, NBFORK_KERNELSPEC_SOURCE_DIR};
  char installed[PATH_MAX + 32];
  snprintf(installed, sizeof installed, "%s/../share/nbfork/kernelspec", dir);
  candidates[0] = installed;
  for (int i = 0; i < 2; i++) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/logo-64x64.png", candidates[i]);
    if (candidates[i][0] && access(probe, R_OK) == 0) {
      snprintf(out, len, "%s", candidates[i]);
      return 0;
    }
  }
  return -1;
}

int kn_install_main(int argc, char **argv) {
  const char *prefix = NULL, *name = "nbfork";
  int user = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--user") == 0)
      user = 1;
    else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc)
      prefix = argv[++i];
    else if (strncmp(argv[i], "--prefix=", 9) == 0)
      prefix = argv[i] + 9;
    else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
      name = argv[++i];
    else if (strncmp(argv[i], "--name=", 7) == 0)
      name = argv[i] + 7;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return usage(stdout);
    else {
      fprintf(stderr, "nbfork-kernel install: unknown or incomplete option '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (user && prefix) {
    fprintf(stderr, "nbfork-kernel install: --user and --prefix exclude each other\n");
    return usage(stderr);
  }
  if (!valid_name(name)) {
    fprintf(stderr,
            "nbfork-kernel install: invalid kernel name '%s' (use letters, digits, '.', '_', "
            "'-')\n",
            name);
    return 2;
  }

  char self[PATH_MAX];
  if (nbf_self_exe(self, sizeof self) != 0) {
    fprintf(stderr, "nbfork-kernel install: cannot resolve /proc/self/exe\n");
    return 1;
  }
  char data[PATH_MAX], dest[PATH_MAX + 64];
  if (user)
    user_data_dir(data, sizeof data);
  else if (prefix)
    snprintf(data, sizeof data, "%s/share/jupyter", prefix);
  else
    snprintf(data, sizeof data, "/usr/local/share/jupyter");
  snprintf(dest, sizeof dest, "%s/kernels/%s", data, name);
  if (mkdir_p(dest) != 0) {
    fprintf(stderr, "nbfork-kernel install: cannot create %s: %s%s\n", dest, NBF_STRERROR(errno),
            (!user && !prefix) ? " (try --user, or run as root)" : "");
    return 1;
  }

  json_t *spec = json_pack("{s:[s, s, s], s:s, s:s, s:s, s:{}}", "argv", self, "-f",
                           "{connection_file}", "display_name", "C (nbfork)", "language", "c",
                           "interrupt_mode", "signal", "metadata");
  char path[PATH_MAX + 128];
  snprintf(path, sizeof path, "%s/kernel.json", dest);
  if (!spec || json_dump_file(spec, path, JSON_INDENT(2)) != 0) {
    fprintf(stderr, "nbfork-kernel install: cannot write %s\n", path);
    json_decref(spec);
    return 1;
  }
  json_decref(spec);

  char logos[PATH_MAX];
  if (find_logo_dir(self, logos, sizeof logos) == 0) {
    static const char *const files[] = {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      char from[PATH_MAX + 64], to[PATH_MAX + 192];
      snprintf(from, sizeof from, "%s/%s", logos, files[i]);
      snprintf(to, sizeof to, "%s/%s", dest, files[i]);
      if (access(from, R_OK) == 0 && copy_file(from, to) != 0)
        fprintf(stderr, "nbfork-kernel install: warning: could not copy %s\n", from);
    }
  }
  printf("Installed kernelspec %s in %s\n", name, dest);
  return 0;
}
