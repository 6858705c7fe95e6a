/*
 * acc_shm.c — shared-memory collectives between the processes of one node
 * (acc_shm.h): the workspaces, created, mapped by the peers and freed.
 * The scheme follows DeepSpeed's csrc/cpu/comm/shm.cpp (per-rank
 * workspace, double buffers, per-rank state flags, naive all-reduce for
 * small messages, reduce-scatter + all-gather for large ones); the code
 * is this project's. The synchronisation is acc_shm_sync.c's, the
 * collectives acc_shm_ops.c's (their shared layout: acc_shm_internal.h).
 */
#define _GNU_SOURCE
#include "acc_shm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nbf_util.h"

void acc_shm_node_id(char *out, size_t n) {
  char host[64] = "", boot[40] = "", ns[48] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f))
      boot[0] = 0;
    fclose(f);
    boot[strcspn(boot, "\n")] = 0;
  }
  /* /proc/PID of a peer names the same process only within one pid
   * namespace */
  ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[k > 0 ? k : 0] = 0;
  snprintf(out, n, "%s|%s|%s", host, boot, ns);
}

acc_shm_t *acc_shm_create(acc_shm_card_t *card, const char *node_extra, char *err, size_t errlen) {
  memset(card, 0, sizeof *card);
  card->fd = -1;
  card->pid = (int32_t)getpid();
  char id[256];
  acc_shm_node_id(id, sizeof id);
  size_t k = strlen(id);
  snprintf(id + k, sizeof id - k, "|%s", node_extra ? node_extra : "");
  uint64_t fnv = 1469598103934665603ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)id; *p; p++)
    fnv = (fnv ^ *p) * 1099511628211ULL;
  card->node = fnv;
  acc_shm_t *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "no memory");
    return NULL;
  }
  s->fd = memfd_create("nbfork-shm", MFD_CLOEXEC);
  if (s->fd < 0 || ftruncate(s->fd, (off_t)SEG_BYTES) != 0) {
    snprintf(err, errlen, "memfd of %zu bytes: %s", SEG_BYTES, strerror(errno));
    goto fail;
  }
  s->mine = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (s->mine == MAP_FAILED) {
    s->mine = NULL;
    snprintf(err, errlen, "mmap of the workspace: %s", strerror(errno));
    goto fail;
  }
  hdr_t *h = (hdr_t *)s->mine;
  if (getrandom(&h->nonce, sizeof h->nonce, 0) != (ssize_t)sizeof h->nonce)
    h->nonce = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
  h->magic = SHM_MAGIC;
  h->pid = card->pid;
  card->fd = s->fd;
  card->nonce = h->nonce;
  card->ok = 1;
  s->lost = -1;
  return s;
fail:
  acc_shm_destroy(&s);
  return NULL;
}

/* Map member j's workspace through /proc/PID/fd/N and check it is the
 * one its card describes. */
static int map_peer(acc_shm_t *s, const acc_shm_card_t *c, int j, char *err, size_t errlen) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)c->pid, (int)c->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size != SEG_BYTES) {
    snprintf(err, errlen, "cannot open rank %d's workspace %s: %s", s->rank[j], path,
             fd < 0 ? strerror(errno) : "wrong size");
    if (fd >= 0)
      close(fd);
    return -1;
  }
  void *p = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "mmap of rank %d's workspace: %s", s->rank[j], strerror(errno));
    return -1;
  }
  s->seg[j] = p;
  const hdr_t *h = p;
  if (h->magic != SHM_MAGIC || h->nonce != c->nonce || h->pid != c->pid) {
    snprintf(err, errlen, "%s is not rank %d's workspace", path, s->rank[j]);
    return -1;
  }
  return 0;
}

int acc_shm_attach(acc_shm_t *s, const acc_shm_card_t *cards, const int *ranks, int n, int me,
                   int timeout_ms, char *err, size_t errlen) {
  s->n = n;
  s->me = me;
  s->timeout_ms = timeout_ms;
  s->seg = calloc((size_t)n, sizeof *s->seg);
  s->pid = calloc((size_t)n, sizeof *s->pid);
  s->rank = calloc((size_t)n, sizeof *s->rank);
  if (!s->seg || !s->pid || !s->rank) {
    snprintf(err, errlen, "no memory");
    return -1;
  }
  for (int j = 0; j < n; j++) {
    s->pid[j] = cards[j].pid;
    s->rank[j] = ranks[j];
    if (j == me)
      s->seg[j] = s->mine;
    else if (map_peer(s, &cards[j], j, err, errlen) != 0)
      return -1;
  }
  /* Spin about as long as a short collective takes, then sleep. Where the
   * members outnumber the CPUs a spinning member holds the core its peer
   * needs: spin far less. */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->spin_max_ns = cpus > 0 && n > cpus ? SPIN_MIN_NS : 50000;
  s->spin_ns = s->spin_max_ns;
  s->backoff = (acc_backoff_t)ACC_BACKOFF_INIT;
  return 0;
}

void acc_shm_close_fds(acc_shm_t *s) {
  if (s && s->fd >= 0) {
    close(s->fd);
    s->fd = -1;
  }
}

void acc_shm_destroy(acc_shm_t **s_p) {
  acc_shm_t *s = NBF_TAKE(s_p);
  if (!s)
    return;
  if (s->seg)
    for (int j = 0; j < s->n; j++)
      if (j != s->me && s->seg[j])
        munmap(s->seg[j], SEG_BYTES);
  if (s->mine)
    munmap(s->mine, SEG_BYTES);
  if (s->fd >= 0)
    close(s->fd);
  free(s->seg);
  free(s->pid);
  free(s->rank);
  free(s);
}
