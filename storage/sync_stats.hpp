#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "base/histogram.hpp"

namespace onceq::storage {

// What the WAL syncer has done since the store opened (GET /metrics): the
// latency histogram of its fsyncs and how many durability callbacks it
// released.
struct sync_stats : latency_snapshot {
  std::uint64_t waiters = 0;  // when_durable callbacks released by the syncer
};

// Adds s to into (the stats of several stores, e.g. every shard's).
inline void add(sync_stats& into, const sync_stats& s) noexcept {
  for (std::size_t i = 0; i < into.buckets.size(); ++i) into.buckets[i] += s.buckets[i];
  into.count += s.count;
  into.sum_ns += s.sum_ns;
  into.waiters += s.waiters;
}

// The writer's side of sync_stats: lock-free, so the syncer thread records
// and any thread takes snapshots (see latency_histogram).
class sync_stats_recorder {
 public:
  void observe(std::chrono::nanoseconds took) noexcept { latency_.observe(took); }
  void add_waiters(std::uint64_t n) noexcept { waiters_.fetch_add(n, std::memory_order_relaxed); }
  sync_stats snapshot() const noexcept {
    sync_stats s;
    static_cast<latency_snapshot&>(s) = latency_.snapshot();
    s.waiters = waiters_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  latency_histogram latency_;
  std::atomic<std::uint64_t> waiters_{0};
};

}  // namespace onceq::storage
