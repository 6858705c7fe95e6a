/*
 * Launcher unit tests: option parsing (every option, every rejection),
 * the per-rank environment, output line assembly with prefixes and
 * partial lines, stderr tails and failure descriptions, ln_run_group on
 * trivial functions of this binary, and the fork guard.
 *
 * Usage: test_launcher_unit CASE (ctest runs each case as
 * launcher.unit.CASE; OPENBLAS_NUM_THREADS=1 keeps the process
 * single-threaded, as the kernel keeps the executor).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ln_group.h"
#include "ln_launch.h"
#include "ln_leftover.h"
#include "ln_options.h"
#include "ln_probe.h"
#include "ln_ranks_nodes.h"
#include "ln_rdzv.h"
#include "ln_worker.h"
#include "nbf_rankstate.h"
#include "nbfork.h"
#include "nbf_param.h"
#include "nbf_test.h"
#include "nbf_util.h"

/* ---- options ---------------------------------------------------------- */

/* Parse `text` into fresh defaults; the result of ln_options_parse. */
static int parse(const char *text, ln_options_t *o, char *err, size_t errlen) {
  ln_options_init(o);
  err[0] = 0;
  return ln_options_parse(text, o, err, errlen);
}

/* Every field of `o` as text, so that one assertion compares two option
 * sets and prints both when they differ. */
static const char *options_text(const ln_options_t *o, char *buf, size_t n) {
  snprintf(buf, n,
           "num_processes=%d mixed_precision=%s use_port=%d master_addr=%s node_rank=%d "
           "num_nodes=%d rdzv_backend=%s rdzv_endpoint=%s rdzv_id=%s rdzv_timeout=%d "
           "secret=%s max_restarts=%d monitor_interval=%.17g log_line_prefix_template=%s",
           o->num_processes, o->mixed_precision, o->use_port, o->master_addr, o->node_rank,
           o->num_nodes, o->rdzv_backend, o->rdzv_endpoint, o->rdzv_id, o->rdzv_timeout_s,
           o->rdzv_secret, o->max_restarts, o->monitor_interval_s, o->log_line_prefix_template);
  return buf;
}

static void assert_options_eq(const ln_options_t *got, const ln_options_t *want) {
  char a[2048], b[2048];
  ASSERT_EQ_STR(options_text(got, a, sizeof a), options_text(want, b, sizeof b));
}

NBF_TEST(options_defaults) {
  ln_options_t o;
  ln_options_init(&o);
  assert_options_eq(&o, &(ln_options_t){.num_processes = 0,
                                        .mixed_precision = "no",
                                        .use_port = 29500,
                                        .master_addr = "127.0.0.1",
                                        .num_nodes = 1,
                                        .rdzv_backend = "static",
                                        .rdzv_timeout_s = 300,
                                        .monitor_interval_s = 0.1});
}

NBF_TEST(options_every_option) {
  ln_options_t o;
  char err[512];
  int rc = parse("num_processes=3 mixed_precision=bf16 use_port=1234 master_addr=node0 "
                 "node_rank=1 num_nodes=2 rdzv_backend=static rdzv_id=job-1.a_b "
                 "rdzv_timeout=7 rdzv_conf='secret=s3 cr3t' max_restarts=4 "
                 "monitor_interval=0.25 log_line_prefix_template=\"[{rank}] \"",
                 &o, err, sizeof err);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ_STR(err, "");
  assert_options_eq(&o, &(ln_options_t){.num_processes = 3,
                                        .mixed_precision = "bf16",
                                        .use_port = 1234,
                                        .master_addr = "node0",
                                        .node_rank = 1,
                                        .num_nodes = 2,
                                        .rdzv_backend = "static",
                                        .rdzv_id = "job-1.a_b",
                                        .rdzv_timeout_s = 7,
                                        .rdzv_secret = "s3 cr3t",
                                        .max_restarts = 4,
                                        .monitor_interval_s = 0.25,
                                        .log_line_prefix_template = "[{rank}] "});
}

NBF_TEST(options_rdzv_endpoint_overrides_master) {
  ln_options_t o;
  char err[512];
  ASSERT_EQ(parse("num_processes=1 master_addr=a use_port=1 rdzv_endpoint=host.x:4242", &o, err,
                  sizeof err),
            0);
  ASSERT_EQ_STR(o.master_addr, "host.x");
  ASSERT_EQ(o.use_port, 4242);
}

NBF_TEST(options_secret_from_environment) {
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_RDZV_SECRET, "from-env"), 0);
  ln_options_t o;
  ln_options_init(&o);
  ASSERT_EQ_STR(o.rdzv_secret, "from-env");
}

/* A rejected option text and what its message must say. */
typedef struct {
  const char *text, *expect;
} rejection_t;

/* Each case's text is refused by ln_options_parse with its message. */
static void expect_rejections(const rejection_t *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ln_options_t o;
    char err[512];
    if (parse(cases[i].text, &o, err, sizeof err) != -1)
      NBF_TEST_FAIL("'%s' was accepted", cases[i].text);
    ASSERT_CONTAINS(err, cases[i].expect);
  }
}

