/*
 * ln_ranks — persistent rank workers (`%ranks start`, `%%ranks` cells):
 * forked from the executor with ln_launch's checks, environment,
 * rendezvous store and output forwarding (ln_worker.h), they stay and
 * wait on a control channel (one socketpair per worker) for commands:
 * load a cell's shared object and run its entry point, load one without
 * running it, copy a named value out or in, exit.
 *
 * The control protocol (ln_ranks_wire.h) is binary and private to this
 * module: a fixed header (op, cell, payload length) then the payload;
 * each command gets exactly one reply (status, payload length, payload).
 *
 * Errors travel as in ln_launch.h: one ln_error_t per call (ename
 * LaunchError, RankFailed, KeyboardInterrupt, UsageError, ValueError),
 * nothing below prints an error itself.
 */
#ifndef LN_RANKS_H
#define LN_RANKS_H

#include <stddef.h>
#include <stdio.h>

#include "ln_launch.h"
#include "ln_options.h"

typedef struct ln_ranks ln_ranks_t;

/* What the workers need from the program that forked them (the
 * executor: libnbfork's acc_keep), called in the worker. */
typedef struct {
  /* The block kept under `name`, its size in *size; NULL when none. */
  void *(*keep_find)(const char *name, size_t *size);
  /* Keep a new zeroed block of `size` bytes under `name`. */
  void *(*keep_make)(const char *name, size_t size);
  /* Forward rank `rank`'s display event line (JSON, no newline) to the
   * kernel; NULL = drop. */
  int (*send_event)(int rank, const char *line, size_t len);
  /* A global no dynamic symbol names (a cell the executor compiled into
   * memory, inherited by the fork): its address and size by assembler
   * name; NULL = none such. */
  void *(*sym_find)(const char *name, size_t *size);
} ln_ranks_hooks_t;

/* Fork o->num_processes workers after ln_launch_check's checks, host the
 * store (node_rank 0) and, with several nodes, wait for the rendezvous
 * verdict. `restart` numbers the start (NBFORK_RUN_ID's -r suffix).
 * 0 with *out set, or -1 with err filled (LaunchError, KeyboardInterrupt). */
int ln_ranks_start(ln_ranks_t **out, const ln_options_t *o, ln_context_t *ctx,
                   const ln_ranks_hooks_t *hooks, int restart, ln_error_t *err);

/* Close the control channels (idle workers exit), then SIGTERM/SIGCONT
 * the rest and SIGKILL after 1 s; reap all, stop the store, free.
 * NULL-safe; clears the pointer. */
void ln_ranks_stop(ln_ranks_t **r);

/* The options it started with (for %ranks restart). */
const ln_options_t *ln_ranks_options(const ln_ranks_t *r);
int ln_ranks_restart_count(const ln_ranks_t *r);

/* Global rank of this node's first worker, and the number of workers. */
int ln_ranks_first(const ln_ranks_t *r);
int ln_ranks_count(const ln_ranks_t *r);

/* Run `symbol` (void (*)(void)) of the shared object `so_path` on the
 * workers whose local rank i has targets[i] != 0, as cell [count];
 * forward their output live (prefixed `[rank k] `), or, with `group`,
 * each rank's output in one block at the end (failed ranks first).
 * Blocks until each targeted worker replied or died; an interrupt
 * (ctx->interrupted) sends SIGINT to each running worker, which ends its
 * cell and keeps its state; one that has not answered within 1 s is
 * killed. A worker that dies ends the cell on the others the same way.
 * 0 when every targeted rank ran the cell; else -1 with err: RankFailed
 * (the first failed rank first: pid, signal or exit code, stderr tail),
 * KeyboardInterrupt, LaunchError (a targeted rank was already dead). */
int ln_ranks_run(ln_ranks_t *r, const char *so_path, const char *symbol, int count,
                 const unsigned char *targets, int group, ln_error_t *err);

/* Have every live worker dlopen `so_path` (RTLD_GLOBAL) without running
 * it, so later cells may use what it defines. 0, or -1 with err. */
int ln_ranks_load(ln_ranks_t *r, const char *so_path, ln_error_t *err);

/* Copy the named value out of local rank `local`: kind "sym" (a global,
 * by its assembler name) or "keep" (an acc_keep block). The worker sends
 * its bytes; dest(ctx, n) says where the n bytes go (NULL: refused, e.g.
 * a size mismatch; the bytes are read and dropped, *n_out = n).
 * 0; 1 refused by dest; -1 with err (not found there, rank dead,
 * interrupted). */
int ln_ranks_pull(ln_ranks_t *r, int local, const char *kind, const char *name,
                  void *(*dest)(void *ctx, size_t n), void *ctx, size_t *n_out, ln_error_t *err);

/* Copy `size` bytes at `src` into the named value on each local rank i
 * with targets[i]: a global must have that size; an acc_keep block is
 * made when missing. 0, or -1 with err (ValueError naming the rank's
 * size and the kernel's when they differ; the first failing rank). */
int ln_ranks_push(ln_ranks_t *r, const unsigned char *targets, const char *kind,
                  const char *name, const void *src, size_t size, ln_error_t *err);

/* Print one line per rank: rank, pid, state (idle, last cell; running
 * cell [k]; exited with its cause), device, resident memory. The one
 * place that reads the workers' state (rank state records, issue 21,
 * will be read here). */
void ln_ranks_status(const ln_ranks_t *r, FILE *out);

/* Whether local rank i is alive (not reaped). */
int ln_ranks_alive(const ln_ranks_t *r, int local);

#endif
