#include "http/deadline_sweep.hpp"

#include <algorithm>

#include <boost/asio/io_context.hpp>

namespace onceq::http {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Every connection's socket runs on an io_context (a shard's loop, or the
// server's io_context through a strand).
deadline_sweep::deadline_sweep(asio::execution_context& ctx)
    : asio::execution_context::service(ctx), timer_(static_cast<asio::io_context&>(ctx)) {}

void deadline_sweep::add(timed* t, std::chrono::milliseconds period) {
  std::lock_guard lock(mu_);
  if (stopped_) return;
  members_.push_back(t);
  period_ = std::min(period_, period);
  arm();
}

void deadline_sweep::remove(timed* t) {
  std::lock_guard lock(mu_);
  auto it = std::find(members_.rbegin(), members_.rend(), t);
  if (it == members_.rend()) return;
  *it = members_.back();
  members_.pop_back();
}

void deadline_sweep::shutdown() {
  std::lock_guard lock(mu_);
  stopped_ = true;
  members_.clear();
  timer_.cancel();
}

void deadline_sweep::arm() {
  if (armed_ || stopped_ || members_.empty()) return;
  armed_ = true;
  timer_.expires_after(period_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) sweep();
  });
}

void deadline_sweep::sweep() {
  const std::int64_t now = steady_now_ns();
  std::vector<std::shared_ptr<timed>> due;
  std::lock_guard lock(mu_);
  armed_ = false;
  for (timed* t : members_) {
    if (!t->due(now)) continue;
    // A connection being destroyed (its count is 0) waits on mu_ to leave.
    if (auto held = t->hold()) due.push_back(std::move(held));
  }
  for (auto& t : due) t->expire_if_due(now);
  arm();
}

}  // namespace onceq::http