/* Every rejection names the option, the value and what is accepted. */
NBF_TEST(options_bad_values) {
  static const rejection_t cases[] = {
      {"num_processes=2 bogus=1", "unknown option 'bogus'. Options of %launch: num_processes"},
      {"", "num_processes is missing"},
      {"mixed_precision=fp16", "num_processes is missing"},
      {"num_processes=0", "bad value for num_processes: '0' (accepted: an integer >= 1)"},
      {"num_processes=x", "bad value for num_processes: 'x'"},
      {"num_processes=2x", "bad value for num_processes: '2x'"},
      {"num_processes=99999999999", "bad value for num_processes"},
      {"num_processes=2 mixed_precision=fp8", "(accepted: no, fp16 or bf16)"},
      {"num_processes=2 use_port=0", "bad value for use_port: '0' (accepted: a TCP port"},
      {"num_processes=2 use_port=65536", "bad value for use_port: '65536'"},
      {"num_processes=2 use_port=abc", "bad value for use_port: 'abc'"},
      {"num_processes=2 master_addr=", "bad value for master_addr: ''"},
      {"num_processes=2 node_rank=-1", "bad value for node_rank: '-1'"},
      {"num_processes=2 num_nodes=0", "bad value for num_nodes: '0'"},
      {"num_processes=2 node_rank=2 num_nodes=2", "node_rank=2 is not below num_nodes=2"},
      {"num_processes=2 rdzv_backend=c10d", "bad value for rdzv_backend: 'c10d' (accepted: static"},
      {"num_processes=2 rdzv_endpoint=nohost", "bad value for rdzv_endpoint: 'nohost'"},
      {"num_processes=2 rdzv_endpoint=h:0", "bad value for rdzv_endpoint: 'h:0' (accepted: "},
      {"num_processes=2 rdzv_endpoint=:29500", "bad value for rdzv_endpoint: ':29500'"},
      {"num_processes=2 rdzv_id=a/b", "bad value for rdzv_id: 'a/b'"},
      {"num_processes=2 rdzv_timeout=0", "bad value for rdzv_timeout: '0'"},
      {"num_processes=2 rdzv_timeout=86401", "bad value for rdzv_timeout"},
      {"num_processes=2 rdzv_conf=key=v", "bad value for rdzv_conf: 'key=v' (accepted: secret="},
      {"num_processes=2 rdzv_conf=secret=", "bad value for rdzv_conf: 'secret='"},
      {"num_processes=2 rdzv_conf=secret=a,b=c", "bad value for rdzv_conf"},
      {"num_processes=2 max_restarts=-1", "bad value for max_restarts: '-1'"},
      {"num_processes=2 max_restarts=1001", "bad value for max_restarts"},
      {"num_processes=2 monitor_interval=-1", "bad value for monitor_interval: '-1'"},
      {"num_processes=2 monitor_interval=0", "bad value for monitor_interval: '0'"},
      {"num_processes=2 monitor_interval=61", "(accepted: seconds, a number > 0 and <= 60)"},
      {"num_processes=2 monitor_interval=fast", "bad value for monitor_interval: 'fast'"},
      {"num_processes=2 stray", "expected key=value after the call, got 'stray'"},
      {"num_processes=2 use_port='29500", "option use_port: the quoted value is not closed"},
  };
  expect_rejections(cases, sizeof cases / sizeof cases[0]);
}

/* issue 14: `num_processes=2 num_processes=4` launched 4 workers (the
 * last one won, silently); a repeated option is refused, named. */
NBF_TEST(options_duplicate_is_refused) {
  static const rejection_t cases[] = {
      {"num_processes=2 num_processes=4",
       "option num_processes is given twice (the second time as num_processes=4): give it once"},
      {"num_processes=2 mixed_precision=no mixed_precision=no",
       "option mixed_precision is given twice"},
      {"num_processes=2 rdzv_conf=secret=a rdzv_conf=secret=b", "option rdzv_conf is given twice"},
      {"log_line_prefix_template='[r]' num_processes=1 log_line_prefix_template=x",
       "option log_line_prefix_template is given twice"},
  };
  expect_rejections(cases, sizeof cases / sizeof cases[0]);
}

