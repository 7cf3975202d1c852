// Topics, partitions, groups, leases and fencing (issue: the broker core).
#include <map>

#include "broker/validation.hpp"
#include "tests/unit/broker/broker_test_support.hpp"

namespace onceq::testing {
namespace {

TEST_F(BrokerTest, CreateTopicIsIdempotentOnSameSettingsAndConflictsOtherwise) {
  create("orders", 3);
  auto again = b().create_topic(create_topic_cmd{"orders", 3, {}});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  auto other = b().create_topic(create_topic_cmd{"orders", 4, {}});
  EXPECT_EQ(other.code(), errc::already_exists);
  topic_settings s;
  s.lease_ms = 5;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"orders", 3, s}).code(), errc::already_exists);
  EXPECT_EQ(b().list_topics(), std::vector<std::string>{"orders"});
}

TEST_F(BrokerTest, CreateTopicRejectsBadInputAndChangesNothing) {
  EXPECT_EQ(b().create_topic(create_topic_cmd{"", 1, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(b().create_topic(create_topic_cmd{"a b", 1, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(b().create_topic(create_topic_cmd{std::string(201, 'a'), 1, {}}).code(),
            errc::invalid_argument);
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 0, {}}).code(), errc::invalid_argument);
  topic_settings s;
  s.lease_ms = 0;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::invalid_argument);
  s = {};
  s.backoff_ms = -1;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::invalid_argument);
  s = {};
  s.lease_ms = broker_options{}.max_lease_ms + 1;  // consumers could never use it
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::invalid_argument);
  EXPECT_TRUE(b().list_topics().empty());
  EXPECT_EQ(store_.writes(), 0u);
}

