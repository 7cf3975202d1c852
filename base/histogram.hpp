#pragma once

// The one latency histogram of onceq's metrics (GET /metrics): the HTTP
// layer's request durations and the WAL syncer's fsync times are both
// latency_histograms with the same buckets, rendered by one function
// (http/metrics.hpp, append_histogram).

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace onceq {

// What a latency_histogram had counted when it was read.
struct latency_snapshot {
  // Upper bounds of the buckets, in nanoseconds (a last bucket holds
  // everything above the last bound): 50 µs .. 2.5 s, from an fsync on
  // NVMe to a long request.
  static constexpr std::array<std::uint64_t, 15> k_bounds_ns = {
      50'000,      100'000,     250'000,     500'000,       1'000'000,
      2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,
      100'000'000, 250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000};

  // Observations per bucket (not cumulative): buckets[i] counts durations
  // in (k_bounds_ns[i-1], k_bounds_ns[i]]; the last those above every bound.
  std::array<std::uint64_t, k_bounds_ns.size() + 1> buckets{};
  std::uint64_t count = 0;   // the sum of buckets
  std::uint64_t sum_ns = 0;  // their total duration
};

// Lock-free (atomics, release on a bucket): any thread observes, any
// thread takes snapshots. A snapshot is consistent per bucket, not across
// buckets; a bucket it counts has its duration in sum_ns.
class latency_histogram {
 public:
  void observe(std::chrono::nanoseconds took) noexcept;
  latency_snapshot snapshot() const noexcept;
  std::uint64_t count() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, latency_snapshot::k_bounds_ns.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace onceq
