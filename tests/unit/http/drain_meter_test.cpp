#include "http/drain_meter.hpp"

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

using namespace std::chrono_literals;
using tp = drain_meter::time_point;

TEST(DrainMeterTest, NoEstimateBeforeAWindowCloses) {
  drain_meter m;
  const tp t0{};
  EXPECT_EQ(m.drain_ms(100, t0), std::nullopt);
  for (int i = 0; i < 10; ++i) m.completed(t0 + i * 10ms);
  EXPECT_EQ(m.drain_ms(100, t0 + 500ms), std::nullopt);
}

TEST(DrainMeterTest, EstimatesFromTheLastWindow) {
  drain_meter m;
  const tp t0{};
  // 1000 completions over one second: 1000/s.
  for (int i = 0; i < 1000; ++i) m.completed(t0 + i * 1ms);
  m.completed(t0 + 1000ms);  // closes the window
  EXPECT_EQ(m.drain_ms(5000, t0 + 1100ms), 5000);
  EXPECT_EQ(m.drain_ms(1, t0 + 1100ms), drain_meter::k_min_ms);
  EXPECT_EQ(m.drain_ms(10'000'000, t0 + 1100ms), drain_meter::k_max_ms);
  // Stale after a few seconds without completions: no estimate.
  EXPECT_EQ(m.drain_ms(5000, t0 + 10s), std::nullopt);
}

TEST(DrainMeterTest, AnIdleSpellIsNoRate) {
  drain_meter m;
  const tp t0{};
  m.completed(t0);
  m.completed(t0 + 10min);  // a window of 10 minutes with one completion
  EXPECT_EQ(m.drain_ms(100, t0 + 10min + 1ms), std::nullopt);
}

}  // namespace
}  // namespace onceq::http
