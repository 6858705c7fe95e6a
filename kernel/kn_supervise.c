/* kn_supervise.c — executor supervision (see kn_kernel.h): starting it,
 * forwarding interrupts, killing it when it does not answer one, and
 * answering the pending request when it crashes, then starting a fresh
 * one. The pipes and the process itself are common/nbf_executor.c's; relaying
 * its output is kn_events.c's. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "kn_kernel.h"
#include "kn_log.h"
#include "nbf_wire.h"

#define KN_EAGER_RESPAWN_MS 5000 /* an executor that lived this long is restarted at once */

bool kn_kernel_ensure_executor(kn_kernel_t *k) {
  if (nbf_executor_running(&k->ex))
    return true;
  if (!k->executor_path[0]) {
    snprintf(k->executor_error, sizeof k->executor_error,
             "no executor binary is configured (set NBFORK_EXECUTOR or install %s next to "
             "nbfork-kernel)",
             NBF_WIRE_EXECUTOR_NAME);
    return false;
  }
  if (nbf_executor_spawn(&k->ex, k->executor_path, NBF_EXECUTOR_PIPES, k->executor_error,
                         sizeof k->executor_error) != 0) {
    kn_log(KN_LOG_ERROR, "%s", k->executor_error);
    return false;
  }
  memset(k->dec, 0, sizeof k->dec);
  kn_log(KN_LOG_DEBUG, "executor %s started, pid %d", k->executor_path, (int)k->ex.pid);
  return true;
}

void kn_kernel_interrupt(kn_kernel_t *k) {
  if (!kn_pending_msg(k->pending) || !nbf_executor_running(&k->ex)) {
    kn_log(KN_LOG_DEBUG, "interrupt: nothing is running");
    return;
  }
  nbf_executor_interrupt(&k->ex, k->interrupt_grace_ms);
  kn_pending_mark_interrupted(k->pending);
}

void kn_kernel_tick(kn_kernel_t *k) {
  int st;
  if (nbf_executor_interrupt_expired(&k->ex)) {
    kn_log(KN_LOG_WARN, "the executor did not answer the interrupt within %lld ms: killing it",
           (long long)k->interrupt_grace_ms);
    kn_kernel_drain_output(k);
    st = nbf_executor_kill(&k->ex);
    kn_kernel_executor_died(k, st, true);
    return;
  }
  if (nbf_executor_running(&k->ex) && nbf_executor_reap(&k->ex, &st)) {
    /* Exited, but its pipes may still be open (a forked worker holds
     * them): take what it wrote, then give it up. */
    kn_kernel_drain_output(k);
    kn_kernel_read_events(k);
    nbf_executor_kill(&k->ex);
    kn_kernel_executor_died(k, st, false);
  } else if (nbf_executor_running(&k->ex) && k->ex.fd_ev < 0) {
    /* fd 4 closed (kn_kernel_read_events saw EOF): the executor is
     * exiting, or closed it, which is the same thing. */
    kn_kernel_drain_output(k);
    st = nbf_executor_kill(&k->ex);
    kn_kernel_executor_died(k, st, false);
  }
}

/* Word the error the pending request gets for the executor's death:
 * ename (the signal, from describe_exit, or KeyboardInterrupt when an
 * interrupt caused it) and an evalue saying what happened, that state was
 * lost, what to do, and whether a fresh executor runs (`restarted`). */
static void death_error(const kn_kernel_t *k, int wstatus, bool interrupt_timeout, const char *how,
                        const char *restarted, char *ename, size_t ename_len, char *evalue,
                        size_t evalue_len) {
  static const char lost[] = "Its state (variables, functions, types and includes defined by "
                             "earlier cells) was lost: re-run the cells that define what you need.";
  bool interrupted = interrupt_timeout || (kn_pending_interrupted(k->pending) &&
                                           WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGINT);
  if (interrupt_timeout) {
    snprintf(ename, ename_len, "KeyboardInterrupt");
    snprintf(evalue, evalue_len,
             "The executor did not stop within %lld ms of the interrupt and was killed. %s %s",
             (long long)k->interrupt_grace_ms, lost, restarted);
  } else if (interrupted) {
    snprintf(ename, ename_len, "KeyboardInterrupt");
    snprintf(evalue, evalue_len, "The executor %s on the interrupt. %s %s", how, lost, restarted);
  } else {
    snprintf(evalue, evalue_len, "The executor crashed: it %s while running this request. %s %s",
             how, lost, restarted);
  }
}

void kn_kernel_executor_died(kn_kernel_t *k, int wstatus, bool interrupt_timeout) {
  int64_t lived_ms = nbf_now_ms() - k->ex.started_ms;
  char ename[96], how[160], evalue[1024];
  if (k->ex.fd_ev >= 0 || k->ex.fd_out[0] >= 0 || k->ex.fd_out[1] >= 0)
    kn_kernel_drain_output(k);
  nbf_executor_kill(&k->ex); /* reaps if needed, closes every fd */
  nbf_executor_describe_exit(wstatus, ename, sizeof ename, how, sizeof how);

  if (!kn_pending_msg(k->pending)) {
    kn_log(KN_LOG_WARN, "the executor %s while idle; %s", how,
           lived_ms >= KN_EAGER_RESPAWN_MS ? "starting a fresh one"
                                           : "a fresh one starts with the next request");
    if (lived_ms >= KN_EAGER_RESPAWN_MS)
      kn_kernel_ensure_executor(k);
    return;
  }

  char restarted[600];
  if (kn_kernel_ensure_executor(k))
    snprintf(restarted, sizeof restarted, "A fresh executor has been started.");
  else
    snprintf(restarted, sizeof restarted, "No fresh executor could be started: %s.",
             k->executor_error);
  death_error(k, wstatus, interrupt_timeout, how, restarted, ename, sizeof ename, evalue,
              sizeof evalue);
  kn_log(KN_LOG_WARN, "%s: %s", ename, evalue);
  char line[1200];
  snprintf(line, sizeof line, "%s: %s", ename, evalue);
  json_t *reply = json_pack("{s:s, s:s, s:s, s:s, s:[s]}", "msg", "reply", "status", "error",
                            "ename", ename, "evalue", evalue, "traceback", line);
  if (reply) {
    kn_pending_complete(k->pending, k, reply);
    json_decref(reply);
  } else
    kn_kernel_finish_pending(k);
}
