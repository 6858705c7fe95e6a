/*
 * ln_probe.c — see ln_probe.h.
 */
#define _GNU_SOURCE
#include "ln_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbf_buf.h"
#include "nbf_util.h"

enum { NO_ANSWER = 0, ANSWERED = 1, LOCAL_FAILURE = -1, PENDING = 2 };

/* What a finished connect's errno says about the remote host. */
static int verdict(int err) {
  switch (err) {
  case EHOSTUNREACH:
  case ENETUNREACH:
  case ETIMEDOUT:
  case ENETDOWN:
  case EHOSTDOWN:
    return NO_ANSWER;
  default:
    return ANSWERED; /* connected, refused, reset: something answered */
  }
}

/* Start a non-blocking connect to ip:port; *state is PENDING with the
 * socket returned, or already decided (the socket then -1). */
static int start_connect(const char *ip, int port, int *state) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  *state = LOCAL_FAILURE;
  if (getaddrinfo(ip, service, &hints, &ai) != 0 || !ai)
    return -1;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      *state = ANSWERED;
    } else if (errno == EINPROGRESS) {
      *state = PENDING;
    } else {
      *state = verdict(errno);
    }
    if (*state != PENDING) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  return fd;
}

/* Probe every ip[i]:port at once (n <= ACC_STORE_MAX_PEERS); state[i]
 * gets its verdict. */
static void probe_all(char (*ip)[64], size_t n, int port, int timeout_ms, int *state) {
  int fd[ACC_STORE_MAX_PEERS];
  struct pollfd pfd[ACC_STORE_MAX_PEERS];
  for (size_t i = 0; i < n; i++)
    fd[i] = start_connect(ip[i], port, &state[i]);
  const int64_t deadline = nbf_now_ms() + timeout_ms;
  for (;;) {
    nfds_t pending = 0;
    for (size_t i = 0; i < n; i++) {
      pfd[i] = (struct pollfd){.fd = state[i] == PENDING ? fd[i] : -1, .events = POLLOUT};
      pending += state[i] == PENDING;
    }
    int left = (int)(deadline - nbf_now_ms());
    if (pending == 0 || left <= 0 || poll(pfd, n, left) < 0)
      break;
    for (size_t i = 0; i < n; i++) {
      if (state[i] != PENDING || !pfd[i].revents)
        continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd[i], SOL_SOCKET, SO_ERROR, &err, &len);
      state[i] = verdict(err);
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (state[i] == PENDING)
      state[i] = NO_ANSWER; /* the deadline passed */
    if (fd[i] >= 0)
      close(fd[i]);
  }
}

int ln_probe_tcp(const char *ip, int port, int timeout_ms) {
  char one[1][64];
  int state;
  if (!ip || strlen(ip) >= sizeof one[0])
    return LOCAL_FAILURE;
  strcpy(one[0], ip);
  probe_all(one, 1, port, timeout_ms, &state);
  return state;
}

/* Whether `addr` is one of this host's own addresses (or loopback). */
static int is_local(const char *addr, const struct ifaddrs *ifs) {
  if (!strncmp(addr, "127.", 4) || !strcmp(addr, "::1"))
    return 1;
  for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    char host[NI_MAXHOST];
    socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                       : sizeof(struct sockaddr_in6);
    if (getnameinfo(i->ifa_addr, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) == 0 &&
        !strcmp(host, addr))
      return 1;
  }
  return 0;
}

/* Node 0: the addresses its store's clients came from, this host's own
 * left out: its interfaces' (as they are now) and main_process_ip, node
 * 0's address, whose interface a cut may have taken away. Returns how
 * many are in out. */
static size_t other_nodes(const ln_options_t *o, const acc_store_server_t *srv,
                          char (*out)[64]) {
  char seen[ACC_STORE_MAX_PEERS][64];
  size_t n = acc_store_server_peers(srv, seen, ACC_STORE_MAX_PEERS), k = 0;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    ifs = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(seen[i], o->master_addr) && !is_local(seen[i], ifs))
      memcpy(out[k++], seen[i], sizeof out[0]);
  if (ifs)
    freeifaddrs(ifs);
  return k;
}

char *ln_probe_lost_nodes(const ln_options_t *o, const acc_store_server_t *srv) {
  if (!o || o->num_nodes <= 1)
    return NULL;
  char addr[ACC_STORE_MAX_PEERS][64];
  size_t n = 0;
  if (o->node_rank != 0) {
    if (!o->master_addr[0] || strlen(o->master_addr) >= sizeof addr[0])
      return NULL;
    strcpy(addr[0], o->master_addr);
    n = 1;
  } else {
    n = other_nodes(o, srv, addr);
  }
  /* a closed port answers as well as an open one (refused): any will do */
  int port = o->use_port > 0 ? o->use_port : 9, state[ACC_STORE_MAX_PEERS];
  probe_all(addr, n, port, LN_PROBE_MS, state);
  nbf_buf_t b = {0};
  for (size_t i = 0; i < n; i++) {
    if (state[i] != NO_ANSWER)
      continue;
    if (o->node_rank != 0)
      nbf_buf_printf(&b, "node 0 at [%s] (main_process_ip, its store on port %d)", addr[i], port);
    else
      nbf_buf_printf(&b, "the node at [%s] (it joined this launch's store)", addr[i]);
    nbf_buf_printf(&b,
                   " does not answer this node (no TCP answer within %d ms): the network between "
                   "the nodes failed or that node went down; the failures below followed\n",
                   LN_PROBE_MS);
  }
  return b.len ? nbf_buf_take(&b) : (nbf_buf_free(&b), NULL);
}
