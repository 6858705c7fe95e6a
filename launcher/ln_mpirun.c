/*
 * ln_mpirun.c — the mpirun command of `nbfork launch --mpirun_hostfile`.
 */
#define _GNU_SOURCE
#include "ln_mpirun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbf_param.h"
#include "nbf_util.h"

typedef struct {
  char **v;
  size_t n, cap;
  int oom;
} argv_t;

static void push(argv_t *a, char *s) {
  if (!s || a->oom) {
    free(s);
    a->oom = 1;
    return;
  }
  if (a->n + 2 > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 32;
    char **v = realloc(a->v, cap * sizeof *v);
    if (!v) {
      free(s);
      a->oom = 1;
      return;
    }
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = s;
  a->v[a->n] = NULL;
}

/* One environment variable for every rank: -x NAME=V (Open MPI) or
 * -genv NAME V (MPICH, Intel MPI). */
static void env_arg(argv_t *a, int open_mpi, const char *name, const char *value) {
  if (open_mpi) {
    push(a, strdup("-x"));
    push(a, nbf_xprintf("%s=%s", name, value));
  } else {
    push(a, strdup("-genv"));
    push(a, strdup(name));
    push(a, strdup(value));
  }
}

char **ln_mpirun_argv(const ln_cli_t *c, char *const *prog_argv, int open_mpi, int as_root) {
  argv_t a = {0};
  int ppn = c->o.num_processes, total = ppn * c->o.num_nodes;
  push(&a, strdup("mpirun"));
  if (open_mpi) {
    if (as_root)
      push(&a, strdup("--allow-run-as-root"));
    push(&a, strdup("--hostfile"));
    push(&a, strdup(c->mpirun_hostfile));
    push(&a, strdup("--map-by"));
    push(&a, nbf_xprintf("ppr:%d:node", ppn));
    push(&a, strdup("-np"));
  } else {
    push(&a, strdup("-f"));
    push(&a, strdup(c->mpirun_hostfile));
    push(&a, strdup("-ppn"));
    push(&a, nbf_xprintf("%d", ppn));
    push(&a, strdup("-n"));
  }
  push(&a, nbf_xprintf("%d", total));
  char port[16];
  snprintf(port, sizeof port, "%d", c->o.use_port);
  env_arg(&a, open_mpi, "MASTER_ADDR", c->o.master_addr);
  env_arg(&a, open_mpi, "MASTER_PORT", port);
  env_arg(&a, open_mpi, "ACCELERATE_MIXED_PRECISION", c->o.mixed_precision);
  /* one thread per rank unless set, as the other paths (ln_cli_export_env);
   * passed on: mpirun does not forward the environment to other hosts */
  const char *omp = nbf_param_raw(NBF_P_OMP_NUM_THREADS);
  env_arg(&a, open_mpi, "OMP_NUM_THREADS", omp && *omp ? omp : "1");
  for (int i = 0; prog_argv[i]; i++)
    push(&a, strdup(prog_argv[i]));
  if (a.oom) {
    ln_mpirun_free(a.v);
    return NULL;
  }
  return a.v;
}

void ln_mpirun_free(char **argv) {
  for (size_t i = 0; argv && argv[i]; i++)
    free(argv[i]);
  free(argv);
}

int ln_mpirun_is_open_mpi(void) {
  FILE *p = popen("mpirun --version 2>&1", "r");
  if (!p)
    return -1;
  char line[512];
  int open_mpi = 0, any = 0;
  while (fgets(line, sizeof line, p)) {
    any = 1;
    if (strstr(line, "Open MPI") || strstr(line, "OpenRTE"))
      open_mpi = 1;
  }
  int st = pclose(p);
  return any && st != -1 && !(st == 127 << 8) ? open_mpi : -1;
}
