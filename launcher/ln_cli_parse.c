/*
 * ln_cli_parse.c — `nbfork launch`'s command line (see ln_cli_parse.h):
 * the config file first, then the options over it, then Slurm's
 * allocation. Above ln_cli.c (the settings), ln_config.c and ln_slurm.c,
 * which all set settings through ln_cli_set.
 */
#define _GNU_SOURCE
#include "ln_cli_parse.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ln_config.h"
#include "ln_slurm.h"

static int is_flag(const char *name) {
  return !strcmp(name, "cpu") || !strcmp(name, "debug") || !strcmp(name, "quiet") ||
         !strcmp(name, "same_network");
}

/* One option word at argv[*i]: "--name", "--name=value" or "-q". Puts
 * the name and value in *name and *value (value points into argv or
 * "true"); a value in the next word advances *i. */
static int option_word(int argc, char **argv, int *i, char *name, size_t cap, const char **value,
                       char *err, size_t errlen) {
  const char *a = argv[*i];
  if (!strcmp(a, "-q")) {
    snprintf(name, cap, "quiet");
    *value = "true";
    return 0;
  }
  const char *body = a + 2, *eq = strchr(body, '=');
  size_t n = eq ? (size_t)(eq - body) : strlen(body);
  if (n >= cap)
    n = cap - 1;
  memcpy(name, body, n);
  name[n] = 0;
  for (char *p = name; *p; p++)
    if (*p == '-')
      *p = '_'; /* Accelerate accepts --num-processes as well */
  if (eq)
    *value = eq + 1;
  else if (is_flag(name))
    *value = "true";
  else if (*i + 1 < argc)
    *value = argv[++*i];
  else {
    snprintf(err, errlen, "option --%s needs a value (e.g. --%s 2)", name, name);
    return -1;
  }
  return 0;
}

/* The config file: the one named, else the default one when it exists. */
static int load_config(ln_cli_t *c, const char *named, char *err, size_t errlen) {
  char path[PATH_MAX];
  if (named)
    snprintf(path, sizeof path, "%s", named);
  else if (ln_cli_default_config_path(path, sizeof path) != 0 || access(path, F_OK) != 0)
    return 0;
  c->loading_config = 1;
  int rc = ln_config_load(c, path, err, errlen);
  c->loading_config = 0;
  /* named in messages that say a setting of it was not used */
  snprintf(c->config_file, sizeof c->config_file, "%s", path);
  return rc;
}

int ln_cli_parse(ln_cli_t *c, int argc, char **argv, char *err, size_t errlen) {
  /* first pass: find PROGRAM and the config file, check every name */
  const char *config = NULL;
  int prog = -1;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] != '-' || !strcmp(argv[i], "-")) {
      prog = i;
      break;
    }
    if (!strcmp(argv[i], "--")) {
      prog = i + 1 < argc ? i + 1 : -1;
      break;
    }
    char name[64];
    const char *v;
    if (argv[i][1] != '-' && strcmp(argv[i], "-q")) {
      ln_cli_unknown_message("unknown option", argv[i], err, errlen);
      return -1;
    }
    const char *word = argv[i];
    if (option_word(argc, argv, &i, name, sizeof name, &v, err, errlen))
      return -1;
    if (!ln_cli_known(name)) {
      ln_cli_unknown_message("unknown option", word, err, errlen);
      return -1;
    }
    if (!strcmp(name, "config_file"))
      config = v;
    else if (ln_cli_set(&(ln_cli_t){0}, name, v, err, errlen))
      return -1; /* unknown name or bad value: before the config is read */
  }
  if (prog < 0) {
    snprintf(err, errlen, "no PROGRAM given: nbfork launch [options] PROGRAM [ARGS...]");
    return -1;
  }
  if (load_config(c, config, err, errlen))
    return -1;
  /* second pass: the command line over the config */
  for (int i = 0; i < prog && strcmp(argv[i], "--"); i++) {
    char name[64];
    const char *v;
    option_word(argc, argv, &i, name, sizeof name, &v, err, errlen);
    if (ln_cli_set(c, name, v, err, errlen))
      return -1;
  }
  if (ln_slurm_apply(c, err, errlen) < 0)
    return -1;
  return prog;
}
