/*
 * ln_cmd_shard.c — `nbfork merge-weights` and `nbfork estimate-memory`
 * (Accelerate's `accelerate merge-weights` and `accelerate
 * estimate-memory`), both on libnbfork's public sharding API
 * (include/nbf_shard.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ln_cmd.h"
#include "nbfork.h"

/* `nbfork merge-weights CKPT OUT`: acc_shard_merge_weights. */
int ln_cmd_merge_weights(int argc, char **argv) {
  if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-') {
    fprintf(stderr, "nbfork merge-weights: error: usage: nbfork merge-weights CKPT OUT\n");
    return LN_EXIT_USAGE;
  }
  acc_t *acc = acc_new(NULL);
  if (!acc) {
    fprintf(stderr, "nbfork merge-weights: error: cannot start the runtime\n");
    return LN_EXIT_FAILED;
  }
  acc_result_t r = acc_shard_merge_weights(acc, argv[1], argv[2]);
  if (r != ACC_OK)
    fprintf(stderr, "nbfork merge-weights: error: %s\n", acc_last_error(acc));
  else
    printf("merged %s into %s (nbfork_state.bin, nbfork_rank0.bin: a FULL_STATE_DICT "
           "checkpoint of 1 rank)\n",
           argv[1], argv[2]);
  acc_destroy(&acc);
  return r == ACC_OK ? 0 : r == ACC_ERR_INVALID_ARGUMENT ? LN_EXIT_USAGE : LN_EXIT_FAILED;
}

/* ---- estimate-memory ---------------------------------------------------- */

/* The toolkit models by name: the layer sizes of the notebooks' and the
 * tests' MLPs. */
static const struct {
  const char *name, *layers, *what;
} MODELS[] = {
    {"fashion_mnist", "784,256,10", "notebooks/fashion_mnist.ipynb, trainer.ipynb"},
    {"mnist_mlp", "784,512,512,10", "the sharding memory tests"},
    {"mlp_50m", "4096,4096,4096,4096,1000", "the sharding bench's 54.4 M-parameter MLP"},
};

typedef struct {
  size_t params, largest; /* elements; largest = one layer's weight + bias */
} est_model_t;

/* "784,512,10" -> parameters of the MLP; -1 on a bad list. */
static int parse_layers(const char *s, est_model_t *m) {
  long prev = -1;
  int n = 0;
  *m = (est_model_t){0, 0};
  for (const char *p = s; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v <= 0 || (*end && *end != ','))
      return -1;
    if (prev > 0) {
      size_t layer = (size_t)prev * (size_t)v + (size_t)v;
      m->params += layer;
      m->largest = layer > m->largest ? layer : m->largest;
    }
    prev = v;
    n++;
    p = *end ? end + 1 : end;
  }
  return n >= 2 ? 0 : -1;
}

