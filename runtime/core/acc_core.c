/*
 * acc_core.c — creating and destroying the Accelerator, and its
 * accessors. The process group: a Gloo full mesh over TCP whose pair
 * addresses are exchanged through the rendezvous store (acc_store.h) at
 * MASTER_ADDR:MASTER_PORT. The store is hosted by the nbfork launcher
 * (NBFORK_STORE_HOSTED=1) or, for programs started by hand, by rank 0.
 *
 * Environment (read once here):
 *   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE   place in the world
 *                       (defaults 0, RANK, 1, WORLD_SIZE)
 *   MASTER_ADDR, MASTER_PORT     store address (127.0.0.1, 29500)
 *   ACCELERATE_MIXED_PRECISION   no | fp16 | bf16 (no)
 *   ACCELERATE_USE_CPU           true = never use a GPU (false)
 *   NBFORK_TIMEOUT_S             collective/rendezvous timeout (300)
 *   NBFORK_RUN_ID                prefix of store keys (run)
 *   NBFORK_STORE_HOSTED          1 = the launcher hosts the store (0)
 *   NBFORK_GLOO_HOSTNAME         address Gloo listens on (the local
 *                                address that routes to MASTER_ADDR)
 *   NBFORK_RDZV_SECRET           shared secret of the rendezvous store
 *                                (CURVE; unset = open store)
 *   NBFORK_GLOO_BUSY_POLL        1 = busy-poll small all-reduces (1 when
 *                                ranks <= CPUs)
 *   NBFORK_GRAD_BUCKETS          0/1/2: gradient buckets of the MLP (0)
 *   NBFORK_COLLECTIVE_ERRORS     fatal | return (acc_set_errhandler)
 *   ACCELERATE_DEBUG_MODE        compare each collective's call first
 *   NBFORK_RANKSTATE_FD          this rank's state page (nbf_rankstate.h)
 *   SLURM_*, OMPI_COMM_WORLD_*,  a program started by srun or mpirun,
 *   PMI_*, MPI_LOCAL*            with RANK unset (from_cluster_engine)
 */
#define _GNU_SOURCE
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "acc_gloo.h"
#include "acc_internal.h"
#include "acc_nccl.h"
#include "nbf_cluster.h"
#include "nbf_param.h"
#include "nbf_rankstate.h"
#include "nbf_util.h"

/* Defaults (NBFORK_TIMEOUT_S 300, MASTER_PORT 29500, NBFORK_GRAD_BUCKETS 0:
 * see acc_mlp_backward_xent in nbfork.h for the measurements) live in
 * nbf_params.def, and only there. */

/* Successive process groups of one process use fresh store keys: every
 * rank joins them in the same order, so the counter agrees across ranks.
 * Only joins (world > 1) count, so a notebook executor that created a
 * single-process accelerator before forking workers does not shift the
 * workers' keys relative to other nodes. */
static int g_generation;

static int parse_precision(const char *s, acc_precision_t *out) {
  if (!s || !*s || strcasecmp(s, "no") == 0)
    *out = ACC_PRECISION_NO;
  else if (strcasecmp(s, "fp16") == 0)
    *out = ACC_PRECISION_FP16;
  else if (strcasecmp(s, "bf16") == 0)
    *out = ACC_PRECISION_BF16;
  else
    return -1;
  return 0;
}

/* Say why acc_new failed (acc_last_error(NULL) and one line on stderr:
 * the caller gets no acc_t to ask) and free the partial accelerator. */
static acc_t *fail(acc_t *acc, const char *step) {
  acc__set_error(NULL, ACC_ERR_SYSTEM, "acc_new failed (rank %d of %d, %s): %s", acc->rank,
                 acc->world, step, acc->err[0] ? acc->err : "unknown error");
  fprintf(stderr, "nbfork: %s\n", acc_last_error(NULL));
  fflush(stderr);
  acc->broken = 1; /* no barrier on the way out */
  acc_destroy(&acc);
  return NULL;
}

