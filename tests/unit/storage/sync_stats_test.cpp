#include "storage/sync_stats.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "storage/memory_store.hpp"

namespace onceq::storage {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

TEST(sync_stats_test, a_duration_lands_in_the_first_bucket_whose_bound_it_does_not_exceed) {
  sync_stats_recorder r;
  r.observe(microseconds(10));         // <= 50 µs: bucket 0
  r.observe(microseconds(50));         // on the bound: still bucket 0
  r.observe(nanoseconds(50'001));      // just above: bucket 1 (<= 100 µs)
  r.observe(microseconds(180));        // a typical fsync: bucket 2 (<= 250 µs)
  r.observe(std::chrono::seconds(1));  // the last bound
  r.observe(std::chrono::seconds(3));  // above every bound
  const sync_stats s = r.snapshot();
  EXPECT_EQ(s.buckets[0], 2u);
  EXPECT_EQ(s.buckets[1], 1u);
  EXPECT_EQ(s.buckets[2], 1u);
  EXPECT_EQ(s.buckets[sync_stats::k_bounds_ns.size() - 1], 1u);
  EXPECT_EQ(s.buckets[sync_stats::k_bounds_ns.size()], 1u);
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.sum_ns, 10'000u + 50'000u + 50'001u + 180'000u + 1'000'000'000u + 3'000'000'000u);
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
