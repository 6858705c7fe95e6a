/*
 * nbf_param.c — the table of nbf_params.def and its reader.
 */
#define _GNU_SOURCE
#include "nbf_param.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static const nbf_param_t table[NBF_P_COUNT] = {
#define NBF_PARAM(name, type, dflt, reader, doc) {#name, NBF_PARAM_##type, dflt, reader, doc},
#include "nbf_params.def"
#undef NBF_PARAM
};

const nbf_param_t *nbf_param_info(nbf_param_id_t id) {
  return (unsigned)id < NBF_P_COUNT ? &table[id] : NULL;
}

const char *nbf_param_name(nbf_param_id_t id) {
  return (unsigned)id < NBF_P_COUNT ? table[id].name : "";
}

const char *nbf_param_exact(nbf_param_id_t id) {
  return (unsigned)id < NBF_P_COUNT ? getenv(table[id].name) : NULL;
}

const char *nbf_param_raw(nbf_param_id_t id) {
  const char *v = nbf_param_exact(id);
  return v && *v ? v : NULL;
}

const char *nbf_param_str(nbf_param_id_t id) {
  const char *v = nbf_param_raw(id);
  return v ? v : (unsigned)id < NBF_P_COUNT ? table[id].default_str : NULL;
}

static int parse_long(const char *s, long *out) {
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || end == s || *end)
    return -1;
  *out = x;
  return 0;
}

int nbf_param_long(nbf_param_id_t id, long *out) {
  const char *s = nbf_param_str(id);
  return s ? parse_long(s, out) : 1;
}

int nbf_param_double(nbf_param_id_t id, double *out) {
  const char *s = nbf_param_str(id);
  if (!s)
    return 1;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(x))
    return -1;
  *out = x;
  return 0;
}

int nbf_truthy(const char *s) {
  static const char *const yes[] = {"1", "true", "yes", "on", "y"};
  if (!s)
    return 0;
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
    if (strcasecmp(s, yes[i]) == 0)
      return 1;
  return 0;
}

int nbf_param_bool(nbf_param_id_t id) {
  const char *s = nbf_param_str(id);
  return s ? nbf_truthy(s) : -1;
}

int nbf_param_bool_strict(nbf_param_id_t id, int *out) {
  static const char *const no[] = {"0", "false", "no", "off", "n"};
  const char *s = nbf_param_str(id);
  if (!s)
    return 1;
  if (nbf_truthy(s)) {
    *out = 1;
    return 0;
  }
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  return -1;
}

int nbf_param_set(nbf_param_id_t id, const char *value) {
  if ((unsigned)id >= NBF_P_COUNT || !value) {
    errno = EINVAL;
    return -1;
  }
  return setenv(table[id].name, value, 1);
}

int nbf_param_set_long(nbf_param_id_t id, long value) {
  char b[32];
  snprintf(b, sizeof b, "%ld", value);
  return nbf_param_set(id, b);
}

int nbf_param_unset(nbf_param_id_t id) {
  if ((unsigned)id >= NBF_P_COUNT) {
    errno = EINVAL;
    return -1;
  }
  return unsetenv(table[id].name);
}

const char *nbf_env_get(const char *name) {
  return name ? getenv(name) : NULL;
}
