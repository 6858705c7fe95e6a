/*
 * test_executor.c — the one executor client (common/nbf_executor.h) and
 * the one stop sequence (common/nbf_proc.h), against fake executors
 * written as shell scripts that speak nbf_wire.h: requests on fd 3,
 * events on fd 4.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_executor.h"
#include "nbf_proc.h"
#include "nbf_test.h"
#include "nbf_util.h"

/* A fake executor: the shell script body into a new file; caller frees. */
static char *fake_executor(const char *body) {
  char *path = nbf_xprintf("%s/nbf-fake-executor-%d-XXXXXX", P_tmpdir, (int)getpid());
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  char *text = nbf_xprintf("#!/bin/sh\n%s\n", body);
  ASSERT_EQ(nbf_write_all(fd, text, strlen(text)), 0);
  free(text);
  fchmod(fd, 0700);
  close(fd);
  return path;
}

/* Spawn the fake executor `body` into ex; returns its script's path
 * (remove_fake removes it). */
static char *spawn(nbf_executor_t *ex, const char *body) {
  char err[256] = "", *path = fake_executor(body);
  nbf_executor_init(ex);
  if (nbf_executor_spawn(ex, path, NBF_EXECUTOR_PIPES, err, sizeof err) != 0)
    NBF_TEST_FAIL("spawn %s: %s", path, err);
  ASSERT_TRUE(nbf_executor_running(ex));
  return path;
}

static void remove_fake(char *path) {
  unlink(path);
  free(path);
}

typedef struct {
  int displays, replies;
  char ename[64];
} seen_t;

static void on_event(void *arg, json_t *ev) {
  seen_t *s = arg;
  const char *msg = json_string_value(json_object_get(ev, "msg"));
  if (!strcmp(msg, "display_data"))
    s->displays++;
  if (!strcmp(msg, "reply")) {
    s->replies++;
    snprintf(s->ename, sizeof s->ename, "%s",
             json_string_value(json_object_get(ev, "ename")) ?: "");
  }
}

/* Read events until a reply or timeout_ms; the read's last result. */
static int wait_reply(nbf_executor_t *ex, seen_t *s, int timeout_ms) {
  int64_t end = nbf_now_ms() + timeout_ms;
  int r = 0;
  while (!s->replies && nbf_now_ms() < end && r == 0) {
    nbf_executor_flush(ex);
    r = nbf_executor_read_events(ex, on_event, s);
    usleep(5000);
  }
  return r;
}

static void send_execute(nbf_executor_t *ex, const char *code) {
  json_t *rq = json_pack("{s:s,s:s}", "msg", "execute", "code", code);
  ASSERT_EQ(nbf_executor_send(ex, rq), 0);
  json_decref(rq);
}

/* One request: its events reach the callback in order, a line that is
 * not an event is counted and skipped, stdout comes through its pipe, and
 * EOF on fd 3 makes it exit (status 0, nothing forced). */
NBF_TEST(executor_request_events_reply_and_polite_exit) {
  nbf_executor_t ex;
  char *path = spawn(&ex, "while read -r line <&3; do\n"
                          "  echo out\n"
                          "  echo '{\"msg\":\"display_data\",\"data\":{}}' >&4\n"
                          "  echo 'not json' >&4\n"
                          "  echo '{\"msg\":\"reply\",\"status\":\"ok\"}' >&4\n"
                          "done\n"
                          "exit 0");
  send_execute(&ex, "int x;");
  seen_t s = {0};
  ASSERT_EQ(wait_reply(&ex, &s, 5000), 0);
  ASSERT_EQ(s.replies, 1);
  ASSERT_EQ(s.displays, 1);
  ASSERT_EQ(ex.ignored_events, 1);
  nbf_buf_t out = {0};
  nbf_executor_read_stream(&ex, 0, &out, 1 << 20);
  ASSERT_EQ_MEM(out.data, out.len, "out\n", 4);
  nbf_buf_free(&out);
  int st = nbf_executor_stop(&ex, 5000);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_TRUE(!nbf_executor_running(&ex));
  remove_fake(path);
}

