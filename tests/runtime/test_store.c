/*
 * test_store.c — the ZeroMQ rendezvous store (runtime/store/acc_store.h).
 *   test_store set_get|blocking_get|add_check_delete|timeout|no_server|
 *              port_in_use|stop_with_waiter|ephemeral_port|secret_ok|
 *              secret_missing|secret_wrong|secret_open_server|secret_ranks|
 *              secret_ranks_wrong|intruders_never_admitted|replayed_session_refused|
 *              open_store_warns
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acc_store.h"
#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

static acc_store_server_t *start(int *port) {
  char err[512];
  acc_store_server_t *s = acc_store_server_start("127.0.0.1", 0, err, sizeof err);
  if (!s)
    NBF_TEST_FAIL("server start: %s", err);
  *port = acc_store_server_port(s);
  ASSERT_GT(*port, 0);
  return s;
}

NBF_TEST(set_get) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 5000);
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(acc_store_set(c, "run/a", "hello", 5), ACC_OK);
  unsigned char bin[300];
  for (int i = 0; i < 300; i++)
    bin[i] = (unsigned char)i; /* includes NUL bytes */
  ASSERT_EQ(acc_store_set(c, "run/bin", bin, sizeof bin), ACC_OK);
  ASSERT_EQ(acc_store_set(c, "run/empty", NULL, 0), ACC_OK);
  void *v;
  size_t len;
  ASSERT_EQ(acc_store_get(c, "run/a", &v, &len), ACC_OK);
  ASSERT_EQ(len, 5);
  ASSERT_EQ_STR((char *)v, "hello");
  free(v);
  ASSERT_EQ(acc_store_get(c, "run/bin", &v, &len), ACC_OK);
  ASSERT_EQ(len, 300);
  ASSERT_TRUE(memcmp(v, bin, 300) == 0);
  free(v);
  ASSERT_EQ(acc_store_get(c, "run/empty", &v, &len), ACC_OK);
  ASSERT_EQ(len, 0);
  free(v);
  ASSERT_EQ(acc_store_set(c, "run/a", "bye", 3), ACC_OK); /* overwrite */
  ASSERT_EQ(acc_store_get(c, "run/a", &v, &len), ACC_OK);
  ASSERT_EQ_STR((char *)v, "bye");
  free(v);
  ASSERT_EQ(acc_store_set(c, "", "x", 1), ACC_ERR_INVALID_ARGUMENT);
  acc_store_client_destroy(&c);
  ASSERT_NULL(c);
  acc_store_server_stop(&s);
  ASSERT_NULL(s);
  acc_store_client_destroy(&c); /* NULL-safe */
  acc_store_server_stop(&s);
}

typedef struct {
  int port;
  int delay_ms;
} setter_arg_t;

static void *setter(void *p) {
  setter_arg_t *a = p;
  usleep((useconds_t)a->delay_ms * 1000);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", a->port, 5000);
  acc_store_set(c, "k/late", "value!", 6);
  acc_store_client_destroy(&c);
  return NULL;
}

NBF_TEST(blocking_get) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 5000);
  setter_arg_t a = {port, 300};
  pthread_t th;
  pthread_create(&th, NULL, setter, &a);
  double t0 = rt_now();
  void *v;
  size_t len;
  ASSERT_EQ(acc_store_get(c, "k/late", &v, &len), ACC_OK);
  double dt = rt_now() - t0;
  ASSERT_EQ_STR((char *)v, "value!");
  free(v);
  ASSERT_DBL_LT(0.2, dt); /* it did wait for the setter */
  ASSERT_DBL_LT(dt, 3.0);
  pthread_join(th, NULL);
  /* wait on several keys */
  pthread_create(&th, NULL, setter, &a);
  ASSERT_EQ(acc_store_set(c, "k/other", "1", 1), ACC_OK);
  const char *keys[] = {"k/other", "k/late"};
  ASSERT_EQ(acc_store_wait(c, keys, 2, 3000), ACC_OK);
  pthread_join(th, NULL);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

