/*
 * acc_gloo_poll.cc — see acc_gloo_poll.h.
 */
#include "acc_gloo_poll.h"

#include <gloo/transport/pair.h>

namespace accrt {

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
  set(ctx, acc_backoff_may_spin(&backoff_) && allowed_);
  if (polling_) {
    polled_++;
    nivcsw_ = acc_backoff_switches();
  } else {
    slept_++;
  }
}

void PollGovernor::after() {
  if (polling_) /* a polled collective ended: acc_backoff.h's rule */
    acc_backoff_ended(&backoff_, nivcsw_);
}

} // namespace accrt
