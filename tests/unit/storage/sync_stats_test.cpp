#include "storage/sync_stats.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "storage/memory_store.hpp"

namespace onceq::storage {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(latency_histogram_test, a_duration_lands_in_the_first_bucket_whose_bound_it_does_not_exceed) {
  latency_histogram h;
  h.observe(microseconds(10));                 // <= 50 µs: bucket 0
  h.observe(microseconds(50));                 // on the bound: still bucket 0
  h.observe(nanoseconds(50'001));              // just above: bucket 1 (<= 100 µs)
  h.observe(microseconds(180));                // a typical fsync: bucket 2 (<= 250 µs)
  h.observe(std::chrono::milliseconds(2500));  // the last bound
  h.observe(std::chrono::seconds(3));          // above every bound
  h.observe(nanoseconds(-5));                  // a clock that went back: 0
  const latency_snapshot s = h.snapshot();
  EXPECT_EQ(s.buckets[0], 3u);
  EXPECT_EQ(s.buckets[1], 1u);
  EXPECT_EQ(s.buckets[2], 1u);
  EXPECT_EQ(s.buckets[latency_snapshot::k_bounds_ns.size() - 1], 1u);
  EXPECT_EQ(s.buckets[latency_snapshot::k_bounds_ns.size()], 1u);
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(h.count(), 7u);
  EXPECT_EQ(s.sum_ns, 10'000ull + 50'000 + 50'001 + 180'000 + 2'500'000'000 + 3'000'000'000);
}

TEST(sync_stats_test, the_recorder_keeps_fsync_times_in_the_shared_histogram) {
  sync_stats_recorder r;
  r.observe(microseconds(180));
  const sync_stats s = r.snapshot();
  EXPECT_EQ(s.buckets[2], 1u);
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.sum_ns, 180'000u);
  EXPECT_EQ(s.waiters, 0u);
}

TEST(sync_stats_test, waiters_accumulate) {
  sync_stats_recorder r;
  r.add_waiters(3);
  r.add_waiters(0);  // a sync nobody waited for (fsync=interval)
  r.add_waiters(4);
  EXPECT_EQ(r.snapshot().waiters, 7u);
  EXPECT_EQ(r.snapshot().count, 0u);
}

TEST(sync_stats_test, a_store_without_a_wal_reports_none) {
  memory_store m;
  EXPECT_FALSE(m.wal_sync_stats().has_value());
}

}  // namespace
}  // namespace onceq::storage