NBF_TEST(add_check_delete) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 5000);
  int64_t r = 0;
  ASSERT_EQ(acc_store_add(c, "ctr", 1, &r), ACC_OK);
  ASSERT_EQ(r, 1);
  ASSERT_EQ(acc_store_add(c, "ctr", 41, &r), ACC_OK);
  ASSERT_EQ(r, 42);
  ASSERT_EQ(acc_store_add(c, "ctr", -50, &r), ACC_OK);
  ASSERT_EQ(r, -8);
  void *v;
  ASSERT_EQ(acc_store_get(c, "ctr", &v, NULL), ACC_OK);
  ASSERT_EQ_STR((char *)v, "-8");
  free(v);
  ASSERT_EQ(acc_store_set(c, "text", "abc", 3), ACC_OK);
  ASSERT_EQ(acc_store_add(c, "text", 1, &r), ACC_ERR_STORE);
  ASSERT_CONTAINS(acc_store_client_error(c), "not a decimal integer");
  int ex = -1;
  ASSERT_EQ(acc_store_check(c, "text", &ex), ACC_OK);
  ASSERT_EQ(ex, 1);
  ASSERT_EQ(acc_store_delete(c, "text"), ACC_OK);
  ASSERT_EQ(acc_store_check(c, "text", &ex), ACC_OK);
  ASSERT_EQ(ex, 0);
  ASSERT_EQ(acc_store_delete(c, "text"), ACC_OK); /* deleting twice is fine */
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

/* ADD past the 64-bit range is refused and the counter kept (it was
 * signed overflow in the server: tests/fuzz/fuzz_store, input in
 * tests/fuzz/corpus/store/crash-add-overflow); the store keeps serving. */
NBF_TEST(add_overflow) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 5000);
  int64_t r = 0;
  ASSERT_EQ(acc_store_add(c, "ctr", INT64_MAX, &r), ACC_OK);
  ASSERT_EQ(acc_store_add(c, "ctr", 1, &r), ACC_ERR_STORE);
  ASSERT_CONTAINS(acc_store_client_error(c), "64-bit range");
  ASSERT_EQ(acc_store_add(c, "low", INT64_MIN, &r), ACC_OK);
  ASSERT_EQ(acc_store_add(c, "low", -1, &r), ACC_ERR_STORE);
  ASSERT_EQ(acc_store_add(c, "ctr", -1, &r), ACC_OK);
  ASSERT_EQ(r, INT64_MAX - 1);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

NBF_TEST(timeout) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 300);
  double t0 = rt_now();
  void *v = NULL;
  ASSERT_EQ(acc_store_get(c, "never/set", &v, NULL), ACC_ERR_TIMEOUT);
  double dt = rt_now() - t0;
  ASSERT_NULL(v);
  ASSERT_DBL_LT(0.25, dt);
  ASSERT_DBL_LT(dt, 5.0); /* generous: the bound only rules out a hang */
  ASSERT_CONTAINS(acc_store_client_error(c), "never/set");
  ASSERT_CONTAINS(acc_store_client_error(c), "300 ms");
  const char *keys[] = {"never/a"};
  ASSERT_EQ(acc_store_wait(c, keys, 1, 200), ACC_ERR_TIMEOUT);
  /* the client still works after a timeout, and a late answer to the
   * abandoned request is not mistaken for the next one */
  ASSERT_EQ(acc_store_set(c, "never/set", "now", 3), ACC_OK);
  ASSERT_EQ(acc_store_set(c, "other", "x", 1), ACC_OK);
  ASSERT_EQ(acc_store_get(c, "other", &v, NULL), ACC_OK);
  ASSERT_EQ_STR((char *)v, "x");
  free(v);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

NBF_TEST(no_server) {
  int port = rt_free_port();
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 300);
  ASSERT_NOT_NULL(c);
  double t0 = rt_now();
  ASSERT_EQ(acc_store_set(c, "a", "b", 1), ACC_ERR_TIMEOUT);
  ASSERT_DBL_LT(rt_now() - t0, 5.0); /* generous: the bound only rules out a hang */
  ASSERT_CONTAINS(acc_store_client_error(c), "is the store running");
  acc_store_client_destroy(&c);
  ASSERT_NULL(acc_store_client_new("127.0.0.1", 0, 100));
  ASSERT_NULL(acc_store_client_new(NULL, 29500, 100));
}

NBF_TEST(port_in_use) {
  int port;
  acc_store_server_t *s = start(&port);
  char err[512];
  acc_store_server_t *s2 = acc_store_server_start("127.0.0.1", port, err, sizeof err);
  ASSERT_NULL(s2);
  char want[32];
  snprintf(want, sizeof want, "port %d", port);
  ASSERT_CONTAINS(err, want);
  ASSERT_CONTAINS(err, "in use");
  ASSERT_NULL(acc_store_server_start("127.0.0.1", 70000, err, sizeof err));
  ASSERT_CONTAINS(err, "70000");
  acc_store_server_stop(&s);
  /* the port is free again after stop */
  s2 = acc_store_server_start("127.0.0.1", port, err, sizeof err);
  if (!s2)
    NBF_TEST_FAIL("restart on port %d: %s", port, err);
  acc_store_server_stop(&s2);
}