NBF_TEST(options_long_values_are_refused) {
  char text[700], err[512];
  ln_options_t o;
  snprintf(text, sizeof text, "num_processes=1 log_line_prefix_template=%0300d", 0);
  ASSERT_EQ(parse(text, &o, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "bad value for log_line_prefix_template");
  snprintf(text, sizeof text, "num_processes=1 rdzv_id=%0200d", 0);
  ASSERT_EQ(parse(text, &o, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "(at most 127)");
}

NBF_TEST(prefix_template) {
  ln_options_t o;
  char err[512], out[128];
  ASSERT_EQ(parse("num_processes=2 node_rank=1 num_nodes=2 "
                  "log_line_prefix_template='[{rank}/{local_rank}@{node_rank}] {x} '",
                  &o, err, sizeof err),
            0);
  ln_options_prefix(&o, 3, 1, out, sizeof out);
  ASSERT_EQ_STR(out, "[3/1@1] {x} ");
  char small[6];
  ln_options_prefix(&o, 12345, 1, small, sizeof small);
  ASSERT_EQ_STR(small, "[1234"); /* truncated, still terminated */
  ln_options_init(&o);
  ln_options_prefix(&o, 0, 0, out, sizeof out);
  ASSERT_EQ_STR(out, "");
}

/* ---- per-rank environment --------------------------------------------- */

/* Parse `opts`, export worker `local_rank`'s environment of run
 * `restart` into this process and return it as "NAME=value ..." (every
 * variable ln_worker_export_env sets; "-" when unset), static storage. */
static const char *exported_env(const char *opts, int restart, int local_rank) {
  static const nbf_param_id_t ids[] = {NBF_P_RANK,
                                       NBF_P_LOCAL_RANK,
                                       NBF_P_WORLD_SIZE,
                                       NBF_P_LOCAL_WORLD_SIZE,
                                       NBF_P_NODE_RANK,
                                       NBF_P_GROUP_RANK,
                                       NBF_P_MASTER_ADDR,
                                       NBF_P_MASTER_PORT,
                                       NBF_P_ACCELERATE_MIXED_PRECISION,
                                       NBF_P_TORCHELASTIC_RESTART_COUNT,
                                       NBF_P_NBFORK_RESTART_COUNT,
                                       NBF_P_NBFORK_STORE_HOSTED,
                                       NBF_P_NBFORK_RDZV_SECRET,
                                       NBF_P_NBFORK_RUN_ID};
  static char text[2048];
  ln_options_t o;
  char err[512];
  if (parse(opts, &o, err, sizeof err) != 0)
    NBF_TEST_FAIL("'%s': %s", opts, err);
  ln_worker_env_t env = {&o, restart, 0, NULL, 0};
  ln_worker_export_env(&env, local_rank);
  size_t off = 0;
  for (size_t i = 0; i < sizeof ids / sizeof ids[0] && off < sizeof text; i++) {
    const char *v = nbf_param_raw(ids[i]);
    off += (size_t)snprintf(text + off, sizeof text - off, "%s%s=%s", i ? " " : "",
                            nbf_param_name(ids[i]), v ? v : "-");
  }
  return text;
}

NBF_TEST(worker_environment) {
  ASSERT_EQ_STR(exported_env("num_processes=3 node_rank=1 num_nodes=2 master_addr=10.0.0.1 "
                             "use_port=2345 mixed_precision=fp16 rdzv_id=job rdzv_conf=secret=k",
                             2, 1),
                "RANK=4 LOCAL_RANK=1 WORLD_SIZE=6 LOCAL_WORLD_SIZE=3 NODE_RANK=1 GROUP_RANK=1 "
                "MASTER_ADDR=10.0.0.1 MASTER_PORT=2345 ACCELERATE_MIXED_PRECISION=fp16 "
                "TORCHELASTIC_RESTART_COUNT=2 NBFORK_RESTART_COUNT=2 NBFORK_STORE_HOSTED=1 "
                "NBFORK_RDZV_SECRET=k NBFORK_RUN_ID=job-r2");
}

NBF_TEST(worker_environment_default_run_id) {
  ASSERT_EQ_STR(exported_env("num_processes=2", 0, 0),
                "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 GROUP_RANK=0 "
                "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ACCELERATE_MIXED_PRECISION=no "
                "TORCHELASTIC_RESTART_COUNT=0 NBFORK_RESTART_COUNT=0 NBFORK_STORE_HOSTED=1 "
                "NBFORK_RDZV_SECRET=- NBFORK_RUN_ID=nbfork-r0");
}

/* ---- line assembly ------------------------------------------------------ */

/* A worker slot whose stream s reads from a pipe the test writes, and
 * whose stdout/stderr lines land in one temporary file. */
typedef struct {
  ln_worker_t w;
  int in[3]; /* write ends, -1 when closed */
  FILE *out;
} fake_worker_t;

static void fake_open(fake_worker_t *f, const char *prefix) {
  ln_worker_init(&f->w, 0);
  snprintf(f->w.prefix, sizeof f->w.prefix, "%s", prefix);
  f->out = tmpfile();
  ASSERT_NOT_NULL(f->out);
  for (int s = 0; s < 3; s++) {
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    f->w.fd[s] = p[0];
    f->in[s] = p[1];
    fcntl(p[0], F_SETFL, O_NONBLOCK);
  }
  f->w.out_fd[LN_STDOUT] = f->w.out_fd[LN_STDERR] = fileno(f->out);
}

static void fake_write(fake_worker_t *f, int s, const char *text) {
  ASSERT_EQ(nbf_write_all(f->in[s], text, strlen(text)), 0);
}

/* Everything forwarded so far, as one string (static storage). */
static const char *fake_output(fake_worker_t *f) {
  static char text[8192];
  ssize_t n = pread(fileno(f->out), text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = 0;
  return text;
}

/* Write `text` on stream s, let the worker read it; the output so far. */
static const char *feed(fake_worker_t *f, int s, const char *text) {
  fake_write(f, s, text);
  ln_worker_read(&f->w, s, NULL);
  return fake_output(f);
}

static void fake_close(fake_worker_t *f) {
  for (int s = 0; s < 3; s++)
    if (f->in[s] >= 0)
      close(f->in[s]);
  ln_worker_close(&f->w);
  ln_worker_free(&f->w);
  fclose(f->out);
}

NBF_TEST(lines_get_the_prefix) {
  fake_worker_t f;
  fake_open(&f, "[1] ");
  ASSERT_EQ_STR(feed(&f, LN_STDOUT, "one\ntwo\nthr"), "[1] one\n[1] two\n");
  ASSERT_EQ_STR(feed(&f, LN_STDOUT, "ee\n"), "[1] one\n[1] two\n[1] three\n");
  fake_close(&f);
}

NBF_TEST(stale_partial_line_is_flushed_once) {
  fake_worker_t f;
  fake_open(&f, "[0] ");
  ASSERT_EQ_STR(feed(&f, LN_STDOUT, "Password: "), "");
  ln_worker_flush_stale(&f.w); /* first tick: it may still grow */
  ASSERT_EQ_STR(fake_output(&f), "");
  ln_worker_flush_stale(&f.w); /* a whole tick later: forward it */
  ASSERT_EQ_STR(fake_output(&f), "[0] Password: ");
  /* the rest of the line gets no second prefix; the next line does */
  ASSERT_EQ_STR(feed(&f, LN_STDOUT, "ok\nnext\n"), "[0] Password: ok\n[0] next\n");
  fake_close(&f);
}

/* A worker's last line without '\n' is ended by the launcher when the
 * stream ends, so the next message starts on its own line. */
NBF_TEST(partial_line_ends_with_newline_at_eof) {
  fake_worker_t f;
  fake_open(&f, "");
  fake_write(&f, LN_STDOUT, "progress 99%");
  close(f.in[LN_STDOUT]);
  f.in[LN_STDOUT] = -1;
  ln_worker_read(&f.w, LN_STDOUT, NULL);
  ASSERT_EQ(f.w.fd[LN_STDOUT], -1); /* EOF closed it */
  ASSERT_EQ_STR(fake_output(&f), "progress 99%\n");
  fake_close(&f);
}

NBF_TEST(flushed_partial_line_ends_with_newline_at_close) {
  fake_worker_t f;
  fake_open(&f, "");
  ASSERT_EQ_STR(feed(&f, LN_STDERR, "loss=0.5"), "");
  ln_worker_flush_stale(&f.w);
  ln_worker_flush_stale(&f.w);
  ASSERT_EQ_STR(fake_output(&f), "loss=0.5");
  ln_worker_close(&f.w); /* the worker was reaped */
  ASSERT_EQ_STR(fake_output(&f), "loss=0.5\n");
  fake_close(&f);
}

static char g_events[1024];

static int record_event(const char *line, size_t len) {
  size_t n = strlen(g_events);
  snprintf(g_events + n, sizeof g_events - n, "<%.*s>", (int)len, line);
  return 0;
}

NBF_TEST(display_lines_go_to_send_event) {
  fake_worker_t f;
  fake_open(&f, "[0] ");
  fake_write(&f, LN_DISPLAY, "{\"a\":1}\n{\"b\":");
  ln_worker_read(&f.w, LN_DISPLAY, record_event);
  ASSERT_EQ_STR(g_events, "<{\"a\":1}>");
  close(f.in[LN_DISPLAY]);
  f.in[LN_DISPLAY] = -1;
  ln_worker_read(&f.w, LN_DISPLAY, record_event); /* an unfinished event is dropped */
  ASSERT_EQ_STR(g_events, "<{\"a\":1}>");
  ASSERT_EQ_STR(fake_output(&f), ""); /* never on stdout */
  fake_close(&f);
}

/* ---- failure descriptions ------------------------------------------------ */

static const char *describe(const ln_worker_t *w, int rank) {
  static char text[8192];
  FILE *f = fmemopen(text, sizeof text, "w");
  ASSERT_NOT_NULL(f);
  ln_worker_describe(w, rank, f);
  fclose(f);
  return text;
}

NBF_TEST(describe_exit_code_and_stderr_tail) {
  fake_worker_t f;
  fake_open(&f, "[r] ");
  char line[64];
  for (int i = 0; i < LN_TAIL_LINES + 3; i++) {
    snprintf(line, sizeof line, "err line %d\n", i);
    fake_write(&f, LN_STDERR, line);
  }
  ln_worker_read(&f.w, LN_STDERR, NULL);
  f.w.pid = 4242;
  f.w.local_rank = 1;
  f.w.status = W_EXITCODE(3, 0);
  const char *d = describe(&f.w, 5);
  ASSERT_CONTAINS(d, "rank 5 (local rank 1, pid 4242) exited with code 3");
  ASSERT_CONTAINS(d, "last lines of its stderr:\n    err line 3\n");
  ASSERT_CONTAINS(d, "    err line 14\n");
  ASSERT_NOT_CONTAINS(d, "err line 2\n");
  ASSERT_NOT_CONTAINS(d, "[r]"); /* the tail holds the worker's text, not the prefix */
  fake_close(&f);
}

NBF_TEST(describe_signal_names_it) {
  ln_worker_t w;
  ln_worker_init(&w, 0);
  w.pid = 7;
  w.status = W_EXITCODE(0, SIGSEGV);
  const char *d = describe(&w, 0);
  ASSERT_CONTAINS(d, "rank 0 (local rank 0, pid 7) was killed by signal 11 (SIGSEGV: "
                     "Segmentation fault)");
  ASSERT_CONTAINS(d, "(it wrote nothing on stderr)");
  w.status = W_EXITCODE(0, SIGKILL);
  ASSERT_CONTAINS(describe(&w, 0), "killed by signal 9 (SIGKILL: Killed)");
  ln_worker_free(&w);
}

/* ---- ln_run_group on trivial functions ------------------------------------ */

static int my_rank(void) {
  long r = -1;
  nbf_param_RANK(&r);
  return (int)r;
}

static int fn_ok(void) {
  return 0;
}
static int fn_exit_1(void) {
  return 1;
}
static int fn_rank1_exits_3(void) {
  if (my_rank() != 1)
    for (;;)
      pause(); /* a blocked peer: the group must stop it */
  fprintf(stderr, "rank 1 is about to fail\n");
  exit(3);
}
static int fn_killed(void) {
  raise(SIGKILL);
  return 0;
}
static int fn_forever(void) {
  while (pause() < 0) /* pause() returns only -1 (EINTR): until killed */
    ;
  return 0;
}

/* What the runtime writes in a rank's state record (nbf_rankstate.h),
 * written here by hand: `n` completed all-reduces of 4096 f32. */
static void record_done(nbf_rankstate_t *rs, int n) {
  for (int i = 1; i <= n; i++) {
    nbf_rs_call_t c = {.op = NBF_RS_ALL_REDUCE, .dtype = ACC_F32, .root = -1, .count = 4096,
                       .seq = (uint64_t)i, .start_ms = nbf_now_ms()};
    nbf_rankstate_begin(rs, &c);
    nbf_rankstate_end(rs);
  }
}

/* Enter collective #seq (op) and fail it with `code`, losing `peer`. */
static void record_failed(nbf_rankstate_t *rs, nbf_rs_op_t op, uint64_t seq, int code, int peer,
                          const char *msg) {
  nbf_rs_call_t c = {.op = op, .dtype = op == NBF_RS_BARRIER ? 255 : ACC_F32, .root = -1,
                     .count = op == NBF_RS_BARRIER ? 0 : 4096, .seq = seq,
                     .start_ms = nbf_now_ms()};
  nbf_rankstate_begin(rs, &c);
  nbf_rankstate_error(rs, code, peer, &c, msg);
}

/* Wait (30 s at most) until the process whose pid rank 1 wrote in
 * g_leaver_file is gone (no longer in /proc, or a zombie). */
static char g_leaver_file[64];
static void wait_for_rank1_gone(void) {
  int pid = 0;
  for (int i = 0; i < 3000 && pid <= 0; i++) {
    FILE *f = fopen(g_leaver_file, "r");
    if (!f || fscanf(f, "%d", &pid) != 1)
      pid = 0, usleep(10000);
    if (f)
      fclose(f);
  }
  char path[64], state = 'R';
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  for (int i = 0; i < 3000 && state != 'Z' && state != 0; i++) {
    FILE *f = fopen(path, "r");
    state = 0;
    if (f && fscanf(f, "%*d %*s %c", &state) != 1)
      state = 0;
    if (f)
      fclose(f);
    if (state && state != 'Z')
      usleep(10000);
  }
}

static void write_my_pid(void) {
  FILE *f = fopen(g_leaver_file, "w");
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
}

/* Rank 1 completes 57 all-reduces and leaves the group (exit 0); rank 0
 * enters all-reduce #58 and fails once rank 1 is gone, its record naming
 * rank 1 as the connection it lost: the order of a peer failing because
 * a rank left in the middle. Nothing is written on stderr that the
 * launcher could read. */
static int fn_rank1_leaves(void) {
  nbf_rankstate_t *rs = nbf_rankstate_self();
  if (!rs)
    return 99; /* the launcher gave no record */
  nbf_rankstate_phase(rs, NBF_RS_RUNNING);
  record_done(rs, 57);
  if (my_rank() == 1) {
    nbf_rankstate_phase(rs, NBF_RS_EXITED);
    write_my_pid();
    return 0;
  }
  nbf_rs_call_t c = {.op = NBF_RS_ALL_REDUCE, .dtype = ACC_F32, .root = -1, .count = 4096,
                     .seq = 58, .start_ms = nbf_now_ms()};
  nbf_rankstate_begin(rs, &c);
  wait_for_rank1_gone();
  nbf_rankstate_error(rs, ACC_ERR_PEER, 1, &c, "rank 0: all-reduce of 4096 elements failed");
  fprintf(stderr, "rank 0: my peer is gone\n");
  return 1;
}

/* Rank 1's barrier #58 failed (it lost rank 0) and it ignored that and
 * exited 0; rank 0 failed on its own in all-reduce #58 (a backend error),
 * after rank 1 had exited. An exit 0 with an error of its own is no
 * leaving early. */
static int fn_rank1_ignores_its_error(void) {
  nbf_rankstate_t *rs = nbf_rankstate_self();
  if (!rs)
    return 99;
  nbf_rankstate_phase(rs, NBF_RS_RUNNING);
  record_done(rs, 57);
  if (my_rank() == 1) {
    record_failed(rs, NBF_RS_BARRIER, 58, ACC_ERR_PEER, 0, "rank 1: barrier failed");
    nbf_rankstate_phase(rs, NBF_RS_RUNNING);
    write_my_pid();
    return 0;
  }
  wait_for_rank1_gone();
  record_failed(rs, NBF_RS_ALL_REDUCE, 58, ACC_ERR_BACKEND, -1, "rank 0: enforce fail");
  return 1;
}

/* Rank 1 completes 57 all-reduces and enters acc_destroy's barrier #58
 * (leaving); rank 0 enters all-reduce #58: as the runtime records them.
 * With `errors_return`, rank 0 handles failed collectives itself. Each
 * then waits `wait_ms` (0: until killed) and returns 0. */
static int g_errors_return, g_wait_ms;
static int fn_leaving_barrier(void) {
  nbf_rankstate_t *rs = nbf_rankstate_self();
  if (!rs)
    return 99;
  nbf_rankstate_flag(rs, NBF_RS_ERRORS_RETURN, g_errors_return);
  nbf_rankstate_phase(rs, NBF_RS_RUNNING);
  record_done(rs, 57);
  int leaver = my_rank() == 1;
  if (leaver)
    nbf_rankstate_leaving(rs);
  nbf_rs_call_t c = {.op = leaver ? NBF_RS_BARRIER : NBF_RS_ALL_REDUCE,
                     .dtype = leaver ? 255 : ACC_F32,
                     .root = -1,
                     .count = leaver ? 0 : 4096,
                     .seq = 58,
                     .start_ms = nbf_now_ms()};
  nbf_rankstate_begin(rs, &c);
  if (!g_wait_ms)
    for (;;)
      pause();
  usleep((useconds_t)g_wait_ms * 1000);
  return 0;
}

static volatile sig_atomic_t g_interrupted;

/* Port 0: the store binds whatever port is free; no worker connects. */
static ln_run_result_t run_group(int n, ln_entry_fn fn, char **failures, char **setup_error) {
  ln_options_t o;
  ln_options_init(&o);
  o.num_processes = n;
  o.use_port = 0;
  o.monitor_interval_s = 0.02;
  ln_context_t ctx = {NULL, &g_interrupted, 0, NULL, 0, NULL, NULL, NULL};
  *failures = *setup_error = NULL;
  return ln_run_group(&o, fn, &ctx, 0, 0, failures, setup_error);
}

NBF_TEST(run_group_every_worker_exits_0) {
  char *failures, *setup_error;
  ASSERT_EQ(run_group(3, fn_ok, &failures, &setup_error), LN_RUN_OK);
  ASSERT_NULL(failures);
  ASSERT_NULL(setup_error);
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1); /* every worker was reaped */
  ASSERT_EQ(errno, ECHILD);
}

NBF_TEST(run_group_exit_1_fails) {
  char *failures, *setup_error;
  ASSERT_EQ(run_group(2, fn_exit_1, &failures, &setup_error), LN_RUN_FAILED);
  ASSERT_NOT_NULL(failures);
  ASSERT_CONTAINS(failures, "exited with code 1");
  free(failures);
  free(setup_error);
}

NBF_TEST(run_group_failure_stops_blocked_peer) {
  char *failures, *setup_error;
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(run_group(2, fn_rank1_exits_3, &failures, &setup_error), LN_RUN_FAILED);
  ASSERT_LT(nbf_now_ms() - t0, 30000); /* it ends: the peer was stopped */
  ASSERT_CONTAINS(failures, "rank 1 (local rank 1, pid ");
  ASSERT_CONTAINS(failures, "exited with code 3");
  ASSERT_CONTAINS(failures, "    rank 1 is about to fail\n");
  ASSERT_NOT_CONTAINS(failures, "rank 0 ("); /* the stopped peer is no culprit */
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
  free(failures);
}

/* Run 2 ranks of fn (fn_rank1_leaves, fn_rank1_ignores_its_error); the
 * failure report (caller frees). */
static char *run_with_leaver(int (*fn)(void)) {
  char *failures, *setup_error;
  snprintf(g_leaver_file, sizeof g_leaver_file, "/tmp/nbf-leaver-%d", (int)getpid());
  unlink(g_leaver_file);
  ASSERT_EQ(run_group(2, fn, &failures, &setup_error), LN_RUN_FAILED);
  unlink(g_leaver_file);
  printf("%s", failures);
  return failures;
}

/* The report leads with the rank that left first (exit 0 while its peer
 * waited in a collective it never completed: their records say so),
 * then the peer's failure with its record, then every rank's position
 * naming the odd one. */
NBF_TEST(run_group_rank_that_left_first_leads) {
  char *failures = run_with_leaver(fn_rank1_leaves);
  ASSERT_TRUE(strncmp(failures, "rank 1 (local rank 1, pid ", 26) == 0);
  ASSERT_CONTAINS(failures, "left first: it exited with code 0 (it returned or called exit(0))");
  ASSERT_CONTAINS(failures, "after all_reduce #57, while its peers were still in collectives");
  const char *peer = strstr(failures, "\nrank 0 (local rank 0, pid ");
  ASSERT_NOT_NULL(peer);
  ASSERT_CONTAINS(peer, "exited with code 1");
  ASSERT_CONTAINS(peer, "    rank 0: my peer is gone\n");
  ASSERT_CONTAINS(peer, "  its all_reduce #58 (f32 x 4096) failed after ");
  ASSERT_CONTAINS(peer, "lost rank 1): all-reduce of 4096 elements failed\n");
  ASSERT_CONTAINS(failures, "Where each rank was when the group failed");
  ASSERT_CONTAINS(failures, "  rank 1: left the process group after all_reduce #57; exited 0\n");
  ASSERT_CONTAINS(failures, "  -> rank 1 left early: it left after all_reduce #57 while rank 0 "
                            "waited in all_reduce #58 (f32 x 4096)\n");
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
  free(failures);
}

/* A rank in acc_destroy's barrier #58 while its peer waits in all-reduce
 * #58: the group would hang until NBFORK_TIMEOUT_S; it is stopped within
 * a few monitor ticks (0.02 s here) and the leaver leads the report.
 * Before: the launcher waited for a worker to exit. */
NBF_TEST(run_group_leaving_rank_stops_the_group_at_once) {
  char *failures, *setup_error;
  g_errors_return = 0, g_wait_ms = 0;
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(run_group(2, fn_leaving_barrier, &failures, &setup_error), LN_RUN_FAILED);
  int64_t ms = nbf_now_ms() - t0;
  printf("%s(%lld ms)\n", failures, (long long)ms);
  ASSERT_TRUE(strncmp(failures, "rank 1 (local rank 1, pid ", 26) == 0);
  ASSERT_CONTAINS(failures, "left first: it was leaving the group (acc_destroy)");
  ASSERT_CONTAINS(failures, "nbfork stopped the group when rank 1's record showed it leaving");
  ASSERT_CONTAINS(failures, "  -> rank 1 left early: it is leaving the group (acc_destroy's "
                            "barrier) after all_reduce #57 while rank 0 waits in all_reduce #58 "
                            "(f32 x 4096)\n");
  ASSERT_TRUE(ms < 5000); /* start, one tick, SIGTERM, reap; the drain ends with the pipes */
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
  free(failures);
}

/* The same positions with a peer that handles failed collectives itself
 * (ACC_ERRORS_RETURN): the launcher leaves the group alone, as chosen. */
NBF_TEST(run_group_leaving_rank_left_to_a_peer_that_handles_errors) {
  char *failures, *setup_error;
  g_errors_return = 1, g_wait_ms = 600;
  ASSERT_EQ(run_group(2, fn_leaving_barrier, &failures, &setup_error), LN_RUN_OK);
  ASSERT_NULL(failures);
  g_errors_return = 0, g_wait_ms = 0;
}

/* An exit 0 after an error of its own (a peer that ignored its failed
 * barrier) is no proof of leaving early: the failure leads, and nothing
 * is called "left first". */
NBF_TEST(run_group_exit_0_after_own_error_is_no_leaver) {
  char *failures = run_with_leaver(fn_rank1_ignores_its_error);
  ASSERT_TRUE(strncmp(failures, "rank 0 (local rank 0, pid ", 26) == 0);
  ASSERT_CONTAINS(failures, "its all_reduce #58 (f32 x 4096) failed after ");
  ASSERT_NOT_CONTAINS(failures, "left first");
  ASSERT_NOT_CONTAINS(failures, "left early");
  free(failures);
}

NBF_TEST(run_group_signal_is_named) {
  char *failures, *setup_error;
  ASSERT_EQ(run_group(1, fn_killed, &failures, &setup_error), LN_RUN_FAILED);
  ASSERT_CONTAINS(failures, "rank 0 (local rank 0, pid ");
  ASSERT_CONTAINS(failures, "was killed by signal 9 (SIGKILL");
  free(failures);
}

static void on_alarm(int sig) {
  (void)sig;
  g_interrupted = 1; /* as the executor's SIGINT handler does */
}

NBF_TEST(run_group_interrupt_stops_everything) {
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  ASSERT_EQ(sigaction(SIGALRM, &sa, NULL), 0);
  struct itimerval it = {{0, 0}, {0, 200000}};
  ASSERT_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
  char *failures, *setup_error;
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(run_group(2, fn_forever, &failures, &setup_error), LN_RUN_INTERRUPTED);
  ASSERT_LT(nbf_now_ms() - t0, 30000);
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
  ASSERT_EQ(errno, ECHILD);
  free(failures);
  free(setup_error);
}

/* A worker leaving two processes: one in its process group, one that
 * escaped it with setsid(); both outlive the worker. */
static int fn_leaves_two(void) {
  if (fork() == 0) {
    for (;;)
      pause();
  }
  if (fork() == 0) {
    setsid();
    for (;;)
      pause();
  }
  return 0;
}

NBF_TEST(run_group_stops_what_workers_left_running) {
  pid_t mine = fork(); /* the caller's own child: not the launch's to stop */
  if (mine == 0) {
    for (;;)
      pause();
  }
  char *failures, *setup_error;
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(run_group(2, fn_leaves_two, &failures, &setup_error), LN_RUN_OK);
  ASSERT_LT(nbf_now_ms() - t0, 30000);
  int n;
  pid_t *kids = ln_children(&n);
  ASSERT_EQ(n, 1); /* the four leftovers were reparented to us, stopped, reaped */
  ASSERT_EQ(kids[0], mine);
  free(kids);
  int sub = -1;
  prctl(PR_GET_CHILD_SUBREAPER, &sub);
  ASSERT_EQ(sub, 0); /* restored after the launch */
  kill(mine, SIGKILL);
  ASSERT_EQ(waitpid(mine, NULL, 0), mine);
}

/* A leftover deaf to SIGTERM that also closed its output: SIGKILL after
 * the grace ends it. */
static int fn_leaves_a_deaf_one(void) {
  int ready[2];
  if (pipe(ready))
    return 1;
  if (fork() == 0) {
    signal(SIGTERM, SIG_IGN);
    setsid();
    for (int fd = 0; fd < 3; fd++)
      close(fd);
    close(ready[0]);
    close(ready[1]); /* deaf now: the worker may return */
    for (;;)
      pause();
  }
  close(ready[1]);
  char c;
  while (read(ready[0], &c, 1) < 0 && errno == EINTR)
    ;
  return 0;
}

NBF_TEST(run_group_kills_a_term_deaf_leftover) {
  char *failures, *setup_error;
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(run_group(1, fn_leaves_a_deaf_one, &failures, &setup_error), LN_RUN_OK);
  int64_t took = nbf_now_ms() - t0;
  ASSERT_GE(took, 900); /* it got its SIGTERM grace ... */
  ASSERT_LT(took, 30000); /* ... then SIGKILL */
  ASSERT_EQ(waitpid(-1, NULL, WNOHANG), -1);
  ASSERT_EQ(errno, ECHILD);
}

/* ---- the fork guard --------------------------------------------------------- */

static void *wait_on_pipe(void *arg) {
  char c;
  while (read(*(int *)arg, &c, 1) < 0 && errno == EINTR)
    ;
  return NULL;
}

/* ln_thread_count until it says `want` (a joined thread's task entry can
 * outlive pthread_join by a moment); the last count. */
static int thread_count_settles(int want) {
  int n = ln_thread_count();
  for (int i = 0; i < 500 && n != want; i++) {
    usleep(10000);
    n = ln_thread_count();
  }
  return n;
}

NBF_TEST(thread_count_sees_threads) {
  int n0 = ln_thread_count();
  ASSERT_GE(n0, 1);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_on_pipe, &p[0]), 0);
  ASSERT_EQ(ln_thread_count(), n0 + 1);
  close(p[1]);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(thread_count_settles(n0), n0);
  close(p[0]);
}

