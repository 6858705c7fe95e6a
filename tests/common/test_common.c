/*
 * test_common.c — nbfork_common: the parameter table
 * (common/nbf_params.def) and its reader (parsing rules, the README's
 * environment table naming exactly the table's variables, `getenv`
 * nowhere but in the reader), the growable buffer and the system helpers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbf_buf.h"
#include "nbf_param.h"
#include "nbf_util.h"
#include "nbf_workdir.h"
#include "nbf_test.h"

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    NBF_TEST_FAIL("cannot open %s", path);
  nbf_buf_t b = {0};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    ASSERT_EQ(nbf_buf_append(&b, chunk, n), 0);
  fclose(f);
  return nbf_buf_take(&b);
}

/* Names in backquotes in the first column of the rows of README.md's
 * "## Environment variables" table, as one " NAME NAME ... " string. */
static char *readme_names(void) {
  char *text = read_file(NBF_SOURCE_DIR "/README.md");
  char *sec = strstr(text, "\n## Environment variables");
  ASSERT_NOT_NULL(sec);
  nbf_buf_t names = {0};
  nbf_buf_puts(&names, " ");
  char *save = NULL;
  for (char *line = strtok_r(sec + 1, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (line != sec + 1 && strncmp(line, "## ", 3) == 0)
      break; /* next section */
    if (line[0] != '|' || strncmp(line, "|---", 4) == 0 || strncmp(line, "| variable", 10) == 0)
      continue;
    char *end = strchr(line + 1, '|');
    if (end)
      *end = 0;
    for (char *q = strchr(line, '`'); q; q = strchr(q, '`')) {
      char *close = strchr(q + 1, '`');
      if (!close)
        break;
      nbf_buf_printf(&names, "%.*s ", (int)(close - q - 1), q + 1);
      q = close + 1;
    }
  }
  free(text);
  return nbf_buf_take(&names);
}

NBF_TEST(readme_table_matches_parameter_table) {
  char *names = readme_names();
  for (int id = 0; id < NBF_P_COUNT; id++) {
    char key[128];
    snprintf(key, sizeof key, " %s ", nbf_param_name(id));
    if (!strstr(names, key))
      NBF_TEST_FAIL("%s is in common/nbf_params.def but not in README.md's environment table",
                    nbf_param_name(id));
  }
  char *save = NULL;
  for (char *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
    int found = 0;
    for (int id = 0; id < NBF_P_COUNT && !found; id++)
      found = strcmp(n, nbf_param_name(id)) == 0;
    if (!found)
      NBF_TEST_FAIL("README.md's environment table lists %s, which common/nbf_params.def lacks",
                    n);
  }
  free(names);
}

NBF_TEST(values_defaults_and_bad_input) {
  long v = 0;
  ASSERT_EQ(nbf_param_unset(NBF_P_NBFORK_TIMEOUT_S), 0);
  ASSERT_EQ(nbf_param_NBFORK_TIMEOUT_S(&v), 0);
  ASSERT_EQ(v, 300); /* the table's default, the only one */
  ASSERT_EQ(nbf_param_unset(NBF_P_LOCAL_RANK), 0);
  v = 5;
  ASSERT_EQ(nbf_param_LOCAL_RANK(&v), 1); /* no table default: "unset" */
  ASSERT_EQ(v, 5);                        /* untouched */
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_TIMEOUT_S, "12"), 0);
  ASSERT_EQ(nbf_param_long(NBF_P_NBFORK_TIMEOUT_S, &v), 0);
  ASSERT_EQ(v, 12);
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_TIMEOUT_S, "12s"), 0);
  v = -3;
  ASSERT_EQ(nbf_param_NBFORK_TIMEOUT_S(&v), -1);
  ASSERT_EQ(v, -3); /* untouched on a bad value */
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_TIMEOUT_S, ""), 0);
  ASSERT_NULL(nbf_param_raw(NBF_P_NBFORK_TIMEOUT_S)); /* empty = unset */
  ASSERT_EQ_STR(nbf_param_str(NBF_P_NBFORK_TIMEOUT_S), "300");
  double d = 0;
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_TIMEOUT_S, "2.5"), 0);
  ASSERT_EQ(nbf_param_double(NBF_P_NBFORK_TIMEOUT_S, &d), 0);
  ASSERT_NEAR(d, 2.5, 0);
  ASSERT_EQ(nbf_param_set(NBF_P_NBFORK_TIMEOUT_S, "nan"), 0);
  ASSERT_EQ(nbf_param_double(NBF_P_NBFORK_TIMEOUT_S, &d), -1);
  ASSERT_EQ(nbf_param_unset(NBF_P_LOCAL_RANK), 0);
  ASSERT_EQ(nbf_param_double(NBF_P_LOCAL_RANK, &d), 1);
  ASSERT_EQ_STR(nbf_param_name(NBF_P_NBFORK_TIMEOUT_S), "NBFORK_TIMEOUT_S");
  ASSERT_EQ_STR(nbf_param_name(NBF_P_COUNT), "");
  ASSERT_NULL(nbf_param_info(NBF_P_COUNT));
}