static void *waiter(void *p) {
  acc_store_client_t *c = p;
  void *v = NULL;
  acc_result_t r = acc_store_get(c, "held", &v, NULL);
  free(v);
  return (void *)(long)r;
}

NBF_TEST(stop_with_waiter) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 500);
  pthread_t th;
  pthread_create(&th, NULL, waiter, c);
  usleep(100000);
  double t0 = rt_now();
  acc_store_server_stop(&s); /* must not block on the held request */
  ASSERT_DBL_LT(rt_now() - t0, 3.0);
  void *r;
  pthread_join(th, &r);
  ASSERT_EQ((long)r, ACC_ERR_TIMEOUT);
  acc_store_client_destroy(&c);
}

NBF_TEST(ephemeral_port) {
  /* start/stop many times: no thread or socket leaks that break reuse */
  for (int i = 0; i < 20; i++) {
    int port;
    acc_store_server_t *s = start(&port);
    acc_store_client_t *c = acc_store_client_new("127.0.0.1", port, 2000);
    ASSERT_EQ(acc_store_set(c, "i", "1", 1), ACC_OK);
    acc_store_client_destroy(&c);
    acc_store_server_stop(&s);
  }
}

/* ---- rendezvous secret (CURVE) ---- */

static acc_store_server_t *start_secure(const char *secret, int *port) {
  char err[512];
  acc_store_server_t *s = acc_store_server_start_secure("127.0.0.1", 0, secret, err, sizeof err);
  if (!s)
    NBF_TEST_FAIL("secure server start: %s", err);
  *port = acc_store_server_port(s);
  return s;
}