NBF_TEST(launch_refuses_a_multithreaded_process) {
  ASSERT_EQ(ln_thread_count(), 1);
  ln_options_t o;
  ln_options_init(&o);
  o.num_processes = 1;
  o.use_port = 0;
  ln_context_t ctx = {NULL, &g_interrupted, 0, NULL, 0, NULL, NULL, NULL};
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_on_pipe, &p[0]), 0);
  ln_error_t err;
  ASSERT_EQ(ln_launch(&o, fn_ok, &ctx, &err), -1);
  ASSERT_EQ_STR(err.ename, "LaunchError");
  ASSERT_CONTAINS(err.evalue, "runs 2 threads");
  ASSERT_CONTAINS(err.evalue, "deadlock");
  ASSERT_CONTAINS(err.traceback, "pthread_join");
  ln_error_free(&err);
  close(p[1]);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  ASSERT_EQ(thread_count_settles(1), 1);
  ASSERT_EQ(ln_launch(&o, fn_ok, &ctx, &err), 0); /* single-threaded again: it runs */
}

/* ---- the rendezvous' world comparison and rdzv_conf ---------------------- */

NBF_TEST(rdzv_compare_names_each_difference) {
  ln_options_t a, b;
  ln_options_init(&a);
  ln_options_init(&b);
  a.num_processes = 2, b.num_processes = 3;
  a.num_nodes = b.num_nodes = 2;
  snprintf(a.rdzv_id, sizeof a.rdzv_id, "alpha");
  snprintf(b.rdzv_id, sizeof b.rdzv_id, "beta");
  char da[512], db[512];
  ln_rdzv_describe(&a, da, sizeof da);
  ln_rdzv_describe(&b, db, sizeof db);
  const char *same[2] = {da, da};
  ASSERT_NULL(ln_rdzv_compare(same, 2)); /* the host differs in no field compared */
  const char *two[3] = {da, NULL, db};   /* node 1 not arrived */
  char *diff = ln_rdzv_compare(two, 3);
  ASSERT_NOT_NULL(diff);
  ASSERT_EQ_STR(diff, "rdzv_id: node 0 has alpha, node 2 has beta; num_processes: node 0 has 2, "
                      "node 2 has 3");
  free(diff);
  /* `nbfork launch`'s words: its flags, per machine (issue 21 item 6) */
  diff = ln_rdzv_compare_for(two, 3, 1);
  ASSERT_EQ_STR(diff, "rdzv_id alpha on machine 0, beta on machine 2; --num_processes 4 on "
                      "machine 0, 6 on machine 2"); /* the flag counts both machines' processes */
  free(diff);
  snprintf(b.rdzv_id, sizeof b.rdzv_id, "alpha");
  b.num_processes = 2, b.num_nodes = 3;
  snprintf(b.mixed_precision, sizeof b.mixed_precision, "bf16");
  ln_rdzv_describe(&b, db, sizeof db);
  const char *three[2] = {da, db};
  diff = ln_rdzv_compare(three, 2);
  ASSERT_EQ_STR(diff, "num_nodes: node 0 has 2, node 1 has 3; mixed_precision: node 0 has no, "
                      "node 1 has bf16");
  free(diff);
}