/* An integer parameter (nbf_param_long) in [INT_MIN, INT_MAX]; *out is
 * untouched when it is unset and has no default (nbf_params.def). A bad
 * value becomes acc's error, naming the variable. 0 or -1. */
static int env_int(acc_t *acc, nbf_param_id_t id, int *out) {
  long v = *out;
  if (nbf_param_long(id, &v) < 0 || v < INT_MIN || v > INT_MAX) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "environment variable %s='%s' is not an integer",
                   nbf_param_name(id), nbf_param_raw(id));
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* Copy one engine variable to the torch name unless that one is set. */
static void adopt(nbf_param_id_t to, nbf_param_id_t from) {
  const char *v = nbf_param_raw(from);
  if (v && *v && !nbf_param_raw(to))
    nbf_param_set(to, v);
}

/* Where MASTER_ADDR came from when a cluster engine's variables chose it
 * (the store client's error points there); "" when the user set it. */
static char g_master_origin[600];

/* The hint around g_master_origin in the errors of a MASTER_ADDR that
 * does not work ("" twice when the user set it). */
static const char *master_hint_a(void) {
  return g_master_origin[0] ? ". MASTER_ADDR was not set: it was taken from " : "";
}

static const char *master_hint_b(void) {
  return g_master_origin[0] ? "; set MASTER_ADDR to an address of rank 0's node that every node "
                              "reaches"
                            : "";
}

/* MASTER_ADDR unset under bare `srun prog`: the job's first node, as
 * Lightning does; by its NodeAddr (`scontrol show node`) when its name
 * does not resolve here, as `srun nbfork launch` does (nbf_cluster.h). */
static void slurm_master_addr(void) {
  char first[256], addr[256];
  if (nbf_param_raw(NBF_P_MASTER_ADDR) ||
      nbf_slurm_first_node(nbf_param_raw(NBF_P_SLURM_JOB_NODELIST), first, sizeof first) != 0)
    return;
  if (nbf_slurm_node_addr(first, addr, sizeof addr) == 0) {
    nbf_param_set(NBF_P_MASTER_ADDR, addr);
    snprintf(g_master_origin, sizeof g_master_origin,
             strcmp(addr, first) ? "the NodeAddr of node %s, the first of SLURM_JOB_NODELIST"
                                 : "%s, the first node of SLURM_JOB_NODELIST",
             first);
    return;
  }
  nbf_param_set(NBF_P_MASTER_ADDR, first);
  snprintf(g_master_origin, sizeof g_master_origin,
           "%s, the first node of SLURM_JOB_NODELIST, whose name does not resolve here and which "
           "`scontrol show node` did not answer for",
           first);
}

/* The first integer of Slurm's SLURM_TASKS_PER_NODE ("2(x3),1" -> 2). */
static void slurm_local_world(void) {
  adopt(NBF_P_LOCAL_WORLD_SIZE, NBF_P_SLURM_NTASKS_PER_NODE);
  const char *t = nbf_param_raw(NBF_P_SLURM_TASKS_PER_NODE);
  if (t && *t && !nbf_param_raw(NBF_P_LOCAL_WORLD_SIZE)) {
    char n[16];
    size_t k = strspn(t, "0123456789");
    if (k > 0 && k < sizeof n) {
      memcpy(n, t, k);
      n[k] = 0;
      nbf_param_set(NBF_P_LOCAL_WORLD_SIZE, n);
    }
  }
}

/* A program started by an engine rather than a launcher (RANK unset):
 * take its place from the engine's names, as Lightning's
 * SLURMEnvironment and Accelerate/DeepSpeed's MPI discovery do, by
 * setting the torch names the rest of read_env (and user code) reads.
 * Open MPI first, then MPICH/Intel MPI (PMI_*), then Slurm: mpirun inside
 * an sbatch allocation sees SLURM_* of the job too, and its ranks are MPI's. */