NBF_TEST(secret_ok) {
  int port;
  acc_store_server_t *s = start_secure("correct horse battery staple", &port);
  acc_store_client_t *c =
      acc_store_client_new_secure("127.0.0.1", port, 5000, "correct horse battery staple");
  ASSERT_NOT_NULL(c);
  ASSERT_EQ(acc_store_set(c, "k", "v", 1), ACC_OK);
  void *v;
  ASSERT_EQ(acc_store_get(c, "k", &v, NULL), ACC_OK);
  ASSERT_EQ_STR((char *)v, "v");
  free(v);
  int64_t r;
  ASSERT_EQ(acc_store_add(c, "n", 2, &r), ACC_OK);
  ASSERT_EQ(r, 2);
  /* a second client with the same secret sees the same data */
  acc_store_client_t *c2 =
      acc_store_client_new_secure("127.0.0.1", port, 5000, "correct horse battery staple");
  ASSERT_EQ(acc_store_get(c2, "k", &v, NULL), ACC_OK);
  free(v);
  acc_store_client_destroy(&c2);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
  /* key derivation: deterministic, differs per secret, Z85 text */
  char p1[41], p2[41], s1[41];
  ASSERT_EQ(acc_store_curve_keys("a", p1, s1), 0);
  ASSERT_EQ(acc_store_curve_keys("a", p2, NULL), 0);
  ASSERT_EQ_STR(p1, p2);
  ASSERT_EQ(strlen(p1), 40);
  ASSERT_EQ(acc_store_curve_keys("b", p2, NULL), 0);
  ASSERT_TRUE(strcmp(p1, p2) != 0);
  /* "" and NULL mean an open store */
  s = start_secure("", &port);
  c = acc_store_client_new("127.0.0.1", port, 2000);
  ASSERT_EQ(acc_store_set(c, "k", "v", 1), ACC_OK);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

/* A client without the secret, or with another one, gets no answer: the
 * request fails within the timeout, the error names the cause, and the
 * store counts the refusal by kind. */
static void refused(const char *server_secret, const char *client_secret, const char *says,
                    acc_store_refusal_t why) {
  int port;
  acc_store_server_t *s = start_secure(server_secret, &port);
  acc_store_client_t *c = acc_store_client_new_secure("127.0.0.1", port, 600, client_secret);
  ASSERT_NOT_NULL(c);
  double t0 = rt_now();
  ASSERT_EQ(acc_store_set(c, "k", "v", 1), ACC_ERR_TIMEOUT);
  double dt = rt_now() - t0;
  ASSERT_DBL_LT(0.5, dt);
  ASSERT_DBL_LT(dt, 3.0);
  printf("%s\n", acc_store_client_error(c));
  ASSERT_CONTAINS(acc_store_client_error(c), says);
  ASSERT_EQ(acc_store_client_refusal(c), why);
  void *v = NULL;
  ASSERT_EQ(acc_store_get(c, "k", &v, NULL), ACC_ERR_TIMEOUT);
  ASSERT_CONTAINS(acc_store_client_error(c), says);
  ASSERT_NULL(v);
  /* and nothing it sent reached the store */
  acc_store_client_t *good = acc_store_client_new_secure("127.0.0.1", port, 2000, server_secret);
  int ex = 1;
  ASSERT_EQ(acc_store_check(good, "k", &ex), ACC_OK);
  ASSERT_EQ(ex, 0);
  ASSERT_EQ(acc_store_client_refusal(good), ACC_STORE_ANSWERED);
  acc_store_refusals_t n;
  unsigned counted = 0;
  /* the serving thread counts the I/O thread's events as they come:
   * wait for them (5 s at most) */
  for (double end = rt_now() + 5; !counted && rt_now() < end; usleep(counted ? 0 : 10000)) {
    acc_store_server_refusals(s, &n);
    counted = why == ACC_STORE_REFUSED_NEEDS_SECRET ? n.no_secret
              : why == ACC_STORE_REFUSED_OPEN_STORE ? n.unexpected_secret
                                                    : n.other_secret;
    /* a client that saw the mismatch first hangs up before the store
     * read its greeting: that attempt counts as malformed (acc_store.h) */
    counted += n.malformed;
  }
  printf("refused: no secret %u, unexpected secret %u, other secret %u, malformed %u\n",
         n.no_secret, n.unexpected_secret, n.other_secret, n.malformed);
  ASSERT_GT(counted, 0);
  acc_store_client_destroy(&good);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

/* A secret-holding client of an open store: the handshake fails too. */
NBF_TEST(secret_open_server) {
  refused(NULL, "s3cret", "this client has a rendezvous secret, the store has none",
          ACC_STORE_REFUSED_OPEN_STORE);
}

/* acc_new with NBFORK_RDZV_SECRET: rank 0 hosts a secure store. */
static int secret_rank(int rank, int world, void *arg) {
  const char *mode = arg;
  if (!strcmp(mode, "wrong") && rank == 1)
    setenv("NBFORK_RDZV_SECRET", "not-the-secret", 1);
  else if (!strcmp(mode, "wrong") && rank == 2)
    unsetenv("NBFORK_RDZV_SECRET");
  double t0 = rt_now();
  acc_t *acc = acc_new(NULL);
  if (!strcmp(mode, "wrong")) {
    ASSERT_NULL(acc); /* every rank fails within the timeout (2 s) */
    ASSERT_DBL_LT(rt_now() - t0, 8.0);
    return 0;
  }
  ASSERT_NOT_NULL(acc);
  int64_t x = rank + 1;
  ASSERT_OK(acc, acc_all_reduce(acc, &x, 1, ACC_I64, ACC_SUM));
  ASSERT_EQ(x, world * (world + 1) / 2);
  acc_destroy(&acc);
  return 0;
}

static void secret_ranks(const char *mode) {
  setenv("NBFORK_RDZV_SECRET", "job-secret-42", 1);
  rt_spawn_opts_t o = {.world = !strcmp(mode, "wrong") ? 3 : 2, .deadline_s = 30, .timeout_s = "2"};
  ASSERT_EQ(rt_spawn(&o, secret_rank, (void *)mode, NULL), 0);
  unsetenv("NBFORK_RDZV_SECRET");
}

NBF_TEST(secret_missing) {
  refused("s3cret", NULL, "the store requires a rendezvous secret and this client has none",
          ACC_STORE_REFUSED_NEEDS_SECRET);
}

NBF_TEST(secret_wrong) {
  refused("s3cret", "wrong", "wrong or missing rendezvous secret?", ACC_STORE_REFUSED_OTHER_SECRET);
}

NBF_TEST(secret_ranks) {
  secret_ranks("right");
}

NBF_TEST(secret_ranks_wrong) {
  secret_ranks("wrong");
}

/* Rank 0 hosting an open store on every interface (MASTER_ADDR not
 * loopback's 127.0.0.1) warns on stderr, naming the secret's settings;
 * on 127.0.0.1 (bound there only) or with a secret it does not. */
static int warn_rank(int rank, int world, void *arg) {
  (void)world;
  const char *mode = arg;
  if (strcmp(mode, "loopback"))
    setenv("MASTER_ADDR", "127.0.0.2", 1);
  if (!strcmp(mode, "secret"))
    setenv("NBFORK_RDZV_SECRET", "s", 1);
  char path[64];
  snprintf(path, sizeof path, "/tmp/nbf-warn-%d-%s", (int)getppid(), mode);
  int saved = dup(2), fd = rank == 0 ? open(path, O_CREAT | O_TRUNC | O_RDWR, 0600) : -1;
  if (rank == 0)
    dup2(fd, 2);
  acc_t *acc = acc_new(NULL);
  dup2(saved, 2);
  ASSERT_NOT_NULL(acc);
  acc_destroy(&acc);
  if (rank == 0) {
    char text[1024] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    unlink(path);
    if (!strcmp(mode, "open")) {
      ASSERT_CONTAINS(text, "without a secret");
      ASSERT_CONTAINS(text, "NBFORK_RDZV_SECRET");
      ASSERT_CONTAINS(text, "rdzv_conf=secret=");
    } else {
      ASSERT_NOT_CONTAINS(text, "without a secret");
    }
  }
  if (fd >= 0)
    close(fd);
  close(saved);
  return 0;
}

NBF_TEST(open_store_warns) {
  const char *modes[] = {"open", "loopback", "secret"};
  for (int i = 0; i < 3; i++) {
    rt_spawn_opts_t o = {.world = 2, .deadline_s = 30, .timeout_s = "10"};
    ASSERT_EQ(rt_spawn(&o, warn_rank, (void *)modes[i], NULL), 0);
  }
}

/* ---- intruders against a store with a secret ---- */

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_TRUE(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  return fd;
}

/* Send `len` bytes, then read (and drop) what comes back until the store
 * closes the connection or `wait_s` passed. */
static void send_and_drain(int fd, const void *buf, size_t len, double wait_s) {
  ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
  (void)w;
  double end = rt_now() + wait_s;
  char sink[4096];
  while (rt_now() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0 && recv(fd, sink, sizeof sink, 0) <= 0)
      break; /* closed by the store */
  }
  close(fd);
}

/* The real ranks' requests still answer at once. */
static void still_serving(int port, const char *secret) {
  acc_store_client_t *c = acc_store_client_new_secure("127.0.0.1", port, 3000, secret);
  double t0 = rt_now();
  void *v = NULL;
  ASSERT_EQ(acc_store_get(c, "real", &v, NULL), ACC_OK);
  ASSERT_EQ_STR((char *)v, "rank data");
  free(v);
  ASSERT_EQ(acc_store_set(c, "after", "1", 1), ACC_OK);
  ASSERT_DBL_LT(rt_now() - t0, 2.0);
  acc_store_client_destroy(&c);
}

/* Random bytes, a ZeroMQ greeting followed by garbage, a client without
 * the secret and one with another: none is admitted (no key they set
 * exists), the store counts them, and keeps serving the real ranks. */
NBF_TEST(intruders_never_admitted) {
  int port;
  acc_store_server_t *s = start_secure("the-job-secret", &port);
  acc_store_client_t *real = acc_store_client_new_secure("127.0.0.1", port, 3000, "the-job-secret");
  ASSERT_EQ(acc_store_set(real, "real", "rank data", 9), ACC_OK);
  unsigned seed = 12345;
  for (int trial = 0; trial < 20; trial++) {
    unsigned char junk[2048];
    for (size_t i = 0; i < sizeof junk; i++)
      junk[i] = (unsigned char)(rand_r(&seed) >> 7);
    if (trial % 2) /* a valid ZMTP 3 signature, then garbage */
      memcpy(junk, "\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00CURVE", 17);
    send_and_drain(tcp_connect(port), junk, sizeof junk, 0.3);
  }
  still_serving(port, "the-job-secret");
  const char *intruders[] = {NULL, "guess", "the-job-secreT"};
  for (int i = 0; i < 3; i++) {
    acc_store_client_t *c = acc_store_client_new_secure("127.0.0.1", port, 500, intruders[i]);
    ASSERT_EQ(acc_store_set(c, "intruder", "x", 1), ACC_ERR_TIMEOUT);
    int64_t n;
    ASSERT_EQ(acc_store_add(c, "real", 1, &n), ACC_ERR_TIMEOUT);
    acc_store_client_destroy(&c);
  }
  still_serving(port, "the-job-secret");
  int ex = 1;
  ASSERT_EQ(acc_store_check(real, "intruder", &ex), ACC_OK);
  ASSERT_EQ(ex, 0);
  acc_store_refusals_t n;
  for (double end = rt_now() + 5; rt_now() < end; usleep(10000)) { /* as in refused() */
    acc_store_server_refusals(s, &n);
    if (n.no_secret && n.other_secret)
      break;
  }
  printf("refused: no secret %u, unexpected secret %u, other secret %u, malformed %u\n",
         n.no_secret, n.unexpected_secret, n.other_secret, n.malformed);
  ASSERT_GT(n.no_secret, 0);
  ASSERT_GT(n.other_secret, 0);
  acc_store_client_destroy(&real);
  acc_store_server_stop(&s);
}

/* A recording proxy: one connection, forwarded both ways; the bytes the
 * client sent are kept for a replay. */
typedef struct {
  int listen_fd, upstream_port;
  unsigned char sent[65536];
  size_t nsent;
} proxy_t;

static void *proxy_run(void *arg) {
  proxy_t *p = arg;
  int a = accept(p->listen_fd, NULL, NULL), b = tcp_connect(p->upstream_port);
  char buf[8192];
  for (int open = 1; open;) {
    struct pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (poll(fds, 2, 10000) <= 0)
      break;
    for (int i = 0; i < 2 && open; i++) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t r = recv(fds[i].fd, buf, sizeof buf, 0);
      if (r <= 0) {
        open = 0;
        break;
      }
      if (i == 0 && p->nsent + (size_t)r <= sizeof p->sent) {
        memcpy(p->sent + p->nsent, buf, (size_t)r);
        p->nsent += (size_t)r;
      }
      ssize_t w = send(fds[1 - i].fd, buf, (size_t)r, MSG_NOSIGNAL);
      (void)w;
    }
  }
  close(a);
  close(b);
  return NULL;
}