TEST_F(BrokerTest, ProduceToUnknownTopicIs400AndUnknownTopicUrlIs404) {
  message_in m = msg("x");
  EXPECT_EQ(b().produce(produce_cmd{"nope", {m}, {}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(b().consume(consume_cmd{"nope", "g", "o", {}, 1, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(b().get_topic("nope").code(), errc::not_found);
  EXPECT_EQ(b().delete_topic("nope").code(), errc::not_found);
}

TEST_F(BrokerTest, PartitionIsOverrideElseKeyHashElseZero) {
  create("t", 4);
  auto m = msg("v");
  m.partition_override = 2;
  EXPECT_EQ(produce("t", m).partition, 2u);
  m = msg("v");
  m.key = "customer-17";
  auto expected = static_cast<std::uint32_t>(partition_hash("customer-17") % 4);
  EXPECT_EQ(produce("t", m).partition, expected);
  EXPECT_EQ(produce("t", m).partition, expected);
  EXPECT_EQ(produce("t", msg("no key")).partition, 0u);
  m = msg("v");
  m.partition_override = 4;
  EXPECT_EQ(b().produce(produce_cmd{"t", {m}, {}, {}}).code(), errc::invalid_argument);
}

TEST_F(BrokerTest, OffsetsIncreaseAndAGroupReadsInOffsetOrder) {
  create("t");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(produce("t", "m" + std::to_string(i)).offset, i);
  auto got = consume("t", "g", "a", 3);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].offset, static_cast<std::uint64_t>(i));
    EXPECT_EQ(got[i].value, "m" + std::to_string(i));
    EXPECT_EQ(got[i].attempts, 1);
    EXPECT_EQ(got[i].last_error, "");
  }
  auto rest = consume("t", "g", "b", 10);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].offset, 3u);
  EXPECT_EQ(rest[1].offset, 4u);
}

TEST_F(BrokerTest, BatchProduceIsAtomic) {
  create("t", 2);
  auto good = msg("ok");
  auto bad = msg("");
  EXPECT_EQ(b().produce(produce_cmd{"t", {good, bad}, {}, {}}).code(), errc::invalid_argument);
  EXPECT_TRUE(consume("t", "g", "a").empty());
  auto r = b().produce(produce_cmd{"t", {good, good, good}, {}, {}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->results.size(), 3u);
  EXPECT_EQ(consume("t", "g", "a").size(), 3u);
}

TEST_F(BrokerTest, ProduceAfterDeadlineIsRejected) {
  create("t");
  auto m = msg("late");
  m.deadline_ms = clock_.now_ms() - 1;
  EXPECT_EQ(b().produce(produce_cmd{"t", {m}, {}, {}}).code(), errc::invalid_argument);
  m.deadline_ms = clock_.now_ms() + 1000;
  EXPECT_TRUE(b().produce(produce_cmd{"t", {m}, {}, {}}).ok());
}

TEST_F(BrokerTest, GroupsFanOutAndInsideAGroupOneConsumerAtATime) {
  create("t");
  produce("t", "x");
  auto a = consume("t", "g1", "a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_TRUE(consume("t", "g1", "b").empty()) << "leased to a";
  auto other = consume("t", "g2", "c");
  ASSERT_EQ(other.size(), 1u) << "every group sees every message";
  EXPECT_EQ(other[0].offset, a[0].offset);
}

TEST_F(BrokerTest, UnackedDeliveryIsRedeliveredAfterLeaseWithAttemptsPlusOne) {
  create("t");
  produce("t", "x");
  auto first = consume("t", "g", "a", 1, 1000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].lease_expires_at_ms, clock_.now_ms() + 1000);
  advance(999);
  EXPECT_TRUE(consume("t", "g", "b").empty());
  advance(1);
  auto second = consume("t", "g", "b");
  expect_redelivered(second, 2, "lease_expired");
  auto s = stats("t", "g");
  EXPECT_EQ(s.lease_expired, 1u);
  EXPECT_EQ(s.redelivered, 1u);
  EXPECT_EQ(s.delivered, 2u);
}

TEST_F(BrokerTest, NackRedeliversAfterDelayWithReason) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a");
  ASSERT_TRUE(nack(d[0], "g", "a", 500, "boom").ok());
  EXPECT_TRUE(consume("t", "g", "a").empty());
  advance(499);
  EXPECT_TRUE(consume("t", "g", "a").empty());
  advance(1);
  auto again = consume("t", "g", "a");
  expect_redelivered(again, 2, "boom");
  EXPECT_EQ(stats("t", "g").nacked, 1u);
}

// A message whose lease lapsed waits, ready, for a consumer; its owner may
// still nack it (nobody else got it since), and the nack's delay must hold.
// It used to stay ready and went out at once: a replica restarted from its
// store had no such entry and delivered something else (the cluster crash
// loop's parted replicas, docs/RELIABILITY.md).
TEST_F(BrokerTest, ANacksDelayHoldsForAMessageThatWaitedReadyAfterItsLeaseLapsed) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a", 1, 1000);
  ASSERT_EQ(d.size(), 1u);
  advance(1000);    // the lease lapses: a backoff starts
  advance(60'000);  // the backoff is over: the message waits, ready
  ASSERT_TRUE(nack(d[0], "g", "a", 5000, "later").ok());
  EXPECT_TRUE(consume("t", "g", "b").empty()) << "delivered before its nack's delay";
  advance(4999);
  EXPECT_TRUE(consume("t", "g", "b").empty());
  advance(1);
  auto again = consume("t", "g", "b");
  expect_redelivered(again, 2, "later");
}

TEST_F(BrokerTest, NackedMessageDoesNotBlockItsPartition) {
  create("t");
  produce("t", "first");
  produce("t", "second");
  auto d = consume("t", "g", "a", 1);
  ASSERT_TRUE(nack(d[0], "g", "a", 10'000).ok());
  auto next = consume("t", "g", "a", 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].value, "second");
}

TEST_F(BrokerTest, ExtendPushesTheDeadline) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a", 1, 1000);
  advance(900);
  auto r = b().extend(extend_cmd{ref(d[0], "g", "a"), 1000});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, clock_.now_ms() + 1000);
  advance(500);  // past the original deadline
  EXPECT_TRUE(consume("t", "g", "b").empty());
  EXPECT_TRUE(ack(d[0], "g", "a").ok());
  EXPECT_EQ(b().extend(extend_cmd{ref(d[0], "g", "a"), 1000}).code(), errc::failed_precondition);
}