NBF_TEST(rdzv_conf_join_timeout_and_secret) {
  ln_options_t o;
  ln_options_init(&o);
  char err[512];
  ASSERT_EQ(
      ln_options_parse("num_processes=1 rdzv_conf=secret=k,join_timeout=7", &o, err, sizeof err),
      0);
  ASSERT_EQ_STR(o.rdzv_secret, "k");
  ASSERT_EQ(o.rdzv_timeout_s, 7);
  ln_options_init(&o);
  ASSERT_EQ(ln_options_parse("num_processes=1 rdzv_conf=join_timeout=0", &o, err, sizeof err), -1);
  ASSERT_CONTAINS(err, "join_timeout=SECONDS");
}

/* Two nodes' executors of %ranks against one store (served from this
 * process): a node's stop is seen by the other and never by itself; the
 * decision on a stopped cell is one for both, made from both verdicts. */
NBF_TEST(ranks_nodes_agree_on_a_stopped_cell) {
  char err[256];
  acc_store_server_t *srv = acc_store_server_start("127.0.0.1", 0, err, sizeof err);
  ASSERT_NOT_NULL(srv);
  ln_options_t o[2];
  ln_rk_nodes_t *n[2];
  for (int k = 0; k < 2; k++) {
    ln_options_init(&o[k]);
    o[k].num_nodes = 2;
    o[k].node_rank = k;
    o[k].use_port = acc_store_server_port(srv);
    char *e = NULL;
    n[k] = ln_rk_nodes_open(&o[k], 0, &e);
    ASSERT_NOT_NULL(n[k]);
  }
  /* cell 1: node 1 interrupted, node 0's ranks cut inside a collective */
  ln_rk_nodes_stop(n[1], 1, 'I', "node 1 was interrupted");
  ASSERT_NULL(ln_rk_nodes_stopped(n[1], 1));
  ASSERT_NULL(ln_rk_nodes_stopped(n[0], 2));
  char *stop = ln_rk_nodes_stopped(n[0], 1);
  ASSERT_EQ_STR(stop, "Inode 1 was interrupted");
  free(stop);
  ln_rk_nodes_verdict(n[0], 1, 'c', NULL);
  ln_rk_nodes_verdict(n[1], 1, 'k', NULL);
  char *why = NULL;
  for (int k = 1; k >= 0; k--) /* node 1 asks first: it decides */
    ASSERT_EQ(ln_rk_nodes_decide(n[k], 1, &why), LN_RKN_REBUILD);
  /* cell 2: a dead rank on node 1 forbids the rebuild a cut asks for */
  ln_rk_nodes_verdict(n[0], 2, 'c', NULL);
  ln_rk_nodes_verdict(n[1], 2, 'd', "rank 3 dead");
  for (int k = 0; k < 2; k++) {
    ASSERT_EQ(ln_rk_nodes_decide(n[k], 2, &why), LN_RKN_CANNOT);
    ASSERT_EQ_STR(why, "rank 3 dead on node 1");
    free(why);
  }
  /* cell 3: stopped outside collectives on one node, finished on the
   * other: the group is in step */
  ln_rk_nodes_verdict(n[0], 3, 'k', NULL);
  ln_rk_nodes_verdict(n[1], 3, 'o', NULL);
  for (int k = 0; k < 2; k++)
    ASSERT_EQ(ln_rk_nodes_decide(n[k], 3, &why), LN_RKN_NOTHING);
  for (int k = 0; k < 2; k++)
    ln_rk_nodes_close(&n[k]);
  ASSERT_NULL(n[0]);
  acc_store_server_stop(&srv);
}

