/*
 * acc_gloo_poll.h — waiting that yields on Gloo's synchronous mesh. C++
 * only; internal.
 *
 * Why: a synchronous Gloo pair with busyPoll (Gloo 0.5's
 * tcp::Pair::setSync(true, true)) reads its socket with MSG_DONTWAIT in a
 * loop for as long as the peer takes, with no bound: on a machine where
 * something else wants the cores (another job, a third process), the
 * polling rank holds a core its peer or that job needs until the
 * scheduler preempts it, and it burns the whole wait. Without busyPoll the
 * rank sleeps in a blocking read, and every message costs a wake-up.
 *
 * A PollGovernor chooses per collective by acc_backoff.h's rule (the one
 * the shared-memory waits follow): it polls while polling is allowed
 * (NBFORK_GLOO_BUSY_POLL) and the collectives that polled ran without
 * being preempted; once one is preempted, the next 16 to 4096
 * collectives sleep in blocking reads, then one polls again to look.
 */
#pragma once

#include <memory>

#include <gloo/context.h>

#include "acc_backoff.h"

namespace accrt {

class PollGovernor {
public:
  explicit PollGovernor(bool allowed) : allowed_(allowed) {}

  // Around one collective on `ctx`'s synchronous pairs.
  void before(const std::shared_ptr<::gloo::Context> &ctx);
  void after();

  bool polling() const { return polling_; }
  // Collectives that polled / slept so far (tests: acc__gloo_poll_counts).
  long polled() const { return polled_; }
  long slept() const { return slept_; }

private:
  void set(const std::shared_ptr<::gloo::Context> &ctx, bool poll);
  bool allowed_;
  bool polling_ = false;                     // the pairs' current mode
  bool known_ = false;                       // the pairs were set at least once
  acc_backoff_t backoff_ = ACC_BACKOFF_INIT; // collectives to sleep before the next probe
  long nivcsw_ = 0;                          // the thread's involuntary switches before the call
  long polled_ = 0, slept_ = 0;
};

// Runs one collective between before() and after() (after() also when it
// throws: the failure propagates).
class PolledRun {
public:
  PolledRun(PollGovernor &g, const std::shared_ptr<::gloo::Context> &ctx) : g_(g) {
    g_.before(ctx);
  }
  ~PolledRun() { g_.after(); }
  PolledRun(const PolledRun &) = delete;
  PolledRun &operator=(const PolledRun &) = delete;

private:
  PollGovernor &g_;
};

} // namespace accrt
