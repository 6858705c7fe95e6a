/*
 * test_store.c — the ZeroMQ rendezvous store (runtime/acc_store.h).
 *   test_store set_get|blocking_get|add_check_delete|timeout|no_server|
 *              port_in_use|stop_with_waiter|ephemeral_port|secret_ok|
 *              secret_missing|secret_wrong|secret_open_server|secret_ranks|
 *              secret_ranks_wrong
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
 * request fails within the timeout and the error names the cause. */
static void refused(const char *client_secret) {
  int port;
  acc_store_server_t *s = start_secure("s3cret", &port);
  acc_store_client_t *c = acc_store_client_new_secure("127.0.0.1", port, 600, client_secret);
  ASSERT_NOT_NULL(c);
  double t0 = rt_now();
  ASSERT_EQ(acc_store_set(c, "k", "v", 1), ACC_ERR_TIMEOUT);
  double dt = rt_now() - t0;
  ASSERT_DBL_LT(0.5, dt);
  ASSERT_DBL_LT(dt, 3.0);
  printf("%s\n", acc_store_client_error(c));
  ASSERT_CONTAINS(acc_store_client_error(c), "wrong or missing rendezvous secret?");
  void *v = NULL;
  ASSERT_EQ(acc_store_get(c, "k", &v, NULL), ACC_ERR_TIMEOUT);
  ASSERT_CONTAINS(acc_store_client_error(c), "wrong or missing rendezvous secret?");
  ASSERT_NULL(v);
  /* and nothing it sent reached the store */
  acc_store_client_t *good = acc_store_client_new_secure("127.0.0.1", port, 2000, "s3cret");
  int ex = 1;
  ASSERT_EQ(acc_store_check(good, "k", &ex), ACC_OK);
  ASSERT_EQ(ex, 0);
  acc_store_client_destroy(&good);
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
}

/* A secret-holding client of an open store: the handshake fails too. */
NBF_TEST(secret_open_server) {
  int port;
  acc_store_server_t *s = start(&port);
  acc_store_client_t *c = acc_store_client_new_secure("127.0.0.1", port, 600, "s3cret");
  ASSERT_EQ(acc_store_set(c, "k", "v", 1), ACC_ERR_TIMEOUT);
  printf("%s\n", acc_store_client_error(c));
  ASSERT_CONTAINS(acc_store_client_error(c), "wrong or missing rendezvous secret?");
  acc_store_client_destroy(&c);
  acc_store_server_stop(&s);
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
  refused(NULL);
}

NBF_TEST(secret_wrong) {
  refused("wrong");
}

NBF_TEST(secret_ranks) {
  secret_ranks("right");
}

NBF_TEST(secret_ranks_wrong) {
  secret_ranks("wrong");
}

NBF_TEST_MAIN()
