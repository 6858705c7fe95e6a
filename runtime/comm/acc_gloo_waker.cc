/*
 * acc_gloo_waker.cc — see acc_gloo_waker.h.
 */
#include "acc_gloo_waker.h"

#include <cerrno>
#include <cstdint>
#include <mutex>

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <gloo/transport/tcp/device.h>

namespace accrt {

namespace {
/* arm/disarm come from the caller's thread and from teardown threads */
std::mutex g_mu;
} // namespace

std::unique_ptr<LoopWaker>
LoopWaker::attach(const std::shared_ptr<::gloo::transport::Device> &dev) {
  auto tcp = std::dynamic_pointer_cast<::gloo::transport::tcp::Device>(dev);
  if (!tcp)
    return nullptr;
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0)
    return nullptr;
  std::unique_ptr<LoopWaker> w(new LoopWaker(fd));
  try {
    tcp->registerDescriptor(fd, EPOLLIN, w.get());
  } catch (...) {
    return nullptr; /* ~LoopWaker closes fd */
  }
  return w;
}

LoopWaker::~LoopWaker() {
  close(fd_);
}

void LoopWaker::set(long us) {
  struct itimerspec its = {};
  its.it_interval.tv_nsec = us * 1000;
  its.it_value.tv_nsec = us * 1000;
  timerfd_settime(fd_, 0, &its, nullptr); /* us == 0 disarms */
}

void LoopWaker::arm() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (armed_++ == 0)
    set(kTickUs);
}

void LoopWaker::disarm() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (armed_ > 0 && --armed_ == 0)
    set(0);
}

void LoopWaker::handleEvents(int /*events*/) {
  uint64_t expirations;
  while (read(fd_, &expirations, sizeof expirations) < 0 && errno == EINTR)
    ;
}

} // namespace accrt
