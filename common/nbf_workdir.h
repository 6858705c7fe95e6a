/*
 * nbf_workdir.h — the executor's private work directory (cell sources and
 * objects): TMPDIR/nbfork-<owner pid>-XXXXXX, mode 0700, owned by this
 * user, and flock()ed by its owner for its whole life (the lock's fd is
 * inherited by forked workers, so a directory is "in use" while any of
 * them lives).
 *
 * Who removes it: the owner at a normal exit; the kernel when it reaps an
 * executor (a SIGKILLed or crashed executor cannot clean up), and at start
 * every directory whose owner is provably dead. A directory holding a file
 * named NBF_WORKDIR_KEEP (NBFORK_KEEP_WORKDIR=1) is never swept.
 *
 * Part of nbfork_common. 0 / -1 with errno, as the rest of it.
 */
#ifndef NBF_WORKDIR_H
#define NBF_WORKDIR_H

#include <stddef.h>
#include <sys/types.h>

#define NBF_WORKDIR_KEEP ".keep"     /* present: never swept                  */
#define NBF_WORKDIR_LOCKED ".locked" /* written once the owner holds its lock */

/* Create tmp/nbfork-<getpid()>-XXXXXX (mkdtemp: 0700) into out[len] and
 * lock it; *lock_fd is the locked directory fd (O_CLOEXEC: compilers do
 * not inherit it, forked workers do). `keep` writes NBF_WORKDIR_KEEP.
 * 0, or -1 with errno (ENAMETOOLONG, mkdtemp's, open's). */
int nbf_workdir_create(const char *tmp, int keep, char *out, size_t len, int *lock_fd);

/* Remove path and everything under it, not following links. 0 or -1. */
int nbf_workdir_remove(const char *path);

/* Remove work directories of this user in tmp. owner > 0: those named
 * for that pid, which the caller has just reaped (it is dead for sure).
 * owner == 0: those whose owner is provably dead: the lock is free and
 * either no process has the pid or the owner had written
 * NBF_WORKDIR_LOCKED (so a free lock means it exited). Never touches a
 * link, another user's directory, or one holding NBF_WORKDIR_KEEP.
 * Returns how many were removed (>= 0), or -1 when tmp cannot be read. */
int nbf_workdir_sweep(const char *tmp, pid_t owner);

/* An executor `pid` was just reaped (by the kernel, or `nbfork launch`):
 * remove its work directory in TMPDIR, which it cannot do itself after
 * SIGKILL or a crash; nothing when NBFORK_WORKDIR names the directory
 * (the user's). Returns nbf_workdir_sweep's count, or 0. */
int nbf_workdir_reaped(pid_t pid);

#endif
