// A restart (a new broker over the same store) restores everything that was
// answered: messages, cursors, leases with their deadlines, attempts, keys.
#include "tests/unit/broker/broker_test_support.hpp"

namespace onceq::testing {
namespace {

TEST_F(BrokerTest, RestartRestoresTopicsMessagesAndCursors) {
  create("t", 2);
  for (int i = 0; i < 4; ++i) {
    auto m = msg("m" + std::to_string(i));
    m.partition_override = i % 2;
    produce("t", m);
  }
  auto d = consume("t", "g", "a", 2);
  ASSERT_EQ(d.size(), 2u);
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  ASSERT_TRUE(ack(d[1], "g", "a").ok());
  restart();
  EXPECT_EQ(b().list_topics(), std::vector<std::string>{"t"});
  auto rest = consume("t", "g", "a", 10);
  ASSERT_EQ(rest.size(), 2u) << "acked messages never come back";
  for (auto& r : rest) EXPECT_EQ(r.attempts, 1);
  auto m = msg("after");
  m.partition_override = 0;
  EXPECT_EQ(produce("t", m).offset, 2u) << "offsets continue after a restart";
}

TEST_F(BrokerTest, RestartRestoresLeaseDeadlineAttemptsAndHeldKey) {
  create("t");
  produce("t", "x", "k");
  produce("t", "dup", "k");
  auto d = consume("t", "g", "a", 1, 1000);
  ASSERT_EQ(d.size(), 1u);
  advance(400);
  restart();
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::leased);
  EXPECT_EQ(key("t", "g", "k").lease_expires_at_ms, d[0].lease_expires_at_ms);
  EXPECT_TRUE(consume("t", "g", "b").empty()) << "lease and key hold survive the restart";
  EXPECT_EQ(stats("t", "g").inflight, 1u);
  advance(600);
  auto again = consume("t", "g", "b", 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].offset, d[0].offset);
  EXPECT_EQ(again[0].attempts, 2);
  EXPECT_EQ(again[0].last_error, "lease_expired");
}

TEST_F(BrokerTest, RestartKeepsCommittedKeysAndAutoAcks) {
  create("t");
  produce("t", "x", "k");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(ack(d[0], "g", "a", "42").ok());
  restart();
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::committed);
  EXPECT_EQ(key("t", "g", "k").result_json, "42");
  produce("t", "dup", "k");
  EXPECT_TRUE(consume("t", "g", "a").empty());
  EXPECT_TRUE(ack(d[0], "g", "a").ok()) << "the repeated ack is still idempotent";
}

TEST_F(BrokerTest, RestartKeepsNackDelayAndLastError) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(nack(d[0], "g", "a", 1000, "db down").ok());
  restart();
  EXPECT_TRUE(consume("t", "g", "a").empty());
  advance(1000);
  auto again = consume("t", "g", "a");
  expect_redelivered(again, 2, "db down");
}

TEST_F(BrokerTest, LapsedLeaseFoundAtRestartIsRedelivered) {
  create("t");
  produce("t", "x");
  consume("t", "g", "a", 1, 100);
  broker_.reset();
  clock_.advance(5000);  // the server was down past the deadline
  restart();
  auto again = consume("t", "g", "b");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempts, 2);
}

}  // namespace
}  // namespace onceq::testing