TEST_F(BrokerTest, AckFencing) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a", 1, 1000);
  // Not the owner.
  EXPECT_EQ(ack(d[0], "g", "b").code(), errc::failed_precondition);
  // Stale attempts.
  EXPECT_EQ(ack(d[0], "g", "a", {}, 2).code(), errc::failed_precondition);
  // Redelivered to b: a's ack is rejected, b's accepted.
  advance(1000);
  auto d2 = consume("t", "g", "b");
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(ack(d[0], "g", "a").code(), errc::failed_precondition);
  EXPECT_EQ(ack(d2[0], "g", "b", {}, 1).code(), errc::failed_precondition);
  EXPECT_TRUE(ack(d2[0], "g", "b", {}, 2).ok());
  // Repeated successful ack: idempotent. Someone else's: still rejected.
  EXPECT_TRUE(ack(d2[0], "g", "b").ok());
  EXPECT_TRUE(ack(d2[0], "g", "b", {}, 2).ok());
  EXPECT_EQ(ack(d2[0], "g", "a").code(), errc::failed_precondition);
  EXPECT_EQ(stats("t", "g").acked, 1u);
  EXPECT_GE(stats("t", "g").stale_acks_rejected, 4u);
}

TEST_F(BrokerTest, AckOfNeverDeliveredMessageIs409AndChangesNothing) {
  create("t");
  produce("t", "x");
  delivery fake;
  fake.topic = "t";
  EXPECT_EQ(ack(fake, "g", "a").code(), errc::failed_precondition);
  consume("t", "other", "z");
  EXPECT_EQ(ack(fake, "g", "a").code(), errc::failed_precondition);
  auto d = consume("t", "g", "a");
  ASSERT_EQ(d.size(), 1u) << "the rejected ack did not consume the message";
  EXPECT_EQ(d[0].attempts, 1);
}

TEST_F(BrokerTest, AckAfterLapseIsAcceptedIfNobodyReceivedItSince) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a", 1, 100);
  advance(200);
  EXPECT_TRUE(ack(d[0], "g", "a").ok());
  EXPECT_TRUE(consume("t", "g", "b").empty()) << "acked: never delivered again";
}

TEST_F(BrokerTest, NackAndExtendByNonOwnerAre409) {
  create("t");
  produce("t", "x");
  auto d = consume("t", "g", "a");
  EXPECT_EQ(nack(d[0], "g", "b").code(), errc::failed_precondition);
  EXPECT_EQ(b().extend(extend_cmd{ref(d[0], "g", "b"), 100}).code(), errc::failed_precondition);
  EXPECT_TRUE(consume("t", "g", "b").empty()) << "still leased to a";
}

TEST_F(BrokerTest, AckBatchReportsEachAck) {
  create("t");
  produce("t", "x");
  produce("t", "y");
  auto d = consume("t", "g", "a", 2);
  ack_batch_cmd cmd{"t",
                    "g",
                    "a",
                    {ack_item{0, d[0].offset, {}, {}, {}, {}}, ack_item{0, 99, {}, {}, {}, {}},
                     ack_item{0, d[1].offset, 7, {}, {}, {}}}};
  auto r = b().ack_batch(cmd);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].code, errc::ok);
  EXPECT_EQ((*r)[1].code, errc::failed_precondition);
  EXPECT_EQ((*r)[2].code, errc::failed_precondition);
}

TEST_F(BrokerTest, StatsCountBacklogAndInflight) {
  create("t", 2);
  for (int i = 0; i < 6; ++i) produce("t", "m");
  consume("t", "g", "a", 2);
  auto s = stats("t", "g");
  EXPECT_EQ(s.inflight, 2u);
  EXPECT_EQ(s.backlog, 4u);
}