/* A real client's whole session, recorded and replayed byte for byte on
 * a new connection, does not repeat its SET: CURVE's per-connection
 * cookie and nonces refuse it. */
NBF_TEST(replayed_session_refused) {
  int port;
  acc_store_server_t *s = start_secure("the-job-secret", &port);
  proxy_t *p = calloc(1, sizeof *p);
  p->upstream_port = port;
  p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  ASSERT_EQ(bind(p->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(p->listen_fd, 1), 0);
  ASSERT_EQ(getsockname(p->listen_fd, (struct sockaddr *)&a, &alen), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, proxy_run, p), 0);
  acc_store_client_t *via =
      acc_store_client_new_secure("127.0.0.1", ntohs(a.sin_port), 5000, "the-job-secret");
  ASSERT_EQ(acc_store_set(via, "replayed", "once", 4), ACC_OK);
  acc_store_client_destroy(&via); /* the proxy sees the close and ends */
  pthread_join(t, NULL);
  close(p->listen_fd);
  ASSERT_GT(p->nsent, 64);
  acc_store_client_t *real = acc_store_client_new_secure("127.0.0.1", port, 3000, "the-job-secret");
  ASSERT_EQ(acc_store_delete(real, "replayed"), ACC_OK);
  ASSERT_EQ(acc_store_set(real, "real", "rank data", 9), ACC_OK);
  for (int i = 0; i < 5; i++) /* whole, and in the pieces a replayer might try */
    send_and_drain(tcp_connect(port), p->sent, i ? p->nsent * (size_t)i / 5 : p->nsent, 0.5);
  int ex = 1;
  ASSERT_EQ(acc_store_check(real, "replayed", &ex), ACC_OK);
  ASSERT_EQ(ex, 0);
  still_serving(port, "the-job-secret");
  acc_store_refusals_t n;
  acc_store_server_refusals(s, &n);
  printf("recorded %zu bytes; refused: other secret %u, malformed %u\n", p->nsent, n.other_secret,
         n.malformed);
  free(p);
  acc_store_client_destroy(&real);
  acc_store_server_stop(&s);
}

NBF_TEST_MAIN()
