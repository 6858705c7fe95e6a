/*
 * nbf_cluster.c — Slurm hostlists and ports (see nbf_cluster.h).
 */
#include "nbf_cluster.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

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