TEST_F(BrokerTest, DeleteTopicRemovesItsData) {
  create("t");
  produce("t", "x");
  consume("t", "g", "a");
  ASSERT_TRUE(b().delete_topic("t").ok());
  EXPECT_TRUE(b().list_topics().empty());
  EXPECT_EQ(store_.count(storage::column::messages), 0u);
  EXPECT_EQ(store_.count(storage::column::deliveries), 0u);
  create("t");
  EXPECT_TRUE(consume("t", "g", "a").empty()) << "a new topic of the same name starts empty";
}

TEST_F(BrokerTest, StorageFailureAnswersUnavailable) {
  create("t");
  store_.fail_writes(true);
  message_in m = msg("x");
  EXPECT_EQ(b().produce(produce_cmd{"t", {m}, {}, {}}).code(), errc::unavailable);
  EXPECT_EQ(b().consume(consume_cmd{"t", "g", "o", {}, 1, {}}).code(), errc::unavailable);
}

TEST_F(BrokerTest, RoundRobinAcrossPartitions) {
  create("t", 3);
  for (std::int64_t p = 0; p < 3; ++p)
    for (int i = 0; i < 3; ++i) {
      auto m = msg("v");
      m.partition_override = p;
      produce("t", m);
    }
  auto got = consume("t", "g", "a", 3);
  ASSERT_EQ(got.size(), 3u);
  std::set<std::uint32_t> parts;
  for (auto& d : got) parts.insert(d.partition);
  EXPECT_EQ(parts.size(), 3u);
}

TEST_F(BrokerTest, SmallMessageCacheStillDeliversEveryValueInOrder) {
  broker_options opts;
  opts.message_cache_bytes = 2000;  // a handful of messages
  restart(opts);
  create("t", 3);
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> sent;
  for (int i = 0; i < 60; ++i) {
    auto m = msg("value-" + std::to_string(i));
    m.key = "k" + std::to_string(i % 7);
    auto p = produce("t", m);
    sent[{p.partition, p.offset}] = "value-" + std::to_string(i);
  }
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::string> got;
  for (;;) {
    auto batch = consume("t", "g", "a", 7);
    if (batch.empty()) break;
    for (auto& d : batch) got[{d.partition, d.offset}] = d.value;
  }
  EXPECT_EQ(got, sent);
}

// Read-ahead from the store stops after a byte budget (512 KiB); the next
// consume must carry on from there without losing or reordering anything.
TEST_F(BrokerTest, ReadAheadOfLargeMessagesStopsAtItsBudgetAndResumes) {
  broker_options opts;
  opts.message_cache_bytes = 0;  // every read comes from the store
  restart(opts);
  create("t", 1);
  std::vector<std::string> sent;
  for (int i = 0; i < 400; ++i) {
    sent.push_back(std::to_string(i) + ":" + std::string(4000, 'a' + i % 26));
    produce("t", msg(sent.back()));
  }
  std::vector<std::string> got;
  for (;;) {
    auto batch = consume("t", "g", "a", 150);
    if (batch.empty()) break;
    for (auto& d : batch) got.push_back(d.value);
  }
  EXPECT_EQ(got, sent);
}

// The core's timer count, from describe_state's first line ("... timers=N").
std::size_t timer_count(const broker& b) {
  const std::string s = b.describe_state();
  const auto at = s.find("timers=");
  return at == std::string::npos ? 0 : std::stoul(s.substr(at + 7));
}

