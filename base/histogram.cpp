#include "base/histogram.hpp"

#include <algorithm>

namespace onceq {

void latency_histogram::observe(std::chrono::nanoseconds took) noexcept {
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(took.count(), 0));
  const auto& bounds = latency_snapshot::k_bounds_ns;
  // The first bound >= ns: a duration equal to a bound belongs to it (le).
  const auto b =
      static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), ns) - bounds.begin());
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  // Release: a snapshot that sees this bucket's increment sees the sum too.
  buckets_[b].fetch_add(1, std::memory_order_release);
}

latency_snapshot latency_histogram::snapshot() const noexcept {
  latency_snapshot s;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_acquire);
    s.count += s.buckets[i];
  }
  s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  return s;
}

std::uint64_t latency_histogram::count() const noexcept {
  std::uint64_t n = 0;
  for (const auto& b : buckets_) n += b.load(std::memory_order_relaxed);
  return n;
}

}  // namespace onceq
