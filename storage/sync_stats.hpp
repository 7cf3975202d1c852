#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace onceq::storage {

// What the WAL syncer has done since the store opened (GET /metrics):
// a latency histogram of its fsyncs and how many durability callbacks
// it released.
struct sync_stats {
  // Upper bounds of the latency buckets, in nanoseconds (a last bucket
  // holds everything above the last bound): 50 µs .. 1 s, fsync's range.
  static constexpr std::array<std::uint64_t, 13> k_bounds_ns = {
      50'000,     100'000,    250'000,    500'000,     1'000'000,   2'500'000,    5'000'000,
      10'000'000, 25'000'000, 50'000'000, 100'000'000, 250'000'000, 1'000'000'000};

  // Syncs per bucket (not cumulative): buckets[i] counts durations in
  // (k_bounds_ns[i-1], k_bounds_ns[i]]; the last one those above every bound.
  std::array<std::uint64_t, k_bounds_ns.size() + 1> buckets{};
  std::uint64_t count = 0;    // syncs: the sum of buckets
  std::uint64_t sum_ns = 0;   // their total duration
  std::uint64_t waiters = 0;  // when_durable callbacks released by the syncer
};

// The writer's side of sync_stats: lock-free (atomics, release on a bucket), so the
// syncer thread records and any thread takes snapshots. A snapshot is
// consistent per bucket, not across buckets; a bucket it counts has its
// duration in sum_ns.
class sync_stats_recorder {
 public:
  void observe(std::chrono::nanoseconds took) noexcept;
  void add_waiters(std::uint64_t n) noexcept;
  sync_stats snapshot() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, sync_stats::k_bounds_ns.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> waiters_{0};
};

}  // namespace onceq::storage