static void from_cluster_engine(void) {
  if (nbf_param_raw(NBF_P_RANK))
    return;
  if (nbf_param_raw(NBF_P_OMPI_COMM_WORLD_RANK)) {
    adopt(NBF_P_RANK, NBF_P_OMPI_COMM_WORLD_RANK);
    adopt(NBF_P_WORLD_SIZE, NBF_P_OMPI_COMM_WORLD_SIZE);
    adopt(NBF_P_LOCAL_RANK, NBF_P_OMPI_COMM_WORLD_LOCAL_RANK);
    adopt(NBF_P_LOCAL_WORLD_SIZE, NBF_P_OMPI_COMM_WORLD_LOCAL_SIZE);
  } else if (nbf_param_raw(NBF_P_PMI_RANK)) {
    adopt(NBF_P_RANK, NBF_P_PMI_RANK);
    adopt(NBF_P_WORLD_SIZE, NBF_P_PMI_SIZE);
    adopt(NBF_P_LOCAL_RANK, NBF_P_MPI_LOCALRANKID);
    adopt(NBF_P_LOCAL_WORLD_SIZE, NBF_P_MPI_LOCALNRANKS);
  } else if (nbf_param_raw(NBF_P_SLURM_PROCID) && nbf_param_raw(NBF_P_SLURM_NTASKS)) {
    adopt(NBF_P_RANK, NBF_P_SLURM_PROCID);
    adopt(NBF_P_WORLD_SIZE, NBF_P_SLURM_NTASKS);
    adopt(NBF_P_LOCAL_RANK, NBF_P_SLURM_LOCALID);
    adopt(NBF_P_NODE_RANK, NBF_P_SLURM_NODEID);
    slurm_local_world();
    slurm_master_addr();
    int port = nbf_slurm_port(nbf_param_raw(NBF_P_SLURM_JOB_ID));
    if (!nbf_param_raw(NBF_P_MASTER_PORT) && port > 0)
      nbf_param_set_long(NBF_P_MASTER_PORT, port);
  }
}

/* NBFORK_COLLECTIVE_ERRORS and ACCELERATE_DEBUG_MODE, strictly: a value
 * that is none of the accepted ones is an error naming them (a typo must
 * not turn a check off). 0 or -1. */
static int read_error_env(acc_t *acc) {
  const char *e = nbf_param_str(NBF_P_NBFORK_COLLECTIVE_ERRORS);
  if (e && strcasecmp(e, "fatal") && strcasecmp(e, "return")) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "NBFORK_COLLECTIVE_ERRORS='%s' is not one of fatal, return", e);
    return -1;
  }
  acc->errors_return = e && !strcasecmp(e, "return");
  if (nbf_param_bool_strict(NBF_P_ACCELERATE_DEBUG_MODE, &acc->debug_ops) != 0) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "ACCELERATE_DEBUG_MODE='%s' is not one of " NBF_BOOL_WORDS,
                   nbf_param_raw(NBF_P_ACCELERATE_DEBUG_MODE));
    return -1;
  }
  return 0;
}

