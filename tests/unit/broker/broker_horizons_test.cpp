// Every idempotency horizon at its boundary: produce dedup window, key TTL,
// retries with backoff, DLQ and redrive, delay, retention.
#include "tests/unit/broker/broker_test_support.hpp"

namespace onceq::testing {
namespace {

constexpr millis k_second = 1000;

message_in with_msg_id(std::string value, std::string id) {
  message_in m;
  m.value = std::move(value);
  m.msg_id = std::move(id);
  return m;
}

TEST_F(BrokerTest, DedupWindowBoundaries) {
  create("t");  // window 120 s
  auto first = produce("t", with_msg_id("x", "m-1"));
  EXPECT_FALSE(first.duplicate);
  clock_.advance(30 * k_second);
  auto at30 = produce("t", with_msg_id("x", "m-1"));
  EXPECT_TRUE(at30.duplicate);
  EXPECT_EQ(at30.offset, first.offset);
  clock_.advance(89 * k_second);  // +119 s
  EXPECT_TRUE(produce("t", with_msg_id("x", "m-1")).duplicate);
  clock_.advance(2 * k_second);  // +121 s
  auto at121 = produce("t", with_msg_id("x", "m-1"));
  EXPECT_FALSE(at121.duplicate);
  EXPECT_NE(at121.offset, first.offset);
  clock_.advance(60 * k_second);  // a new window opened at +121 s
  EXPECT_TRUE(produce("t", with_msg_id("x", "m-1")).duplicate);
  auto info = b().get_topic("t");
  EXPECT_EQ(info->produce_duplicates, 3u);
  EXPECT_EQ(info->produced, 2u);
}

TEST_F(BrokerTest, DedupByHeaderAndWithinABatch) {
  create("t");
  auto a = produce("t", msg("x"), "hdr-1");
  auto b2 = produce("t", msg("x"), "hdr-1");
  EXPECT_TRUE(b2.duplicate);
  EXPECT_EQ(a.offset, b2.offset);
  auto r =
      b().produce(produce_cmd{"t", {with_msg_id("a", "same"), with_msg_id("b", "same")}, {}, {}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->results[0].duplicate);
  EXPECT_TRUE(r->results[1].duplicate);
  EXPECT_EQ(r->results[0].offset, r->results[1].offset);
}

TEST_F(BrokerTest, DedupSurvivesRestart) {
  create("t");
  auto first = produce("t", with_msg_id("x", "m-1"));
  clock_.advance(60 * k_second);
  restart();
  auto again = produce("t", with_msg_id("x", "m-1"));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.offset, first.offset);
}

TEST_F(BrokerTest, CommittedKeyAutoAcksARedeliveryAnHourLater) {
  create("t");
  produce("t", "x", "k");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  clock_.advance(3600 * k_second);
  produce("t", "x again", "k");
  EXPECT_TRUE(consume("t", "g", "a").empty());
  EXPECT_EQ(stats("t", "g").auto_acked, 1u);
}

TEST_F(BrokerTest, KeyTtlBoundaries) {
  topic_settings s;
  s.key_ttl_ms = 10 * k_second;
  create("t", 1, s);
  produce("t", "x", "k");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  auto committed_at = clock_.now_ms();
  EXPECT_EQ(key("t", "g", "k").expires_at_ms, committed_at + s.key_ttl_ms);
  clock_.set(committed_at + s.key_ttl_ms - 1);
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::committed);
  restart();
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::committed) << "and after a restart";
  clock_.set(committed_at + s.key_ttl_ms + 1);
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::none);
  produce("t", "x", "k");
  EXPECT_EQ(consume("t", "g", "a").size(), 1u) << "an expired key no longer suppresses";
}

TEST_F(BrokerTest, PerMessageKeyTtlAndForever) {
  topic_settings s;
  s.key_ttl_ms = 10 * k_second;
  create("t", 1, s);
  auto m = msg("x", "forever");
  m.key_ttl_ms = 0;
  produce("t", m);
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(ack(d[0], "g", "a").ok());
  EXPECT_EQ(key("t", "g", "forever").expires_at_ms, 0);
  clock_.advance(1'000'000 * k_second);
  EXPECT_EQ(key("t", "g", "forever").st, key_info::state::committed);
}

TEST_F(BrokerTest, RetryBackoffDoublesUpToTheCap) {
  topic_settings s;
  s.backoff_ms = 100;
  s.max_backoff_ms = 300;
  create("t", 1, s);
  produce("t", "x");
  // attempts 1 -> 100 ms, 2 -> 200 ms, 3 -> 300 ms (capped from 400).
  for (millis expected : {100, 200, 300}) {
    auto d = consume("t", "g", "a");
    ASSERT_EQ(d.size(), 1u);
    ASSERT_TRUE(nack(d[0], "g", "a").ok());
    advance(expected - 1);
    EXPECT_TRUE(consume("t", "g", "a").empty()) << "before " << expected;
    advance(1);
  }
  EXPECT_EQ(consume("t", "g", "a").size(), 1u);
}

