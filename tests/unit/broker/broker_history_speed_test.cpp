// Measurement, disabled by default: run with
//   broker_tests --gtest_also_run_disabled_tests --gtest_filter='HistorySpeed.*'
// The hot path (produce 100, consume 100, ack 100, over the in-memory store)
// with and without key_history; docs/BENCHMARKS.md ("Key history cost")
// has the figures.

#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "broker_test_support.hpp"

namespace onceq::testing {
namespace {

constexpr int k_batch = 100;
constexpr int k_rounds = 200;

// Microseconds per message for produce + consume + ack of keyed messages.
double run(bool history) {
  manual_clock clock;
  storage::memory_store store;
  broker b(store, clock, nullptr);
  EXPECT_TRUE(b.recover().ok());
  topic_settings s;
  s.key_history = history;
  EXPECT_TRUE(b.create_topic(create_topic_cmd{"t", 1, s}).ok());
  const std::string value(256, 'v');
  int n = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < k_rounds; ++round) {
    produce_cmd p{"t", {}, {}, {}};
    for (int i = 0; i < k_batch; ++i) {
      message_in m;
      m.value = value;
      m.idempotency_key = fmt::format("order-{}", n++);
      p.messages.push_back(std::move(m));
    }
    EXPECT_TRUE(b.produce(p).ok());
    auto d = b.consume(consume_cmd{"t", "g", "w", {}, k_batch, {}});
    EXPECT_TRUE(d.ok());
    ack_batch_cmd a{"t", "g", "w", {}};
    for (const auto& x : *d) a.acks.push_back(ack_item{x.partition, x.offset, {}, {}, {}, {}});
    EXPECT_TRUE(b.ack_batch(a).ok());
    clock.advance(1);
  }
  const auto us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return us / (k_batch * k_rounds);
}

TEST(HistorySpeed, DISABLED_ProduceConsumeAckWithAndWithoutKeyHistory) {
  for (int rep = 0; rep < 3; ++rep) {
    const double off = run(false);
    const double on = run(true);
    std::printf("key_history off: %.2f us/msg  on: %.2f us/msg  (+%.0f%%)\n", off, on,
                100.0 * (on - off) / off);
  }
}

}  // namespace
}  // namespace onceq::testing