static int read_env(acc_t *acc, const acc_config_t *c) {
  int timeout_s = c->timeout_s;
  from_cluster_engine();
  if (env_int(acc, NBF_P_RANK, &acc->rank) || env_int(acc, NBF_P_WORLD_SIZE, &acc->world))
    return -1;
  acc->local_rank = acc->rank; /* LOCAL_RANK unset: RANK (nbf_params.def) */
  acc->local_world = acc->world;
  if (env_int(acc, NBF_P_LOCAL_RANK, &acc->local_rank) ||
      env_int(acc, NBF_P_LOCAL_WORLD_SIZE, &acc->local_world) ||
      env_int(acc, NBF_P_MASTER_PORT, &acc->master_port) ||
      (timeout_s <= 0 && env_int(acc, NBF_P_NBFORK_TIMEOUT_S, &timeout_s)))
    return -1;
  if (acc->world < 1 || acc->rank < 0 || acc->rank >= acc->world) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "RANK=%d / WORLD_SIZE=%d are inconsistent (need 0 <= RANK < WORLD_SIZE)",
                   acc->rank, acc->world);
    return -1;
  }
  if (acc->local_world < 1 || acc->local_rank < 0 || acc->local_rank >= acc->local_world) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "LOCAL_RANK=%d / LOCAL_WORLD_SIZE=%d are inconsistent", acc->local_rank,
                   acc->local_world);
    return -1;
  }
  if (acc->master_port <= 0 || acc->master_port > 65535) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "MASTER_PORT=%d is not a TCP port",
                   acc->master_port);
    return -1;
  }
  if (timeout_s <= 0 || timeout_s > 24L * 3600 * 365) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "NBFORK_TIMEOUT_S=%d must be > 0", timeout_s);
    return -1;
  }
  acc->timeout_ms = (int)(timeout_s * 1000L > 2000000000L ? 2000000000L : timeout_s * 1000L);
  snprintf(acc->master_addr, sizeof acc->master_addr, "%s", nbf_param_MASTER_ADDR());
  snprintf(acc->run_id, sizeof acc->run_id, "%s", nbf_param_NBFORK_RUN_ID());
  const char *mp =
      c->mixed_precision ? c->mixed_precision : nbf_param_ACCELERATE_MIXED_PRECISION();
  if (parse_precision(mp, &acc->precision) != 0) {
    acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                   "mixed precision '%s' is not one of no, fp16, bf16", mp);
    return -1;
  }
  return read_error_env(acc);
}

/* NBFORK_RDZV_GATE (launches on several nodes): wait until node 0's
 * launcher found every node's settings equal, so that a mismatch is
 * reported by the launchers instead of failing inside Gloo. The wait has
 * no limit of its own: the launcher stops this process when the
 * rendezvous fails or times out. */
static int wait_for_gate(acc_t *acc) {
  const char *gate = nbf_param_raw(NBF_P_NBFORK_RDZV_GATE);
  if (!gate || !*gate)
    return 0;
  acc_result_t r;
  void *v = NULL;
  size_t len = 0;
  while ((r = acc_store_get(acc->store, gate, &v, &len)) == ACC_ERR_TIMEOUT)
    ;
  free(v);
  if (r != ACC_OK) {
    acc__set_error(acc, r, "waiting for the launchers' rendezvous (store key '%s'): %s", gate,
                   acc_store_client_error(acc->store));
    return -1;
  }
  return 0;
}

