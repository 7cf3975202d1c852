// Idempotency keys: leased with the delivery, committed with the ack,
// auto-ack of duplicates, no head-of-line blocking.
#include "tests/unit/broker/broker_test_support.hpp"

namespace onceq::testing {
namespace {

TEST_F(BrokerTest, KeyIsLeasedWithTheDeliveryAndCommittedWithTheAck) {
  create("t");
  produce("t", "charge", "order-1");
  auto d = consume("t", "g", "a", 1, 1000);
  auto k = key("t", "g", "order-1");
  EXPECT_EQ(k.st, key_info::state::leased);
  EXPECT_EQ(k.owner, "a");
  EXPECT_EQ(k.lease_expires_at_ms, d[0].lease_expires_at_ms);
  ASSERT_TRUE(ack(d[0], "g", "a", R"({"charge_id":"ch_1"})").ok());
  k = key("t", "g", "order-1");
  EXPECT_EQ(k.st, key_info::state::committed);
  EXPECT_EQ(k.result_json, R"({"charge_id":"ch_1"})");
  EXPECT_EQ(k.committed_at_ms, clock_.now_ms());
  EXPECT_EQ(k.expires_at_ms, clock_.now_ms() + topic_settings{}.key_ttl_ms);
  EXPECT_EQ(k.attempts, 1);
}

TEST_F(BrokerTest, DuplicateWithCommittedKeyIsAutoAckedNeverDelivered) {
  create("t");
  produce("t", "charge", "order-1");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  produce("t", "charge again", "order-1");
  produce("t", "other", "order-2");
  auto got = consume("t", "g", "a");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "other");
  auto s = stats("t", "g");
  EXPECT_EQ(s.auto_acked, 1u);
  EXPECT_EQ(s.acked, 1u);
  EXPECT_EQ(s.backlog, 0u);
}

TEST_F(BrokerTest, KeysAreScopedByGroupAndTenant) {
  create("t");
  auto m = msg("x", "k");
  m.tenant_id = "acme";
  produce("t", m);
  auto d = consume("t", "g1", "a");
  ASSERT_TRUE(ack(d[0], "g1", "a").ok());
  EXPECT_EQ(key("t", "g1", "k", "acme").st, key_info::state::committed);
  EXPECT_EQ(key("t", "g1", "k").st, key_info::state::none) << "other tenant";
  EXPECT_EQ(key("t", "g2", "k", "acme").st, key_info::state::none) << "other group";
  EXPECT_EQ(consume("t", "g2", "b").size(), 1u) << "g2 has its own key table";
  auto other = msg("y", "k");
  other.tenant_id = "globex";
  produce("t", other);
  EXPECT_EQ(consume("t", "g1", "a").size(), 1u) << "same key, other tenant: delivered";
}

TEST_F(BrokerTest, HeldKeyHoldsBackItsMessagesButNotOtherKeys) {
  create("t");
  produce("t", "first", "k");
  produce("t", "dup", "k");
  produce("t", "free", "other");
  auto d = consume("t", "g", "a", 1);
  ASSERT_EQ(d[0].value, "first");
  auto more = consume("t", "g", "b", 10);
  ASSERT_EQ(more.size(), 1u) << "the duplicate is held back, the other key flows";
  EXPECT_EQ(more[0].value, "free");
  // The holder acks: the held duplicate is auto-acked, not delivered.
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  EXPECT_TRUE(consume("t", "g", "b").empty());
  EXPECT_EQ(stats("t", "g").auto_acked, 1u);
}

// A consume looks up the keys of the offsets it may take in one go. A
// lookup made by one consume must not outlive it: here the second message
// is passed over (delayed) after its key was looked up as free, the key is
// then committed, and the next consume must see that.
TEST_F(BrokerTest, KeyCommittedAfterAnEarlierConsumeLookedItUpIsSeen) {
  create("t");
  produce("t", "first", "k");
  auto later = msg("second", "k");
  later.delay_ms = 1000;
  produce("t", later);
  auto d = consume("t", "g", "a", 10);
  ASSERT_EQ(d.size(), 1u);
  ASSERT_EQ(d[0].value, "first");
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  advance(1000);
  EXPECT_TRUE(consume("t", "g", "a", 10).empty()) << "the delayed duplicate is auto-acked";
  EXPECT_EQ(stats("t", "g").auto_acked, 1u);
}

// Keys looked up together for a run of offsets each answer for their own
// message: committed, free and keyless messages mixed in one consume.
TEST_F(BrokerTest, OneConsumeSortsCommittedFreeAndKeylessMessages) {
  create("t");
  for (int i = 0; i < 6; i += 2) {
    produce("t", "old", "k" + std::to_string(i));
  }
  for (const auto& d : consume("t", "g", "a", 10)) ASSERT_TRUE(ack(d, "g", "a").ok());
  for (int i = 0; i < 6; ++i) produce("t", "v" + std::to_string(i), "k" + std::to_string(i));
  produce("t", "keyless");
  auto got = consume("t", "g", "a", 10);
  std::vector<std::string> values;
  for (const auto& d : got) values.push_back(d.value);
  EXPECT_EQ(values, (std::vector<std::string>{"v1", "v3", "v5", "keyless"}));
  EXPECT_EQ(stats("t", "g").auto_acked, 3u);
}

TEST_F(BrokerTest, HeldMessageIsDeliveredWhenTheHolderNacks) {
  create("t");
  produce("t", "first", "k");
  produce("t", "second", "k");
  auto d = consume("t", "g", "a", 5);
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(nack(d[0], "g", "a", 10'000).ok());
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::failed);
  auto next = consume("t", "g", "b", 5);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].value, "second");
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::leased);
  EXPECT_EQ(key("t", "g", "k").owner, "b");
}

TEST_F(BrokerTest, LeaseExpiryReturnsTheKeyToAvailable) {
  create("t");
  produce("t", "x", "k");
  consume("t", "g", "a", 1, 100);
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::leased);
  advance(100);
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::none);
  auto again = consume("t", "g", "b");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(key("t", "g", "k").owner, "b");
}

TEST_F(BrokerTest, AckIsRejectedWhenAnotherDeliveryCommittedTheKey) {
  create("t");
  produce("t", "first", "k");
  produce("t", "second", "k");
  auto a = consume("t", "g", "a", 1, 100);
  ASSERT_EQ(a[0].value, "first");
  advance(100);  // a's lease lapses; the key is free
  // b gets the first message again (lowest offset first) and commits the key.
  auto bd = consume("t", "g", "b", 1);
  ASSERT_EQ(bd[0].offset, a[0].offset);
  ASSERT_TRUE(ack(bd[0], "g", "b", R"("b's result")").ok());
  EXPECT_EQ(ack(a[0], "g", "a", R"("a's result")").code(), errc::failed_precondition);
  EXPECT_EQ(key("t", "g", "k").result_json, R"("b's result")") << "the first commit stands";
}

TEST_F(BrokerTest, LapsedOwnerCannotAckWhileKeyIsLeasedByAnotherMessage) {
  create("t");
  produce("t", "first", "k");
  produce("t", "second", "k");
  auto a = consume("t", "g", "a", 1, 100);
  ASSERT_TRUE(nack(a[0], "g", "a", 10'000).ok());
  auto bd = consume("t", "g", "b", 1, 1000);
  ASSERT_EQ(bd[0].value, "second");
  // a's message 0 is pending (nacked); a may not finish it while b holds k.
  EXPECT_EQ(ack(a[0], "g", "a").code(), errc::failed_precondition);
  EXPECT_EQ(key("t", "g", "k").owner, "b");
}

}  // namespace
}  // namespace onceq::testing