NBF_TEST_MAIN()

/* ---------------------------------------------- reachability of nodes */

/* A listener whose accept queue is full: Linux drops further SYNs, so a
 * connect to it stays pending, as across a cut link. Returns the port;
 * fds[0] listens, fds[1] is the connection that filled the queue. */
static int silent_listener(int fds[2]) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(bind(fds[0], (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(fds[0], 0), 0);
  ASSERT_EQ(getsockname(fds[0], (struct sockaddr *)&a, &len), 0);
  fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(fds[1], (struct sockaddr *)&a, sizeof a), 0); /* queued, never accepted */
  return ntohs(a.sin_port);
}

/* A listening port and a closed one both answer (connected, refused):
 * the host is reachable. A connect that gets no answer until the deadline
 * (a full accept queue drops the SYN) and one the kernel refuses to route
 * (ENETUNREACH: TCP to a multicast address) are no answer; the deadline
 * bounds the probe. Addresses outside this host are not used: a sandbox's
 * gateway may answer for any of them. */
NBF_TEST(probe_tells_an_answering_host_from_a_silent_one) {
  int fds[2];
  int port = silent_listener(fds);
  int64_t t0 = nbf_now_ms();
  ASSERT_EQ(ln_probe_tcp("127.0.0.1", port, 300), 0);
  int64_t waited = nbf_now_ms() - t0;
  ASSERT_TRUE(waited >= 250 && waited < 5000);
  int c = accept(fds[0], NULL, NULL); /* room again: it answers */
  ASSERT_TRUE(c >= 0);
  close(c);
  close(fds[1]);
  ASSERT_EQ(ln_probe_tcp("127.0.0.1", port, 5000), 1);
  close(fds[0]); /* now closed: refused, still an answer */
  ASSERT_EQ(ln_probe_tcp("127.0.0.1", port, 1000), 1);
  ASSERT_EQ(ln_probe_tcp("224.0.0.1", 9, 300), 0);
  ASSERT_EQ(ln_probe_tcp(NULL, 9, 300), -1);
}