/* The TYPE column is used: every DEFAULT is a value of its TYPE (so an
 * accessor never fails on an unset variable), and each row's generated
 * accessor reads that default; the names are the NAME column's text. */
NBF_TEST(defaults_are_values_of_their_type) {
  for (int id = 0; id < NBF_P_COUNT; id++) {
    const nbf_param_t *p = nbf_param_info((nbf_param_id_t)id);
    ASSERT_NOT_NULL(p);
    ASSERT_TRUE(p->name[0] != 0);
    if (!p->default_str)
      continue;
    long l;
    double d;
    ASSERT_EQ(nbf_param_unset((nbf_param_id_t)id), 0);
    if (p->type == NBF_PARAM_INT && nbf_param_long((nbf_param_id_t)id, &l) != 0)
      NBF_TEST_FAIL("%s: default '%s' is not an INT", p->name, p->default_str);
    if (p->type == NBF_PARAM_DOUBLE && nbf_param_double((nbf_param_id_t)id, &d) != 0)
      NBF_TEST_FAIL("%s: default '%s' is not a DOUBLE", p->name, p->default_str);
    if (p->type == NBF_PARAM_BOOL && strcmp(p->default_str, "0") && strcmp(p->default_str, "1"))
      NBF_TEST_FAIL("%s: default '%s' is not 0 or 1", p->name, p->default_str);
  }
  long port = 0;
  ASSERT_EQ(nbf_param_unset(NBF_P_MASTER_PORT), 0);
  ASSERT_EQ(nbf_param_MASTER_PORT(&port), 0);
  ASSERT_EQ(port, 29500);
  ASSERT_EQ(nbf_param_unset(NBF_P_MASTER_ADDR), 0);
  ASSERT_EQ_STR(nbf_param_MASTER_ADDR(), "127.0.0.1");
  ASSERT_EQ_STR(nbf_param_name(NBF_P_MASTER_ADDR), "MASTER_ADDR");
  ASSERT_EQ(nbf_param_NBFORK_JIT(), 1);
}

NBF_TEST(booleans_are_accelerates_str_to_bool) {
  const char *yes[] = {"1", "true", "TRUE", "Yes", "on", "Y"};
  const char *no[] = {"0", "false", "no", "off", "n", "2", "truthy"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
    ASSERT_EQ(nbf_param_set(NBF_P_ACCELERATE_DEBUG_MODE, yes[i]), 0);
    ASSERT_EQ(nbf_param_ACCELERATE_DEBUG_MODE(), 1);
  }
  for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
    ASSERT_EQ(nbf_param_set(NBF_P_ACCELERATE_DEBUG_MODE, no[i]), 0);
    ASSERT_EQ(nbf_param_ACCELERATE_DEBUG_MODE(), 0);
  }
  ASSERT_EQ(nbf_param_unset(NBF_P_ACCELERATE_DEBUG_MODE), 0);
  ASSERT_EQ(nbf_param_ACCELERATE_DEBUG_MODE(), 0); /* table default "0" */
  ASSERT_EQ(nbf_param_unset(NBF_P_NBFORK_GLOO_BUSY_POLL), 0);
  ASSERT_EQ(nbf_param_NBFORK_GLOO_BUSY_POLL(), -1); /* no default: "unset" */
  ASSERT_EQ(nbf_truthy(NULL), 0);
}

/* Files under common/, kernel/, launcher/ and runtime/ that call getenv, other
 * than the reader itself. */
static nbf_buf_t offenders;
static int scan_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)ftw;
  size_t n = strlen(path);
  int source = n > 2 && (!strcmp(path + n - 2, ".c") || !strcmp(path + n - 2, ".h") ||
                         (n > 3 && !strcmp(path + n - 3, ".cc")) ||
                         (n > 3 && !strcmp(path + n - 3, ".cu")));
  if (type != FTW_F || !source || strstr(path, "/nbf_param.c"))
    return 0;
  char *text = read_file(path);
  for (char *p = strstr(text, "getenv"); p; p = strstr(p + 1, "getenv")) {
    const char *q = p + 6;
    while (*q == ' ')
      q++;
    if (*q == '(' && (p == text || (p[-1] != '_' && p[-1] != '"'))) {
      nbf_buf_printf(&offenders, "  %s\n", path);
      break;
    }
  }
  free(text);
  return 0;
}