static int join_group(acc_t *acc) {
  snprintf(acc->key_prefix, sizeof acc->key_prefix, "%s/%d/", acc->run_id, g_generation++);
  /* A dead peer must give an error, not kill us by SIGPIPE on write. */
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);

  const char *secret = nbf_param_raw(NBF_P_NBFORK_RDZV_SECRET);
  if (!nbf_param_NBFORK_STORE_HOSTED() && acc->rank == 0) {
    char err[512];
    /* as the launcher (ln_group.c): loopback only when every rank is here */
    int local = nbf_loopback_name(acc->master_addr);
    if (!local && !(secret && *secret))
      fprintf(stderr,
              "nbfork: warning: rank 0 hosts the rendezvous store on every interface (port %d) "
              "without a secret: any host that reaches it can join or disturb this job. Set "
              "NBFORK_RDZV_SECRET (rdzv_conf=secret=... in %%launch) to the same text on every "
              "node.\n",
              acc->master_port);
    acc->store_server = acc_store_server_start_secure(local ? "127.0.0.1" : "*", acc->master_port,
                                                      secret, err, sizeof err);
    if (!acc->store_server) {
      acc__set_error(acc, ACC_ERR_STORE, "rank 0 could not host the rendezvous store: %s", err);
      return -1;
    }
  }
  char err[1024];
  acc->store = acc_store_client_open(acc->master_addr, acc->master_port, acc->timeout_ms, secret,
                                     err, sizeof err);
  if (!acc->store) {
    acc__set_error(acc, ACC_ERR_STORE, "cannot create a%s client of the store at %s:%d: %s%s%s%s",
                   secret ? " secure (NBFORK_RDZV_SECRET)" : "", acc->master_addr, acc->master_port,
                   err, master_hint_a(), g_master_origin, master_hint_b());
    return -1;
  }
  if (wait_for_gate(acc) != 0)
    return -1;
  char *host = acc->gloo_host;
  const char *h = nbf_param_raw(NBF_P_NBFORK_GLOO_HOSTNAME);
  if (h) {
    snprintf(host, sizeof acc->gloo_host, "%s", h);
  } else if (acc__local_addr_for(acc->master_addr, host, sizeof acc->gloo_host) != 0) {
    if (nbf_resolve(acc->master_addr) != 0)
      acc__set_error(acc, ACC_ERR_SYSTEM, "MASTER_ADDR=%s does not resolve here%s%s%s",
                     acc->master_addr, master_hint_a(), g_master_origin, master_hint_b());
    else
      acc__set_error(acc, ACC_ERR_SYSTEM,
                     "cannot find the local address that reaches MASTER_ADDR=%s (set "
                     "NBFORK_GLOO_HOSTNAME to this host's address)%s%s%s",
                     acc->master_addr, master_hint_a(), g_master_origin, master_hint_b());
    return -1;
  }
  int by_node = acc__node_connect(acc, host);
  if (by_node != 0)
    return by_node > 0 ? 0 : -1;
  char gloo_prefix[256];
  snprintf(gloo_prefix, sizeof gloo_prefix, "%sgloo/", acc->key_prefix);
  acc_result_t r = acc_gloo_connect(&acc->gloo, acc->rank, acc->world, host, acc->store,
                                    gloo_prefix, acc->timeout_ms, acc__gloo_busy_poll(acc), err,
                                    sizeof err);
  if (r != ACC_OK) {
    acc__set_error(acc, r, "joining the process group (store %s:%d, timeout %d s): %s",
                   acc->master_addr, acc->master_port, acc->timeout_ms / 1000, err);
    return -1;
  }
  /* Every rank is past its store reads once this returns, so rank 0 may
   * stop hosting the store at any time after. */
  r = acc_gloo_barrier(acc->gloo, err, sizeof err);
  if (r != ACC_OK) {
    acc__set_error(acc, r, "first barrier of the process group: %s", err);
    return -1;
  }
  return 0;
}

acc_t *acc_new(const acc_config_t *cfg) {
  acc_config_t c = ACC_CONFIG_INIT;
  if (cfg)
    c = *cfg;
  acc_t *acc = calloc(1, sizeof *acc);
  if (!acc) {
    acc__set_error(NULL, ACC_ERR_NO_MEMORY, "acc_new: out of memory");
    fprintf(stderr, "nbfork: %s\n", acc_last_error(NULL));
    return NULL;
  }
  acc->device = -1;
  acc->world = 1;
  acc_rng_seed(&acc->rng, 67280421310721ULL); /* PyTorch's default seed */
  acc__scaler_init(acc);
  if (read_env(acc, &c) != 0)
    return fail(acc, "reading the environment");
  acc->accum_steps = c.gradient_accumulation_steps > 1 ? c.gradient_accumulation_steps : 1;
  {
    long b;
    if (nbf_param_NBFORK_GRAD_BUCKETS(&b) || b < 0 || b > 2) {
      acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                     "NBFORK_GRAD_BUCKETS must be 0 (one all-reduce of the whole gradient), 1 "
                     "(per bucket) or 2 (per bucket, overlapping the backward pass)");
      return fail(acc, "reading the environment");
    }
    acc->grad_buckets = (int)b;
  }
  acc->sync_with_dataloader = c.sync_with_dataloader != 0;
  acc->sync_gradients = 1;
  acc->accum_prev_zero = 1;
  if (c.seed >= 0)
    acc_set_seed(acc, (unsigned long long)c.seed, 0);
  if (acc__select_device(acc) != 0)
    return fail(acc, "selecting the device");
  nbf_rankstate_t *rs = acc->world > 1 ? nbf_rankstate_self() : NULL;
  acc->rankstate = rs;
  nbf_rankstate_flag(rs, NBF_RS_ERRORS_RETURN, acc->errors_return);
  nbf_rankstate_phase(rs, NBF_RS_RENDEZVOUS);
  if (acc->world > 1 && join_group(acc) != 0) {
    nbf_rankstate_error(rs, ACC_ERR_STORE, -1, NULL, acc->err);
    return fail(acc, "rendezvous");
  }
  nbf_rankstate_phase(rs, NBF_RS_RUNNING);
  acc->rebuilt_epoch = acc__rebuild_epoch(); /* a group made after the cut is in step */
  return acc;
}

