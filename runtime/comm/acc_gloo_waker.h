/*
 * acc_gloo_waker.h — wakes Gloo's TCP event loop on demand. C++ only;
 * internal.
 *
 * Why: the TCP transport of Gloo 0.5 (Debian's libgloo, 2022-05) runs one
 * epoll loop thread per device that sleeps in epoll_wait with a 10 ms
 * timeout. Loop::unregisterDescriptor (called when a pair closes its
 * listening socket to connect actively, and when a pair closes) and the
 * loop's shutdown both wait for that loop to finish an iteration: with
 * nothing else ready, each waits up to 10 ms. A 2-rank process group paid
 * 10-30 ms of these ticks to connect and again to tear down, most of a
 * launch's cost (measured: bench/launch_overhead.py).
 *
 * A LoopWaker registers a timerfd with the device's loop through the
 * transport's public Device::registerDescriptor. While a WakeScope is
 * alive the timer fires every kTickUs microseconds, so every such wait
 * ends within one short tick; otherwise the timer is disarmed and costs
 * nothing (no wake-ups during training).
 */
#pragma once

#include <memory>

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/loop.h>

namespace accrt {

class LoopWaker final : public ::gloo::transport::tcp::Handler {
public:
  // Period of the timer while armed (microseconds).
  static constexpr long kTickUs = 200;

  // A waker for `dev`'s event loop, or nullptr when `dev` is not a TCP
  // device or no timerfd could be made (then the 10 ms ticks remain).
  // The waker must outlive the device: the loop may call it until the
  // device's loop thread has ended.
  static std::unique_ptr<LoopWaker> attach(const std::shared_ptr<::gloo::transport::Device> &dev);
  ~LoopWaker() override;

  void arm();    // fire every kTickUs from now on (nests: counted)
  void disarm(); // undo one arm(); the last one stops the timer

  // Called by the loop thread: consume the expirations.
  void handleEvents(int events) override;

private:
  explicit LoopWaker(int fd) : fd_(fd) {}
  void set(long us);
  int fd_;
  int armed_ = 0;
};

// Keeps `w` (may be null) armed for the lifetime of the scope.
class WakeScope {
public:
  explicit WakeScope(LoopWaker *w) : w_(w) {
    if (w_)
      w_->arm();
  }
  ~WakeScope() {
    if (w_)
      w_->disarm();
  }
  WakeScope(const WakeScope &) = delete;
  WakeScope &operator=(const WakeScope &) = delete;

private:
  LoopWaker *w_;
};

} // namespace accrt