TEST_F(BrokerTest, BackoffAppliesToLeaseExpiryToo) {
  topic_settings s;
  s.backoff_ms = 500;
  create("t", 1, s);
  produce("t", "x");
  consume("t", "g", "a", 1, 100);
  advance(100);
  advance(499);
  EXPECT_TRUE(consume("t", "g", "a").empty());
  advance(1);
  EXPECT_EQ(consume("t", "g", "a").size(), 1u);
}

TEST_F(BrokerTest, MessageRetryPolicyOverridesTopic) {
  topic_settings s;
  s.backoff_ms = 10'000;
  create("t", 1, s);
  auto m = msg("x");
  m.retry.backoff_ms = 0;
  produce("t", m);
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(nack(d[0], "g", "a").ok());
  EXPECT_EQ(consume("t", "g", "a").size(), 1u);
}

TEST_F(BrokerTest, ExhaustedAttemptsGoToTheDlqAndRedriveBringsThemBack) {
  topic_settings s;
  s.max_attempts = 2;
  create("t", 1, s);
  produce("t", "poison", "k");
  for (int i = 0; i < 2; ++i) {
    auto d = consume("t", "g", "a");
    ASSERT_EQ(d.size(), 1u);
    ASSERT_TRUE(nack(d[0], "g", "a", std::nullopt, "bad " + std::to_string(i)).ok());
  }
  EXPECT_TRUE(consume("t", "g", "a").empty());
  EXPECT_EQ(stats("t", "g").dead_lettered, 1u);
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::failed);
  auto dead = consume("dlq.t", "ops", "o");
  ASSERT_EQ(dead.size(), 1u);
  ASSERT_TRUE(dead[0].dlq.has_value());
  EXPECT_EQ(dead[0].dlq->original_topic, "t");
  EXPECT_EQ(dead[0].dlq->original_offset, 0u);
  EXPECT_EQ(dead[0].dlq->attempts, 2);
  EXPECT_EQ(dead[0].dlq->last_error, "bad 1");
  EXPECT_EQ(dead[0].dlq->routed_at_ms, clock_.now_ms());

  auto moved = b().redrive(redrive_cmd{"t", {}});
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, 1);
  auto back = consume("t", "g", "a");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].value, "poison");
  EXPECT_EQ(back[0].attempts, 1) << "attempts reset";
  EXPECT_FALSE(back[0].dlq.has_value());
  EXPECT_EQ(b().redrive(redrive_cmd{"t", {}}).value(), 0);
}

TEST_F(BrokerTest, LeaseExpiryCountsTowardsMaxAttempts) {
  topic_settings s;
  s.max_attempts = 1;
  create("t", 1, s);
  produce("t", "x", "k");
  consume("t", "g", "a", 1, 100);
  advance(100);
  EXPECT_TRUE(consume("t", "g", "a").empty());
  EXPECT_EQ(key("t", "g", "k").st, key_info::state::failed) << "exhausted: failed, not available";
  auto dead = consume("dlq.t", "ops", "o");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].dlq->last_error, "lease_expired");
}

TEST_F(BrokerTest, DelayedMessageIsHeldBackWithoutBlockingOthers) {
  create("t");
  auto m = msg("later");
  m.delay_ms = 5000;
  produce("t", m);
  produce("t", "now");
  auto got = consume("t", "g", "a");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "now");
  advance(4999);
  EXPECT_TRUE(consume("t", "g", "a").empty());
  advance(1);
  auto later = consume("t", "g", "a");
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].value, "later");
  EXPECT_EQ(later[0].attempts, 1);
}

TEST_F(BrokerTest, MessagesAckedByEveryGroupAreDeleted) {
  create("t");
  produce("t", "x");
  auto a = consume("t", "g1", "a");
  auto c = consume("t", "g2", "c");
  ASSERT_TRUE(ack(a[0], "g1", "a").ok());
  advance(2000);
  EXPECT_EQ(store_.count(storage::column::messages), 1u) << "g2 has not acked";
  ASSERT_TRUE(ack(c[0], "g2", "c").ok());
  advance(2000);
  EXPECT_EQ(store_.count(storage::column::messages), 0u);
  EXPECT_EQ(store_.count(storage::column::deliveries), 0u);
  restart();
  EXPECT_EQ(produce("t", "y").offset, 1u) << "offsets never go back";
}

TEST_F(BrokerTest, RetentionDropsOldMessagesAckedOrNot) {
  topic_settings s;
  s.retention_ms = 60 * k_second;
  create("t", 1, s);
  produce("t", "old");
  consume("t", "g", "a", 1, 1000);  // leased, never acked
  clock_.advance(30 * k_second);
  produce("t", "young");
  advance(31 * k_second);
  EXPECT_EQ(store_.count(storage::column::messages), 1u);
  auto got = consume("t", "g", "b");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "young");
  EXPECT_EQ(stats("t", "g").inflight, 1u);
}

TEST_F(BrokerTest, ExpiredMessageIsNeverDeliveredEvenBeforeTheRetentionRun) {
  topic_settings s;
  s.retention_ms = 300;
  create("t", 1, s);
  produce("t", "old");
  clock_.advance(450);  // no tick: the retention run has not happened
  produce("t", "new");
  auto got = consume("t", "g", "a");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "new");
}

}  // namespace
}  // namespace onceq::testing
