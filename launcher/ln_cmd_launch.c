/*
 * ln_cmd_launch.c — `nbfork launch [options] PROGRAM [ARGS...]`: the
 * %launch machinery (ln_launch) with a worker body that execs PROGRAM,
 * as torchrun and `accelerate launch` start scripts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ln_cmd.h"
#include "ln_cli_parse.h"
#include "ln_cuda.h"
#include "ln_launch.h"
#include "ln_mpirun.h"
#include "ln_notebook.h"
#include "nbf_param.h"
#include "nbf_util.h"

static volatile sig_atomic_t g_interrupted;
static char **g_program; /* argv of PROGRAM, for the worker body */

static volatile sig_atomic_t g_status; /* SIGQUIT: print where every rank is */

static volatile sig_atomic_t g_stop_signal; /* the first of SIGINT/SIGTERM/SIGHUP */

static void on_signal(int sig) {
  if (sig == SIGQUIT) {
    g_status = 1;
    return;
  }
  if (!g_stop_signal)
    g_stop_signal = sig;
  g_interrupted = 1;
}

/* Worker body: the environment is set (ln_worker_export_env); become
 * PROGRAM. Only returns when exec failed. */
static int exec_program(void) {
  execvp(g_program[0], g_program);
  fprintf(stderr, "nbfork launch: cannot run %s: %s\n", g_program[0], NBF_STRERROR(errno));
  return 127;
}

/* PROGRAM can be run: a path that is executable, or a name on PATH. */
static int program_found(const char *prog) {
  if (strchr(prog, '/'))
    return access(prog, X_OK) == 0;
  const char *path = nbf_param_raw(NBF_P_PATH);
  char *dirs = strdup(path ? path : "/usr/local/bin:/usr/bin:/bin"), *save = NULL;
  int found = 0;
  for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", *d ? d : ".", prog);
    found = access(full, X_OK) == 0;
  }
  free(dirs);
  return found;
}

int ln_cmd_settings(const char *cmd, ln_cli_t *c, int argc, char **argv) {
  char err[2048];
  int prog = ln_cli_parse(c, argc, argv, err, sizeof err);
  if (prog < 0 || ln_cli_finish(c, c->cpu ? 0 : ln_cuda_visible_gpus(), err, sizeof err) != 0) {
    fprintf(stderr, "nbfork %s: error: %s\n", cmd, err);
    return -1;
  }
  /* the store's port must be free now: say so before anything starts */
  int e = c->o.node_rank == 0 && !c->mpirun_hostfile[0]
              ? ln_port_check(c->o.master_addr, c->o.use_port)
              : 0;
  if (e) {
    fprintf(stderr,
            "nbfork %s: error: main_process_port %d on %s cannot be used: %s; pass another "
            "port (--main_process_port 0 picks a free one)\n",
            cmd, c->o.use_port, c->o.master_addr, NBF_STRERROR(e));
    return -1;
  }
  return prog;
}

int ln_cmd_run(const ln_cli_t *c, int (*fn)(void)) {
  ln_cli_export_env(c);
  struct sigaction sa = {0}, old[4];
  sa.sa_handler = on_signal; /* no SA_RESTART: the monitor's poll returns */
  sigemptyset(&sa.sa_mask);
  /* SIGQUIT (Ctrl-\\, kill -QUIT): where every rank is, as a JVM's thread
   * dump; the run goes on */
  const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  for (int i = 0; i < 4; i++)
    sigaction(sigs[i], &sa, &old[i]);
  ln_context_t ctx = {NULL, &g_interrupted, 0, NULL, 0, &g_status, NULL, NULL};
  ln_error_t err;
  int rc = ln_launch(&c->o, fn, &ctx, &err);
  for (int i = 0; i < 4; i++)
    sigaction(sigs[i], &old[i], NULL);
  if (rc == 0)
    return 0;
  fflush(stdout);
  int stopped = !strcmp(err.ename, "KeyboardInterrupt");
  if (stopped && g_stop_signal && g_stop_signal != SIGINT) /* not a Ctrl-C: a kill, a scheduler */
    fprintf(stderr, "nbfork launch: terminated by SIG%s: every worker was stopped\n",
            sigabbrev_np(g_stop_signal));
  else
    fprintf(stderr, "nbfork launch: %s: %s\n", err.ename, err.evalue);
  const char *tb = err.traceback;
  size_t n = strlen(err.evalue);
  if (tb && !strncmp(tb, err.evalue, n) && tb[n] == '\n')
    tb += n + 1; /* its first line is the summary just printed */
  if (tb && *tb && !c->quiet)
    fprintf(stderr, "%s\n", tb);
  /* 128 + the signal, as a shell reports a process the signal ended */
  rc = !stopped ? LN_EXIT_FAILED : g_stop_signal ? 128 + g_stop_signal : LN_EXIT_INTERRUPTED;
  ln_error_free(&err);
  return rc;
}

/* --mpirun_hostfile: mpirun starts the ranks; this process becomes it. */
static int run_mpirun(const ln_cli_t *c, char **prog) {
  int open_mpi = ln_mpirun_is_open_mpi();
  if (open_mpi < 0) {
    fprintf(stderr, "nbfork launch: error: --mpirun_hostfile needs mpirun on PATH (Debian: "
                    "apt-get install openmpi-bin)\n");
    return LN_EXIT_USAGE;
  }
  char **argv = ln_mpirun_argv(c, prog, open_mpi, geteuid() == 0);
  if (!argv) {
    fprintf(stderr, "nbfork launch: error: out of memory\n");
    return LN_EXIT_FAILED;
  }
  fflush(stdout);
  execvp(argv[0], argv);
  fprintf(stderr, "nbfork launch: error: cannot run mpirun: %s\n", NBF_STRERROR(errno));
  ln_mpirun_free(argv);
  return LN_EXIT_USAGE;
}

static size_t ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), t = strlen(tail);
  return n >= t && !strcmp(s + n - t, tail);
}

int ln_cmd_launch(int argc, char **argv) {
  ln_cli_t c;
  ln_cli_init(&c);
  int prog = ln_cmd_settings("launch", &c, argc - 1, argv + 1);
  if (prog < 0)
    return LN_EXIT_USAGE;
  char **program = argv + 1 + prog;
  if (ends_with(program[0], ".ipynb"))
    return ln_notebook_launch(&c, program[0], program[1], argc - 2 - prog);
  if (strchr(program[0], '/') && access(program[0], F_OK) == 0 && !program_found(program[0])) {
    fprintf(stderr,
            "nbfork launch: error: program '%s' exists but is not executable (chmod +x %s, or "
            "run it with its interpreter: nbfork launch ... python3 %s)\n",
            program[0], program[0], program[0]);
    return LN_EXIT_USAGE;
  }
  if (!program_found(program[0])) {
    fprintf(stderr,
            "nbfork launch: error: program '%s' not found (not an executable file%s); build it "
            "first, e.g. cc train.c $(pkg-config --cflags --libs nbfork) -o train\n",
            program[0], strchr(program[0], '/') ? "" : " on PATH");
    return LN_EXIT_USAGE;
  }
  if (c.mpirun_hostfile[0])
    return run_mpirun(&c, program);
  g_program = program;
  return ln_cmd_run(&c, exec_program);
}