void acc_destroy(acc_t **acc_p) {
  acc_t *acc = NBF_TAKE(acc_p);
  if (!acc)
    return;
  acc__charts_flush(acc);
  acc__charts_free(acc);
  /* Rank 0 stops hosting the store BEFORE the final barrier: no rank uses
   * the store after acc_new's first barrier, and a rank that leaves the
   * barrier and joins a new group at once must not reach this old store. */
  acc_gloo_release_store(acc->gloo);
  acc__node_release_store(acc);
  acc_store_client_destroy(&acc->store);
  acc_store_server_stop(&acc->store_server);
  /* Leave together, so nobody tears down a connection a peer still reads. */
  if ((acc->gloo || acc->node) && !acc->broken)
    acc__final_barrier(acc);
  acc_nccl_destroy(acc);
  if (acc->gloo || acc->node) /* this rank left its group: its peers' report says so */
    nbf_rankstate_phase(acc->rankstate, NBF_RS_EXITED);
  acc_gloo_destroy(&acc->gloo);
  acc__node_destroy(acc);
  free(acc->accum_prev);
  acc__device_free(acc);
  free(acc->ckpt_items);
  free(acc);
}

acc_result_t acc_set_errhandler(acc_t *acc, acc_errhandler_t handler) {
  if (!acc || (handler != ACC_ERRORS_ARE_FATAL && handler != ACC_ERRORS_RETURN))
    return acc ? acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_set_errhandler: unknown "
                                "handler %d (ACC_ERRORS_ARE_FATAL or ACC_ERRORS_RETURN)",
                                (int)handler)
               : ACC_ERR_INVALID_ARGUMENT;
  acc->errors_return = handler == ACC_ERRORS_RETURN;
  nbf_rankstate_flag(acc->rankstate, NBF_RS_ERRORS_RETURN, acc->errors_return);
  return ACC_OK;
}

int acc_rank(const acc_t *acc) {
  return acc ? acc->rank : 0;
}
int acc_local_rank(const acc_t *acc) {
  return acc ? acc->local_rank : 0;
}
int acc_world_size(const acc_t *acc) {
  return acc ? acc->world : 1;
}
int acc_local_world_size(const acc_t *acc) {
  return acc ? acc->local_world : 1;
}
int acc_is_main_process(const acc_t *acc) {
  return acc ? acc->rank == 0 : 1;
}
int acc_is_local_main_process(const acc_t *acc) {
  return acc ? acc->local_rank == 0 : 1;
}
int acc_device(const acc_t *acc) {
  return acc ? acc->device : -1;
}
acc_precision_t acc_mixed_precision(const acc_t *acc) {
  return acc ? acc->precision : ACC_PRECISION_NO;
}
