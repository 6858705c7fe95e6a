/*
 * acc_netif.c — which local address does this host use to reach
 * MASTER_ADDR? Gloo's TCP device listens on that address, so peers on
 * other nodes can reach it, and on 127.0.0.1 for single-node runs.
 *
 * Method: connect() a UDP socket to MASTER_ADDR (sends nothing; the
 * kernel only picks a route) and read the source address with
 * getsockname().
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acc_internal.h"
#include "nbf_cluster.h"

int acc__local_addr_for(const char *host, char *out, size_t outlen) {
  if (!host || !*host || nbf_loopback_name(host)) {
    snprintf(out, outlen, "127.0.0.1");
    return 0;
  }
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || !res)
    return -1;
  int rc = -1;
  for (struct addrinfo *ai = res; ai && rc != 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
      const void *a = ss.ss_family == AF_INET
                          ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                          : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
      if (inet_ntop(ss.ss_family, a, out, (socklen_t)outlen))
        rc = 0;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return rc;
}