/* An interrupt is one SIGINT to the executor; its reply answers the
 * request and clears the kill deadline. */
NBF_TEST(executor_interrupt_is_answered_and_clears_the_deadline) {
  nbf_executor_t ex;
  char *path = spawn(&ex, "trap 'echo \"{\\\"msg\\\":\\\"reply\\\",\\\"status\\\":\\\"error\\\","
                          "\\\"ename\\\":\\\"KeyboardInterrupt\\\"}\" >&4' INT\n"
                          "read -r line <&3\n"
                          "echo '{\"msg\":\"display_data\",\"data\":{}}' >&4\n"
                          "sleep 30 & wait $!\n"
                          "while read -r line <&3; do :; done");
  send_execute(&ex, "for (;;);");
  seen_t s = {0};
  for (int64_t end = nbf_now_ms() + 5000; !s.displays && nbf_now_ms() < end; usleep(5000))
    nbf_executor_read_events(&ex, on_event, &s); /* it waits in `wait` now */
  ASSERT_EQ(s.displays, 1);
  int64_t deadline = nbf_executor_interrupt(&ex, 60000);
  ASSERT_GT(deadline, nbf_now_ms());
  ASSERT_EQ(wait_reply(&ex, &s, 5000), 0);
  ASSERT_EQ_STR(s.ename, "KeyboardInterrupt");
  ASSERT_EQ(ex.interrupt_deadline_ms, 0);
  ASSERT_TRUE(!nbf_executor_interrupt_expired(&ex));
  nbf_executor_stop(&ex, 5000);
  remove_fake(path);
}

/* An unanswered interrupt expires after its grace; kill then reaps it. */
NBF_TEST(executor_unanswered_interrupt_expires_and_is_killed) {
  nbf_executor_t ex;
  char *path = spawn(&ex, "trap '' INT TERM\nwhile :; do sleep 1; done");
  usleep(100000); /* the trap is set */
  nbf_executor_interrupt(&ex, 100);
  ASSERT_TRUE(!nbf_executor_interrupt_expired(&ex));
  usleep(200000);
  ASSERT_TRUE(nbf_executor_interrupt_expired(&ex));
  int st = nbf_executor_kill(&ex);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  ASSERT_TRUE(!nbf_executor_running(&ex) && !nbf_executor_interrupt_expired(&ex));
  remove_fake(path);
}

/* Shutdown keeps nbf_wire.h's promise: an executor that does not exit on
 * EOF gets SIGTERM (it exits 7 on TERM here) before any SIGKILL. */
NBF_TEST(executor_stop_sends_term_after_the_grace) {
  nbf_executor_t ex;
  char *path = spawn(&ex, "trap 'exit 7' TERM\nwhile :; do sleep 0.05; done");
  usleep(100000);
  int64_t t0 = nbf_now_ms();
  int st = nbf_executor_stop(&ex, 200);
  ASSERT_TRUE(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 7);
  ASSERT_GE(nbf_now_ms() - t0, 200);
  remove_fake(path);
}

/* nbf_proc_stop: a stopped process still gets its TERM (SIGCONT follows
 * it), and one that ignores TERM is killed after the grace. */
NBF_TEST(proc_stop_conts_a_stopped_child_and_kills_a_deaf_one) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    raise(SIGSTOP);
    pause();
    _exit(0);
  }
  int st;
  ASSERT_EQ(waitpid(pid, &st, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(st));
  st = nbf_proc_stop(pid, 5000, NULL, NULL);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);

  pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGTERM, SIG_IGN);
    for (;;)
      pause();
  }
  usleep(50000);
  int64_t t0 = nbf_now_ms();
  st = nbf_proc_stop(pid, 150, NULL, NULL);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  ASSERT_GE(nbf_now_ms() - t0, 150);
}

NBF_TEST_MAIN()
