/*
 * nbf_proc.h — stopping a child process, written once (as CZMQ's zproc):
 * every stop path of nbfork (the kernel's executor, `nbfork launch
 * NOTEBOOK`'s executor, the launcher's workers and their leftovers, the
 * executor's compiler) uses these, so they share one policy:
 *
 *   SIGTERM to the process group and the process, SIGCONT after it (a
 *   stopped process would hold the TERM pending, and its port, memory and
 *   GPU, until the KILL), a grace time, SIGKILL, then reap.
 *
 * The group is signalled because nbfork's children lead their own group
 * (the workers they fork must go with them); the process itself as well,
 * in case it left its group. Error discipline: nbf_util.h's.
 */
#ifndef NBF_PROC_H
#define NBF_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* Send sig to pid's process group and to pid. Does nothing for pid <= 0
 * (never signals our own group or every process). */
void nbf_proc_signal(pid_t pid, int sig);

/* The polite half of a stop: SIGTERM then SIGCONT (nbf_proc_signal). */
void nbf_proc_term(pid_t pid);

/* The forced half: SIGKILL (nbf_proc_signal). */
void nbf_proc_kill(pid_t pid);

/* Non-blocking reap: true with *wstatus set when pid exited (or is no
 * child of ours any more: ECHILD, *wstatus 0). */
bool nbf_proc_reaped(pid_t pid, int *wstatus);

/* Called while nbf_proc_wait waits, with the milliseconds it may take
 * (e.g. to drain the child's pipes); NULL sleeps instead. */
typedef void (*nbf_proc_pump_fn)(void *arg, int ms);

/* Wait up to ms for pid to exit, calling pump (or sleeping) in 10 ms
 * steps. true with *wstatus set once reaped. */
bool nbf_proc_wait(pid_t pid, int ms, int *wstatus, nbf_proc_pump_fn pump, void *arg);

/* Stop pid for good: nbf_proc_term, wait up to grace_ms (pump as in
 * nbf_proc_wait), nbf_proc_kill, reap (blocking). Returns the wait
 * status. A pid that already exited is only reaped; grace_ms <= 0 kills
 * at once (no TERM). pid must be our child. */
int nbf_proc_stop(pid_t pid, int grace_ms, nbf_proc_pump_fn pump, void *arg);

#endif