/* A failed multi-node launch names the node this one cannot reach: node
 * k > 0 probes node 0 (main_process_ip); nothing is said when it answers,
 * or for a single node. Node 0's side (the addresses its store saw) is
 * proved across network namespaces (e2e.netns, e2e.chaos). */
NBF_TEST(probe_lost_nodes_names_node_0_when_silent) {
  ln_options_t o;
  ln_options_init(&o);
  o.num_nodes = 2;
  o.node_rank = 1;
  o.use_port = 29500;
  snprintf(o.master_addr, sizeof o.master_addr, "224.0.0.1"); /* no route */
  char *lost = ln_probe_lost_nodes(&o, NULL);
  ASSERT_NOT_NULL(lost);
  ASSERT_CONTAINS(lost, "node 0 at [224.0.0.1] (main_process_ip, its store on port 29500)");
  ASSERT_CONTAINS(lost, "the network between the nodes failed or that node went down");
  free(lost);
  snprintf(o.master_addr, sizeof o.master_addr, "127.0.0.1");
  ASSERT_TRUE(ln_probe_lost_nodes(&o, NULL) == NULL);
  o.num_nodes = 1;
  o.node_rank = 0;
  snprintf(o.master_addr, sizeof o.master_addr, "224.0.0.1");
  ASSERT_TRUE(ln_probe_lost_nodes(&o, NULL) == NULL);
}
