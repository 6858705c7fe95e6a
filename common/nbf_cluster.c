/*
 * nbf_cluster.c — Slurm hostlists and ports (see nbf_cluster.h).
 */
#define _GNU_SOURCE
#include "nbf_cluster.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int nbf_slurm_first_node(const char *list, char *out, size_t outlen) {
  size_t n = 0;
  const char *p = list ? list : "";
  /* a name ends at the first top-level comma; a bracket holds ranges,
   * of which the first number stands for the first host */
  while (*p && *p != ',') {
    if (*p == '[') {
      p++;
      while (*p && (isdigit((unsigned char)*p))) {
        if (n + 1 >= outlen)
          goto toolong;
        out[n++] = *p++;
      }
      while (*p && *p != ']')
        p++;
      if (*p)
        p++;
      continue;
    }
    if (n + 1 >= outlen)
      goto toolong;
    out[n++] = *p++;
  }
  if (n == 0) {
    errno = EINVAL;
    return -1;
  }
  out[n] = 0;
  return 0;
toolong:
  errno = EINVAL;
  return -1;
}

int nbf_slurm_port(const char *job_id) {
  size_t n = job_id ? strlen(job_id) : 0;
  if (n == 0 || strspn(job_id, "0123456789") != n)
    return -1;
  const char *last4 = job_id + (n > 4 ? n - 4 : 0);
  int v = 0;
  for (; *last4; last4++)
    v = v * 10 + (*last4 - '0');
  return 15000 + v;
}

int nbf_loopback_name(const char *master_addr) {
  return master_addr && (!strcmp(master_addr, "127.0.0.1") || !strcmp(master_addr, "localhost"));
}

int nbf_resolve(const char *name) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(name, NULL, &hints, &res);
  if (res)
    freeaddrinfo(res);
  return rc;
}

/* NodeAddr=... from scontrol's one-line answer. Names come from Slurm's
 * own environment, and are checked to hold no shell characters. */
static int scontrol_addr(const char *name, char *out, size_t outlen) {
  if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
      strlen(name))
    return -1;
  char cmd[512];
  /* bounded: scontrol without a readable slurm.conf retries for a minute */
  snprintf(cmd, sizeof cmd, "timeout 10 scontrol -o show node %s 2>/dev/null", name);
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char line[8192];
  int rc = -1;
  if (fgets(line, sizeof line, p)) {
    char *a = strstr(line, "NodeAddr=");
    if (a) {
      a += 9;
      size_t n = strcspn(a, " \n");
      if (n > 0 && n < outlen) {
        memcpy(out, a, n);
        out[n] = 0;
        rc = 0;
      }
    }
  }
  pclose(p);
  return rc;
}

int nbf_slurm_node_addr(const char *name, char *out, size_t outlen) {
  if (nbf_resolve(name) == 0)
    return snprintf(out, outlen, "%s", name) < (int)outlen ? 0 : -1;
  return scontrol_addr(name, out, outlen);
}
