// The core's timer queue: earliest first, only what is due, across many
// timers (the heap sits on a deque, which grows a block at a time).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "broker/timers.hpp"

namespace onceq::testing {
namespace {

timer at(millis when, std::uint64_t offset) {
  timer t;
  t.at = when;
  t.pos = position{static_cast<std::uint32_t>(offset % 4), offset};
  return t;
}

TEST(TimerQueueTest, TakesWhatIsDueEarliestFirstAcrossManyTimers) {
  timer_queue q;
  EXPECT_FALSE(q.next().has_value());
  std::mt19937_64 rng(7);
  std::vector<millis> all;
  // Many more than one deque block, in random order, with repeats.
  for (std::uint64_t i = 0; i < 20'000; ++i) {
    const auto when = static_cast<millis>(rng() % 5'000);
    all.push_back(when);
    q.push(at(when, i));
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(q.size(), all.size());
  EXPECT_EQ(q.next(), all.front());

  const auto first = q.take_due(1'000);
  const auto due = static_cast<std::size_t>(
      std::upper_bound(all.begin(), all.end(), millis{1'000}) - all.begin());
  ASSERT_EQ(first.size(), due);
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].at, all[i]);
  EXPECT_EQ(q.size(), all.size() - due);
  ASSERT_TRUE(q.next().has_value());
  EXPECT_GT(*q.next(), 1'000);

  // Pushes between takes, earlier than what is left, come out first.
  q.push(at(1'001, 1'000'000));
  q.push(at(0, 1'000'001));
  const auto again = q.take_due(1'001);
  ASSERT_GE(again.size(), 2u);
  EXPECT_EQ(again[0].at, 0);
  EXPECT_EQ(again[0].pos.offset, 1'000'001u);
  EXPECT_TRUE(std::is_sorted(again.begin(), again.end(),
                             [](const timer& a, const timer& b) { return a.at < b.at; }));

  auto rest = q.take_due(5'000);
  EXPECT_TRUE(std::is_sorted(rest.begin(), rest.end(),
                             [](const timer& a, const timer& b) { return a.at < b.at; }));
  EXPECT_EQ(first.size() + again.size() + rest.size(), all.size() + 2);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.next().has_value());

  q.push(at(3, 1));
  q.clear();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(q.take_due(10).empty());
}

}  // namespace
}  // namespace onceq::testing
