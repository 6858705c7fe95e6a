/*
 * acc_gloo_poll.cc — see acc_gloo_poll.h.
 */
#include "acc_gloo_poll.h"

#include <sys/resource.h>

#include <gloo/transport/pair.h>

namespace accrt {

namespace {
long involuntary_switches() {
  struct rusage ru;
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}
} // namespace

void PollGovernor::set(const std::shared_ptr<::gloo::Context> &ctx, bool poll) {
  if (known_ && poll == polling_)
    return;
  for (int i = 0; i < ctx->size; i++)
    if (i != ctx->rank)
      ctx->getPair(i)->setSync(true, poll);
  polling_ = poll;
  known_ = true;
}

void PollGovernor::before(const std::shared_ptr<::gloo::Context> &ctx) {
  bool poll = allowed_ && sleep_left_ == 0;
  if (sleep_left_ > 0)
    sleep_left_--;
  set(ctx, poll);
  if (polling_) {
    polled_++;
    nivcsw_ = involuntary_switches();
  } else {
    slept_++;
  }
}

void PollGovernor::after() {
  if (!polling_)
    return;
  if (involuntary_switches() > nivcsw_) { /* preempted while polling */
    sleep_left_ = backoff_;
    backoff_ = backoff_ * 2 > kMaxBackoff ? kMaxBackoff : backoff_ * 2;
  } else if (backoff_ > kMinBackoff) {
    backoff_ /= 2;
  }
}

} // namespace accrt