static void human(double b, char *out, size_t len) {
  static const char *const u[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1024 && i < 4)
    b /= 1024, i++;
  snprintf(out, len, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static const struct {
  const char *name;
  double bytes; /* per parameter as stored */
  int mixed;    /* trains as mixed precision (f32 master) */
  int trains;
} DTYPES[] = {{"float32", 4, 0, 1},
              {"float16", 2, 1, 1},
              {"bfloat16", 2, 1, 1},
              {"int8", 1, 0, 0},
              {"int4", 0.5, 0, 0}};

static int dtype_index(const char *s) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (!strcmp(s, DTYPES[i].name))
      return (int)i;
  return -1;
}

/* One row: Accelerate's columns, then bytes per rank at each stage
 * (nbfork's estimate; the ZeRO paper's in brackets with mixed precision). */
static void print_row(const est_model_t *m, int d, int world, int adamw) {
  char a[32], b[32], c[32];
  human((double)m->largest * DTYPES[d].bytes, a, sizeof a);
  human((double)m->params * DTYPES[d].bytes, b, sizeof b);
  if (DTYPES[d].trains)
    human(acc_shard_estimate_bytes(m->params, m->largest, 1, 0, adamw, DTYPES[d].mixed), c,
          sizeof c);
  else
    snprintf(c, sizeof c, "N/A");
  printf("| %-8s | %13s | %10s | %19s |", DTYPES[d].name, a, b, c);
  for (int s = 0; s < 4; s++) {
    char e[32], p[32], cell[80];
    if (!DTYPES[d].trains) {
      printf(" %22s |", "N/A");
      continue;
    }
    human(acc_shard_estimate_bytes(m->params, m->largest, world, s, adamw, DTYPES[d].mixed), e,
          sizeof e);
    human(acc_shard_paper_bytes(m->params, world, s), p, sizeof p);
    if (DTYPES[d].mixed && adamw)
      snprintf(cell, sizeof cell, "%s [%s]", e, p);
    else
      snprintf(cell, sizeof cell, "%s", e);
    printf(" %22s |", cell);
  }
  printf("\n");
}

/* one line: errors are one line on stderr (ln_cmd.h) */
static const char ESTIMATE_USAGE[] =
    "usage: nbfork estimate-memory MODEL|--layers N0,N1,... [--dtypes D ...] "
    "[--num_processes N] [--optimizer adamw|sgd]";

/* The options; -1 on bad input (printed). */
static int estimate_args(int argc, char **argv, est_model_t *m, const char **name, int *dt,
                         int *world, int *adamw) {
  *world = 2, *adamw = 1, *name = NULL;
  int ndt = 0, have = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--layers") && v) {
      if (parse_layers(v, m) != 0) {
        fprintf(stderr,
                "nbfork estimate-memory: error: --layers %s: expected at least two "
                "positive sizes separated by commas (784,512,10)\n",
                v);
        return -1;
      }
      *name = v, have = 1, i++;
    } else if (!strcmp(a, "--dtypes")) {
      for (; i + 1 < argc && argv[i + 1][0] != '-'; i++) {
        if (ndt == 5 || (dt[ndt] = dtype_index(argv[i + 1])) < 0) {
          fprintf(stderr,
                  "nbfork estimate-memory: error: --dtypes %s: expected float32, "
                  "float16, bfloat16, int8 or int4\n",
                  argv[i + 1]);
          return -1;
        }
        ndt++;
      }
    } else if (!strcmp(a, "--num_processes") && v && atoi(v) > 0) {
      *world = atoi(v), i++;
    } else if (!strcmp(a, "--optimizer") && v && (!strcmp(v, "adamw") || !strcmp(v, "sgd"))) {
      *adamw = !strcmp(v, "adamw"), i++;
    } else if (a[0] != '-' && !have) {
      for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0] && !have; k++)
        if (!strcmp(a, MODELS[k].name))
          have = !parse_layers(MODELS[k].layers, m), *name = a;
      if (!have) {
        fprintf(stderr, "nbfork estimate-memory: error: unknown model '%s' (known:", a);
        for (size_t k = 0; k < sizeof MODELS / sizeof MODELS[0]; k++)
          fprintf(stderr, " %s", MODELS[k].name);
        fprintf(stderr, "; or --layers N0,N1,...)\n");
        return -1;
      }
    } else {
      fprintf(stderr, "nbfork estimate-memory: error: unexpected '%s' (%s)\n", a, ESTIMATE_USAGE);
      return -1;
    }
  }
  if (!have) {
    fprintf(stderr, "nbfork estimate-memory: error: no model given (%s)\n", ESTIMATE_USAGE);
    return -1;
  }
  if (!ndt) /* Accelerate's default: every dtype */
    for (ndt = 0; ndt < 5; ndt++)
      dt[ndt] = ndt;
  return ndt;
}

/* `nbfork estimate-memory`: Accelerate's table (dtype, largest layer,
 * total size, training using Adam) plus the model-state bytes per rank
 * of each ZeRO stage on --num_processes ranks. */
int ln_cmd_estimate_memory(int argc, char **argv) {
  est_model_t m;
  const char *name;
  int dt[5], world, adamw;
  int ndt = estimate_args(argc, argv, &m, &name, dt, &world, &adamw);
  if (ndt < 0)
    return LN_EXIT_USAGE;
  printf("Memory usage for `%s`: %zu parameters, largest layer %zu (training with %s on %d "
         "process%s)\n",
         name, m.params, m.largest, adamw ? "AdamW" : "SGD", world, world == 1 ? "" : "es");
  printf("| dtype    | Largest Layer | Total Size | Training using %-4s |", adamw ? "Adam" : "SGD");
  for (int s = 0; s < 4; s++)
    printf(" %16s%d/rank |", "ZeRO stage ", s);
  printf("\n|----------|---------------|------------|---------------------|");
  for (int s = 0; s < 4; s++)
    printf("------------------------|");
  printf("\n");
  for (int i = 0; i < ndt; i++)
    print_row(&m, dt[i], world, adamw);
  printf("Training and per-rank columns: parameters + gradients + optimizer state as nbfork keeps\n"
         "them (f32 master copies; a half-precision shadow with float16/bfloat16), activations\n"
         "not counted; stage 0 = DDP (NO_SHARD), 2 = SHARD_GRAD_OP (and one layer's gradient\n"
         "before its reduce-scatter), 3 = FULL_SHARD (the shards and one layer gathered; a\n"
         "prefetch, off by default, holds a second one). [brackets]:\n"
         "the ZeRO paper's mixed-precision Adam figures (16, 4+12/N, 2+14/N, 16/N bytes per\n"
         "parameter).\n");
  return 0;
}