NBF_TEST(getenv_only_in_the_reader) {
  const char *dirs[] = {"/common", "/kernel", "/launcher", "/runtime"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char root[4096];
    snprintf(root, sizeof root, "%s%s", NBF_SOURCE_DIR, dirs[i]);
    ASSERT_EQ(nftw(root, scan_file, 16, FTW_PHYS), 0);
  }
  if (offenders.len)
    NBF_TEST_FAIL("getenv outside common/nbf_param.c (use nbf_param.h):\n%s", offenders.data);
}

NBF_TEST(buffer_grows_keeps_a_nul_and_hands_over) {
  nbf_buf_t b = {0};
  ASSERT_EQ(nbf_buf_puts(&b, "abc"), 0);
  ASSERT_EQ(nbf_buf_append(&b, "\0xyz", 4), 0); /* binary data may hold NULs */
  ASSERT_EQ(b.len, 7);
  ASSERT_EQ(b.data[7], 0);
  for (int i = 0; i < 1000; i++) /* past the first allocation, several times */
    ASSERT_EQ(nbf_buf_printf(&b, "%04d", i), 0);
  ASSERT_EQ(b.len, 7 + 4000);
  ASSERT_EQ_MEM(b.data + 7 + 4 * 999, 4, "0999", 4);
  nbf_buf_consume(&b, 7);
  ASSERT_EQ(b.len, 4000);
  ASSERT_EQ_MEM(b.data, 8, "00000001", 8);
  ASSERT_EQ(b.data[b.len], 0);
  nbf_buf_consume(&b, 99999); /* more than held: empties it */
  ASSERT_EQ(b.len, 0);
  ASSERT_EQ_STR(b.data, "");
  char *s = nbf_buf_take(&b);
  ASSERT_EQ_STR(s, "");
  ASSERT_NULL(b.data);
  free(s);
  s = nbf_buf_take(&b); /* an empty, never-grown buffer gives "" too */
  ASSERT_EQ_STR(s, "");
  free(s);
  nbf_buf_free(&b);
  nbf_buf_free(NULL);
}

static void *drain_slowly(void *arg) {
  int fd = *(int *)arg;
  char chunk[4096];
  size_t total = 0;
  ssize_t n;
  usleep(50000); /* let the writer fill the pipe and wait */
  while ((n = read(fd, chunk, sizeof chunk)) > 0)
    total += (size_t)n;
  return (void *)total;
}

NBF_TEST(write_all_waits_on_a_full_non_blocking_pipe) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  pthread_t reader;
  ASSERT_EQ(pthread_create(&reader, NULL, drain_slowly, &p[0]), 0);
  size_t n = 1 << 20; /* 16 times a default pipe's 64 KiB */
  char *data = malloc(n);
  ASSERT_NOT_NULL(data);
  memset(data, 'x', n);
  ASSERT_EQ(nbf_write_all(p[1], data, n), 0);
  close(p[1]);
  void *got;
  ASSERT_EQ(pthread_join(reader, &got), 0);
  ASSERT_EQ((size_t)got, n);
  close(p[0]);
  free(data);
  ASSERT_EQ(nbf_write_all(-1, "x", 1), -1);
  ASSERT_EQ(errno, EBADF);
}

NBF_TEST(self_exe_clock_and_error_text) {
  char exe[4096];
  ASSERT_EQ(nbf_self_exe(exe, sizeof exe), 0);
  ASSERT_EQ(exe[0], '/');
  ASSERT_CONTAINS(exe, "test_common");
  char tiny[4];
  ASSERT_EQ(nbf_self_exe(tiny, sizeof tiny), -1);
  ASSERT_EQ(errno, ENAMETOOLONG);
  int64_t t0 = nbf_now_ns();
  usleep(2000);
  ASSERT_GE(nbf_now_ns() - t0, 2000000);
  ASSERT_GE(nbf_now_ms(), nbf_now_ns() / 1000000 - 1);
  ASSERT_CONTAINS(NBF_STRERROR(ENOENT), "No such file");
  char *s = nbf_xprintf("%s-%d", "rank", 3);
  ASSERT_EQ_STR(s, "rank-3");
  free(s);
}

NBF_TEST_MAIN()

/* ---- nbf_workdir: the executor's private work directory ---- */