// A consume leases all its messages until one deadline, so it pushes one
// lease timer per partition it took from (broker/timers.hpp), not one per
// message; when it fires, only what is still leased until that deadline
// expires: not the acked ones, not the extended one, not another
// consumer's.
TEST_F(BrokerTest, AConsumesLeasesShareOneTimerPerPartitionThatExpiresOnlyWhatIsStillLeased) {
  create("t", 4);
  for (std::int64_t p = 0; p < 4; ++p) {
    for (int i = 0; i < 10; ++i) {
      auto m = msg("m" + std::to_string(p) + "-" + std::to_string(i));
      m.partition_override = p;
      produce("t", std::move(m));
    }
  }
  const std::size_t before = timer_count(b());
  auto got = consume("t", "g", "a", 40, 1000);
  ASSERT_EQ(got.size(), 40u);
  EXPECT_EQ(timer_count(b()) - before, 4u) << "one per partition, not one per message";

  // Ack the first two of each partition; extend one other.
  std::size_t acked = 0;
  const delivery* extended = nullptr;
  for (const auto& d : got) {
    if (d.offset < 2) {
      ASSERT_TRUE(ack(d, "g", "a").ok());
      ++acked;
    } else if (extended == nullptr && d.partition == 3 && d.offset == 5) {
      extended = &d;
    }
  }
  ASSERT_EQ(acked, 8u);
  ASSERT_NE(extended, nullptr);
  ASSERT_TRUE(b().extend(extend_cmd{ref(*extended, "g", "a"), 5000}).ok());

  advance(999);
  EXPECT_EQ(stats("t", "g").lease_expired, 0u);
  advance(1);
  EXPECT_EQ(stats("t", "g").lease_expired, 31u);  // 40 - 8 acked - 1 extended
  auto again = consume("t", "g", "b", 100, 60000);
  ASSERT_EQ(again.size(), 31u);
  for (const auto& d : again) {
    EXPECT_EQ(d.attempts, 2);
    EXPECT_EQ(d.last_error, "lease_expired");
    EXPECT_GE(d.offset, 2u);
    EXPECT_FALSE(d.partition == 3 && d.offset == 5);
  }
  // The extended lease ends at its own deadline.
  advance(3999);
  EXPECT_EQ(stats("t", "g").lease_expired, 31u);
  advance(1);
  EXPECT_EQ(stats("t", "g").lease_expired, 32u);
}

// A redelivery far behind the fresh messages gets its own timer, so that
// no timer walks the offsets in between; both expire.
TEST_F(BrokerTest, LeasesFarApartInOnePartitionGetTimersOfTheirOwn) {
  create("t");
  for (int i = 0; i < 60; ++i) produce("t", "m" + std::to_string(i));
  auto first = consume("t", "g", "a", 50, 60000);
  ASSERT_EQ(first.size(), 50u);
  for (std::size_t i = 1; i < first.size(); ++i) ASSERT_TRUE(ack(first[i], "g", "a").ok());
  ASSERT_TRUE(nack(first[0], "g", "a", 0).ok());
  const std::size_t before = timer_count(b());
  auto second = consume("t", "g", "b", 11, 1000);  // offset 0 again, then 50..59
  ASSERT_EQ(second.size(), 11u);
  EXPECT_EQ(timer_count(b()) - before, 2u);
  advance(1000);
  EXPECT_EQ(stats("t", "g").lease_expired, 11u);
}

TEST_F(BrokerTest, TwoConsumesAtTheSameInstantExpireOnlyTheirOwnUnackedLeases) {
  create("t");
  for (int i = 0; i < 10; ++i) produce("t", "m" + std::to_string(i));
  auto a = consume("t", "g", "a", 5, 1000);
  auto c = consume("t", "g", "c", 5, 1000);  // same deadline, the next five offsets
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(c.size(), 5u);
  for (const auto& d : a) ASSERT_TRUE(ack(d, "g", "a").ok());
  advance(1000);
  EXPECT_EQ(stats("t", "g").lease_expired, 5u);
  auto again = consume("t", "g", "b", 100, 60000);
  ASSERT_EQ(again.size(), 5u);
  for (std::size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].offset, c[i].offset);
}

}  // namespace
}  // namespace onceq::testing
