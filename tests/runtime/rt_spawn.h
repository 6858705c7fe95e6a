/*
 * rt_spawn.h — run a function as N ranks: fork() N processes with the
 * environment a launcher sets (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port,
 * NBFORK_RUN_ID unique, NBFORK_STORE_HOSTED unset so rank 0 hosts the
 * store), wait for all of them with a deadline, and report.
 *
 * The free port is only free when it is chosen: another program may take
 * it before rank 0's store binds it. rt_spawn watches rank 0's stderr
 * (copied through to its own) for the store's "port N is already in use"
 * line and, when it appears, kills the ranks and starts them again on a
 * new port (up to RT_SPAWN_TRIES times).
 *
 * Also compiled into bench/allreduce.c (which bench/allreduce.py builds
 * alone): it needs only libc and nbf_util.c.
 */
#ifndef RT_SPAWN_H
#define RT_SPAWN_H

/* A rank's body: returns the process exit code (0 = pass). */
typedef int (*rt_rank_fn)(int rank, int world, void *arg);

typedef struct {
  int world;             /* processes to start */
  int started;           /* how many actually start (<= world; default world) */
  int deadline_s;        /* kill everything after this (default 60) */
  const char *timeout_s; /* NBFORK_TIMEOUT_S for the ranks (default "20") */
} rt_spawn_opts_t;

#define RT_SPAWN_TRIES 5

/* Exit status of each rank: >= 0 exit code, -SIG when killed by a signal,
 * -1000 when killed at the deadline. Returns 0 when every started rank
 * exited 0, else 1 (after printing which rank failed). `status` may be
 * NULL or hold opts->world ints. */
int rt_spawn(const rt_spawn_opts_t *opts, rt_rank_fn fn, void *arg, int *status);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0):
 * whoever binds it must retry on EADDRINUSE, as rt_spawn does. */
int rt_free_port(void);

/* Seconds on the monotonic clock (nbf_now_s). */
double rt_now(void);

#endif /* RT_SPAWN_H */
