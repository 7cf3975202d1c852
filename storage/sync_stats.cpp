#include "storage/sync_stats.hpp"

#include <algorithm>

namespace onceq::storage {

void sync_stats_recorder::observe(std::chrono::nanoseconds took) noexcept {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(took.count(), 0));
  const auto& bounds = sync_stats::k_bounds_ns;
  // The first bound >= ns: a duration equal to a bound belongs to it (le).
  const auto b =
      static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), ns) - bounds.begin());
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  // Release: a snapshot that sees this bucket's increment sees the sum too.
  buckets_[b].fetch_add(1, std::memory_order_release);
}

void sync_stats_recorder::add_waiters(std::uint64_t n) noexcept {
  waiters_.fetch_add(n, std::memory_order_relaxed);
}

sync_stats sync_stats_recorder::snapshot() const noexcept {
  sync_stats s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_acquire);
    s.count += s.buckets[i];
  }
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  s.waiters = waiters_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace onceq::storage