static char *wd_tmp(void) {
  char *t = strdup("/tmp/nbf-wd-test-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(t));
  return t;
}

static void wd_mkdir(const char *tmp, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", tmp, name);
  ASSERT_EQ(mkdir(out, 0700), 0);
}

/* A pid no process has: a child that exited and was reaped. */
static pid_t wd_dead_pid(void) {
  pid_t p = fork();
  if (p == 0)
    _exit(0);
  ASSERT_GT(p, 0);
  ASSERT_EQ(waitpid(p, NULL, 0), p);
  return p;
}

/* nbf_rmtree removes a whole tree, does not follow a symbolic link out
 * of it, and succeeds on a path that is already gone. */
NBF_TEST(rmtree_removes_the_tree_not_what_links_point_to) {
  char root[] = "/tmp/nbf-rmtree-XXXXXX", outside[] = "/tmp/nbf-rmtree-out-XXXXXX";
  ASSERT_NOT_NULL(mkdtemp(root));
  int fd = mkstemp(outside);
  ASSERT_GE(fd, 0);
  close(fd);
  char *sub = nbf_xprintf("%s/a/b", root), *a = nbf_xprintf("%s/a", root);
  char *file = nbf_xprintf("%s/a/b/f", root), *link = nbf_xprintf("%s/a/l", root);
  ASSERT_EQ(mkdir(a, 0700), 0);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  FILE *f = fopen(file, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ASSERT_EQ(symlink(outside, link), 0);
  ASSERT_EQ(nbf_rmtree(root), 0);
  ASSERT_TRUE(access(root, F_OK) != 0);
  ASSERT_EQ(access(outside, F_OK), 0); /* the link went, not its target */
  ASSERT_EQ(nbf_rmtree(root), 0);      /* nothing there: done */
  unlink(outside);
  free(sub), free(a), free(file), free(link);
}

NBF_TEST(workdir_private_and_locked) {
  char *tmp = wd_tmp(), dir[512];
  int fd;
  mode_t old = umask(0); /* mkdtemp's 0700 must not depend on the umask */
  ASSERT_EQ(nbf_workdir_create(tmp, 0, dir, sizeof dir, &fd), 0);
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(dir, &st), 0);
  ASSERT_EQ(st.st_mode & 07777, 0700);
  ASSERT_EQ(st.st_uid, geteuid());
  char want[64];
  snprintf(want, sizeof want, "/nbfork-%d-", (int)getpid());
  ASSERT_CONTAINS(dir, want);
  /* held: another open file description cannot take the lock */
  int other = open(dir, O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(flock(other, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK);
  close(other);
  /* alive and locked: the start-up sweep keeps it */
  ASSERT_EQ(nbf_workdir_sweep(tmp, 0), 0);
  ASSERT_EQ(access(dir, F_OK), 0);
  close(fd); /* the owner's exit: lock released, .locked says it had it */
  ASSERT_EQ(nbf_workdir_sweep(tmp, 0), 1);
  ASSERT_NE(access(dir, F_OK), 0);
  rmdir(tmp);
  free(tmp);
}

NBF_TEST(workdir_sweep_dead_owners_only) {
  char *tmp = wd_tmp(), dead[512], live[512], kept[512], link[512], name[64], file[600];
  pid_t gone = wd_dead_pid();
  snprintf(name, sizeof name, "nbfork-%d-aaaaaa", (int)gone);
  wd_mkdir(tmp, name, dead, sizeof dead);
  snprintf(file, sizeof file, "%s/cell.so", dead);
  close(open(file, O_CREAT | O_WRONLY, 0600));
  snprintf(name, sizeof name, "nbfork-%d-bbbbbb", (int)getpid()); /* alive, never locked */
  wd_mkdir(tmp, name, live, sizeof live);
  snprintf(name, sizeof name, "nbfork-%d-cccccc", (int)gone);
  wd_mkdir(tmp, name, kept, sizeof kept);
  snprintf(file, sizeof file, "%s/" NBF_WORKDIR_KEEP, kept);
  close(open(file, O_CREAT | O_WRONLY, 0600));
  snprintf(link, sizeof link, "%s/nbfork-%d-dddddd", tmp, (int)gone);
  ASSERT_EQ(symlink(live, link), 0);
  char other[512];
  snprintf(other, sizeof other, "%s/nbfork-x-eeeeee", tmp); /* not a work directory's name */
  ASSERT_EQ(mkdir(other, 0700), 0);

  ASSERT_EQ(nbf_workdir_sweep(tmp, 0), 1);
  ASSERT_NE(access(dead, F_OK), 0);
  ASSERT_EQ(access(live, F_OK), 0);
  ASSERT_EQ(access(kept, F_OK), 0);
  ASSERT_EQ(access(other, F_OK), 0);
  struct stat st;
  ASSERT_EQ(lstat(link, &st), 0);
  /* the reaper of a pid removes that pid's (not kept) directories only */
  ASSERT_EQ(nbf_workdir_sweep(tmp, getpid()), 1);
  ASSERT_NE(access(live, F_OK), 0);
  ASSERT_EQ(nbf_workdir_sweep(tmp, gone), 0); /* kept, and a link */
  ASSERT_EQ(access(kept, F_OK), 0);
  ASSERT_EQ(nbf_workdir_remove(kept), 0);
  unlink(link);
  rmdir(other);
  ASSERT_EQ(rmdir(tmp), 0);
  free(tmp);
}

/* ---- nbf_rankstate: the per-rank state record (issue 21) ---------------- */

#include "nbf_rankstate.h"

/* The documented layout (docs/ARCHITECTURE.md), a writer's calls as a
 * reader sees them, and the call's text the reports print. */
NBF_TEST(rankstate_record_round_trip) {
  ASSERT_EQ(sizeof(nbf_rankstate_t), 640);
  nbf_rankstate_t *rs = NULL;
  int fd = nbf_rankstate_create(3, &rs);
  ASSERT_TRUE(fd >= 0);
  ASSERT_NOT_NULL(rs);
  nbf_rankstate_t r;
  ASSERT_EQ(nbf_rankstate_read(rs, &r), 0);
  ASSERT_EQ(r.magic, NBF_RANKSTATE_MAGIC);
  ASSERT_EQ(r.version, 1);
  ASSERT_EQ(r.rank, 3);
  ASSERT_EQ(r.phase, NBF_RS_STARTING);
  ASSERT_EQ(r.err_peer, -1);
  nbf_rs_call_t c = {.op = NBF_RS_ALL_REDUCE, .dtype = 0, .root = -1, .count = 4096, .seq = 58,
                     .start_ms = 1000};
  nbf_rankstate_begin(rs, &c);
  ASSERT_EQ(nbf_rankstate_read(rs, &r), 0);
  ASSERT_EQ(r.phase, NBF_RS_COLLECTIVE);
  ASSERT_EQ(r.call.seq, 58);
  char text[160];
  ASSERT_EQ_STR(nbf_rs_call_text(&r.call, text, sizeof text), "all_reduce #58 (f32 x 4096)");
  nbf_rankstate_end(rs);
  nbf_rankstate_error(rs, 4, 1, &c, "rank 3: lost");
  nbf_rankstate_fatal(rs);
  ASSERT_EQ(nbf_rankstate_read(rs, &r), 0);
  ASSERT_EQ(r.done_seq, 58);
  ASSERT_EQ(r.done_op, NBF_RS_ALL_REDUCE);
  ASSERT_EQ(r.err_code, 4);
  ASSERT_EQ(r.err_peer, 1);
  ASSERT_EQ(r.phase, NBF_RS_EXITED);
  ASSERT_TRUE(r.flags & NBF_RS_FATAL);
  ASSERT_EQ_STR(r.err_msg, "rank 3: lost");
  ASSERT_EQ(r.gen % 2, 0);
  nbf_rs_call_t b = {.op = NBF_RS_BROADCAST, .dtype = 5, .root = 0, .count = 7, .seq = 2,
                     .device = 1};
  ASSERT_EQ_STR(nbf_rs_call_text(&b, text, sizeof text), "broadcast #2 (i64 x 7, root 0, device)");
  nbf_rs_call_t z = {.op = NBF_RS_BARRIER, .dtype = 255, .seq = 9};
  ASSERT_EQ_STR(nbf_rs_call_text(&z, text, sizeof text), "barrier #9");
  nbf_rankstate_unmap(&rs);
  ASSERT_NULL(rs);
  close(fd);
}

/* A record in the middle of a write (odd gen) is not returned as
 * consistent; no record at all is -1. */
NBF_TEST(rankstate_torn_or_absent_record_is_refused) {
  nbf_rankstate_t *rs = NULL, r;
  int fd = nbf_rankstate_create(0, &rs);
  ASSERT_TRUE(fd >= 0);
  rs->gen = 7; /* a writer died mid-write */
  ASSERT_EQ(nbf_rankstate_read(rs, &r), -1);
  ASSERT_EQ(nbf_rankstate_read(NULL, &r), -1);
  nbf_rankstate_unmap(&rs);
  close(fd);
}
