/*
 * ln_worker — one forked worker as the launcher sees it: its pid, the
 * read ends of its stdout, stderr and display pipes, the per-stream line
 * assembly, and the tail of its stderr kept for the failure report.
 */
#ifndef LN_WORKER_H
#define LN_WORKER_H

#include <stdio.h>
#include <sys/types.h>

#include "ln_options.h"
#include "nbf_buf.h"
#include "nbf_rankstate.h"

#define LN_TAIL_LINES 12

enum { LN_STDOUT = 0, LN_STDERR = 1, LN_DISPLAY = 2 };

typedef struct {
  pid_t pid;
  int local_rank;
  int fd[3];         /* read ends; -1 once closed */
  nbf_buf_t line[3]; /* bytes of an unfinished line */
  int out_fd[2];     /* where stdout/stderr lines go: the launcher's 1 and 2 */
  int stale[3];      /* the partial line was already there last tick */
  int midline[3];    /* a partial line was flushed: no prefix for the rest */
  char prefix[128];
  char *tail[LN_TAIL_LINES]; /* last stderr lines, ring */
  int tail_next;
  int pidfd; /* readable when the worker exits; -1 when unsupported */
  int exited, status, failed;
  long long exited_ms; /* when the launcher reaped it (nbf_now_ms), for the failure report */
  int stopped_by; /* the signal that had stopped it when the group failed, or 0 */
  /* its state record (nbf_rankstate.h), mapped here before the fork, and
   * the page's descriptor (close-on-exec; the child gets a dup of it as
   * NBFORK_RANKSTATE_FD); NULL / -1 when it could not be made */
  nbf_rankstate_t *rs;
  int rs_fd;
  nbf_rankstate_t seen; /* the record as read when the group failed or hung */
  int seen_ok;          /* `seen` holds a record */
} ln_worker_t;

/* What every worker of one group run shares. */
typedef struct {
  const ln_options_t *o;
  int restart;
  int use_gpu;
  const int *private_fds;
  int nprivate;
} ln_worker_env_t;

/* An idle worker slot: no process, every descriptor -1, output to the
 * launcher's fd 1 and 2. ln_worker_start does this itself. */
void ln_worker_init(ln_worker_t *w, int local_rank);

/* Set this process's per-rank environment for worker `local_rank`:
 * RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK,
 * MASTER_ADDR, MASTER_PORT, ACCELERATE_MIXED_PRECISION, the restart
 * counts, NBFORK_STORE_HOSTED, NBFORK_RUN_ID (and NBFORK_RDZV_SECRET when
 * the options carry one). Called in the forked child. */
void ln_worker_export_env(const ln_worker_env_t *env, int local_rank);

/* fork() worker `local_rank`; in the child set the environment and call
 * fn, then _exit with its result. `siblings[0..nsiblings-1]` are workers
 * already started, whose pipe ends the child closes. Returns 0 or -1
 * (errno set). */
int ln_worker_start(ln_worker_t *w, int local_rank, const ln_worker_env_t *env, int (*fn)(void),
                    ln_worker_t *siblings, int nsiblings);

/* Read what is available on stream s and forward complete lines: stdout
 * and stderr to the launcher's own fd 1 and 2 with the prefix, display
 * lines to send_event. Closes the stream at EOF. */
void ln_worker_read(ln_worker_t *w, int s, int (*send_event)(const char *, size_t));

/* Forward partial output lines that waited a whole monitor tick. */
void ln_worker_flush_stale(ln_worker_t *w);

/* Flush what is left (ending a partial line with a newline) and close
 * the read ends. */
void ln_worker_close(ln_worker_t *w);

/* Describe a failed worker: rank, pid, exit code or signal, stderr tail. */
void ln_worker_describe(const ln_worker_t *w, int rank, FILE *out);

/* Unmap the state record and close its page (ln_worker_free does it). */
void ln_worker_free(ln_worker_t *w);

#endif
