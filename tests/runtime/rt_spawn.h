/*
 * rt_spawn.h — run a function as N ranks: fork() N processes with the
 * environment a launcher sets (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port,
 * NBFORK_RUN_ID unique, NBFORK_STORE_HOSTED unset so rank 0 hosts the
 * store), wait for all of them with a deadline, and report.
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

/* Exit status of each rank: >= 0 exit code, -SIG when killed by a signal,
 * -1000 when killed at the deadline. Returns 0 when every started rank
 * exited 0, else 1 (after printing which rank failed). `status` may be
 * NULL or hold opts->world ints. */
int rt_spawn(const rt_spawn_opts_t *opts, rt_rank_fn fn, void *arg, int *status);

/* A TCP port that was free a moment ago (bind to port 0 on 127.0.0.1). */
int rt_free_port(void);

/* Seconds on the monotonic clock. */
double rt_now(void);

#endif /* RT_SPAWN_H */
