// A new leader's grace on its stamps (cluster/leader_grace.hpp,
// docs/REPLICATION.md section 4), on an injected clock: no raft, no wait.

#include "cluster/leader_grace.hpp"

#include <gtest/gtest.h>

namespace onceq::cluster {
namespace {

constexpr millis k_grace = 500;
constexpr millis k_max_lease = 10'000;

TEST(leader_grace, a_new_term_is_stamped_behind_the_clock_until_the_longest_lease_ran_out) {
  manual_clock clk;
  leader_grace g(k_grace, k_max_lease);
  const millis began = clk.now_ms();
  EXPECT_EQ(g.stamp(3, clk.now_ms()), began - k_grace);
  clk.advance(k_max_lease - 1);
  EXPECT_EQ(g.stamp(3, clk.now_ms()), clk.now_ms() - k_grace) << "the grace still runs";
  clk.advance(1);
  EXPECT_EQ(g.stamp(3, clk.now_ms()), clk.now_ms()) << "every earlier lease ran out: no grace";
  clk.advance(60'000);
  EXPECT_EQ(g.stamp(3, clk.now_ms()), clk.now_ms());

  // Leading a later term starts another grace, from its first stamp.
  const millis next = clk.now_ms();
  EXPECT_EQ(g.stamp(5, next), next - k_grace);
  clk.advance(k_max_lease);
  EXPECT_EQ(g.stamp(5, clk.now_ms()), clk.now_ms());
}

// The promise itself: a lease granted by the previous leader, whose clock
// was up to the grace behind the new leader's, is not ended early by any
// entry the new leader stamps before the lease's deadline (real time).
TEST(leader_grace, a_lease_of_the_previous_leader_is_not_ended_early_by_a_clock_ahead) {
  manual_clock real;                  // true time
  constexpr millis k_skew = k_grace;  // the new leader's clock is this far ahead
  const millis lease_ms = 4'000;
  // The old leader granted the lease at real time t0 (its clock was right).
  const millis t0 = real.now_ms();
  const millis deadline = t0 + lease_ms;
  real.advance(1'200);  // the election

  leader_grace g(k_grace, k_max_lease);
  for (; real.now_ms() < deadline; real.advance(7)) {
    const millis stamped = g.stamp(8, real.now_ms() + k_skew);
    ASSERT_LT(stamped, deadline) << "an entry at real time " << real.now_ms() - t0
                                 << " ms after the grant expires the lease";
  }
  // The tick for the deadline is proposed once its stamp reaches it.
  const millis tick = g.tick_at(deadline);
  EXPECT_EQ(tick, deadline + k_grace);
  EXPECT_GE(g.stamp(8, tick), deadline);
  EXPECT_LT(g.stamp(8, tick - 1), deadline);
}

TEST(leader_grace, ticks_move_by_the_grace_only_while_it_lasts) {
  manual_clock clk;
  leader_grace g(k_grace, k_max_lease);
  EXPECT_EQ(g.tick_at(-1), -1) << "no deadline";
  const millis began = clk.now_ms();
  (void)g.stamp(2, began);
  EXPECT_EQ(g.tick_at(began + 100), began + 100 + k_grace);
  EXPECT_EQ(g.tick_at(began + k_max_lease - 1), began + k_max_lease - 1 + k_grace);
  EXPECT_EQ(g.tick_at(began + k_max_lease), began + k_max_lease) << "past the grace";
  EXPECT_EQ(g.tick_at(-1), -1);
}

TEST(leader_grace, a_zero_grace_stamps_the_clock) {
  manual_clock clk;
  leader_grace g(0, k_max_lease);
  EXPECT_EQ(g.stamp(1, clk.now_ms()), clk.now_ms());
  EXPECT_EQ(g.tick_at(clk.now_ms() + 5), clk.now_ms() + 5);
}

}  // namespace
}  // namespace onceq::cluster
