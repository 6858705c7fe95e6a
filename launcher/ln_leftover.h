/*
 * ln_leftover — processes the workers started and left behind
 * (`system("sleep 300 &")`, a fork, a daemon): during a launch the
 * launching process is a child subreaper (PR_SET_CHILD_SUBREAPER), so
 * every orphaned descendant becomes its child instead of init's; at the
 * end of the launch each worker's process group and every such child is
 * stopped (SIGTERM, SIGKILL after a grace) and reaped.
 *
 * Only children that appeared after ln_leftovers_begin are touched:
 * processes an earlier cell started are the user's.
 */
#ifndef LN_LEFTOVER_H
#define LN_LEFTOVER_H

#include <sys/types.h>

typedef struct {
  pid_t *before; /* this process's children when the launch began */
  int nbefore;
  int was_subreaper; /* restored at the end */
  int done;          /* ln_leftovers_stop ran */
} ln_leftovers_t;

/* Snapshot the children and become a child subreaper. Never fails (a
 * missing /proc or prctl only makes the sweep find less). */
void ln_leftovers_begin(ln_leftovers_t *l);

/* Stop and reap what is left: every process in the process groups
 * groups[0..n) and every child not in the snapshot, with their
 * descendants as they are orphaned to us; SIGTERM, then SIGKILL after
 * grace_ms; gives up kill_ms after the SIGKILL. pump(arg, ms) waits up to
 * ms while forwarding the workers' output (their pipes may be written by
 * the leftovers until they die). Restores the subreaper setting. Returns
 * how many leftover processes were reaped here. */
int ln_leftovers_stop(ln_leftovers_t *l, const pid_t *groups, int n, int grace_ms, int kill_ms,
                      void (*pump)(void *arg, int ms), void *arg);

/* The children of this process (scan of /proc/<pid>/stat: the kernel's
 * /proc/<pid>/task/<tid>/children is not always built in) into a new
 * array (caller frees), *count its length; NULL with *count 0 when none
 * or on failure. */
pid_t *ln_children(int *count);

#endif
