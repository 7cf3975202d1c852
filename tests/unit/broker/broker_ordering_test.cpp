// Ordered delivery per message key (topic setting ordering = key): one
// delivery of a key at a time per group, in offset order; a blocked key is
// skipped, never waited for; the holds survive a restart. On the injected
// clock and the in-memory store.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "broker_test_support.hpp"

namespace onceq::testing {
namespace {

class OrderingTest : public BrokerTest {
 protected:
  static topic_settings ordered() {
    topic_settings s;
    s.ordering = topic_settings::ordering_mode::key;
    return s;
  }

  static message_in keyed(std::string value, std::optional<std::string> key, std::string idem = {},
                          std::optional<std::int64_t> delay_ms = std::nullopt) {
    message_in m;
    m.value = std::move(value);
    m.key = std::move(key);
    m.idempotency_key = std::move(idem);
    m.delay_ms = delay_ms;
    return m;
  }

  void put(const std::string& topic, std::string value, std::optional<std::string> key,
           std::string idem = {}, std::optional<std::int64_t> delay_ms = std::nullopt) {
    produce(topic, keyed(std::move(value), std::move(key), std::move(idem), delay_ms));
  }

  static std::vector<std::string> values(const std::vector<delivery>& ds) {
    std::vector<std::string> out;
    for (const auto& d : ds) out.push_back(d.value);
    return out;
  }

  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  // describe_state less what a restart resets or leaves behind: counters
  // (stats lines; produced, dups, committed) and stale timers.
  static std::string state_of(const broker& b) {
    static const std::regex counters(R"( produced=\d+ dups=\d+ committed=\d+| timers=\d+)");
    std::string out;
    std::istringstream in(b.describe_state());
    for (std::string line; std::getline(in, line);)
      if (line.find("stats ") == std::string::npos)
        out += std::regex_replace(line, counters, "") + "\n";
    return out;
  }

  void expect_ok(const result<void>& r) { EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message); }
};

TEST_F(OrderingTest, TheSecondMessageOfAKeyWaitsForTheFirstsAck) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  auto first = consume("t", "g", "o", 10);
  ASSERT_EQ(values(first), std::vector<std::string>{"a1"});
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  expect_ok(ack(first[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, AnAckThatReleasesAKeyWakesTheTopic) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  auto first = consume("t", "g", "o", 10);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  b().take_ready_topics();
  expect_ok(ack(first[0], "g", "o"));
  EXPECT_EQ(b().take_ready_topics(), std::vector<std::string>{"t"});
}

TEST_F(OrderingTest, ABlockedKeyIsSkippedAndTheConsumeFillsUpWithOtherKeys) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "a3", "a");
  put("t", "b1", "b");
  put("t", "c1", "c");
  put("t", "b2", "b");
  put("t", "d1", "d");
  EXPECT_EQ(values(consume("t", "g", "o", 4)), (std::vector<std::string>{"a1", "b1", "c1", "d1"}));
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
}

TEST_F(OrderingTest, ANackRedeliversTheSameMessageAfterItsBackoffBeforeTheNext) {
  auto s = ordered();
  s.backoff_ms = 500;
  create("t", 1, s);
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "b1", "b");
  auto got = consume("t", "g", "o", 1);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  expect_ok(nack(got[0], "g", "o"));
  // During the backoff, the key stays held: only the other key comes.
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"b1"});
  advance(500);
  auto again = consume("t", "g", "o", 10);
  expect_redelivered(again, 2, "nack");
  EXPECT_EQ(again[0].value, "a1");
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  expect_ok(ack(again[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, AnExpiredLeaseRedeliversTheSameMessageFirst) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  auto got = consume("t", "g", "o", 10, 100);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  advance(200);
  auto again = consume("t", "g", "o2", 10);
  expect_redelivered(again, 2, "lease_expired");
  EXPECT_EQ(again[0].value, "a1");
  expect_ok(ack(again[0], "g", "o2"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, DeadLetteringReleasesTheNextMessage) {
  auto s = ordered();
  s.max_attempts = 1;
  create("t", 1, s);
  put("t", "a1", "a");
  put("t", "a2", "a");
  auto got = consume("t", "g", "o", 10);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  expect_ok(nack(got[0], "g", "o"));
  EXPECT_EQ(stats("t", "g").dead_lettered, 1u);
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, DeadLetteringByLeaseExpiryReleasesTheNextMessage) {
  auto s = ordered();
  s.max_attempts = 1;
  create("t", 1, s);
  put("t", "a1", "a");
  put("t", "a2", "a");
  ASSERT_EQ(values(consume("t", "g", "o", 10, 100)), std::vector<std::string>{"a1"});
  advance(200);
  EXPECT_EQ(stats("t", "g").dead_lettered, 1u);
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, AnAutoAckOfACommittedKeyReleasesTheNextMessage) {
  create("t", 1, ordered());
  put("t", "a1", "a", "i1");
  put("t", "a2", "a", "i1");  // the same idempotency key: auto-acked
  put("t", "a3", "a", "i3");
  auto first = consume("t", "g", "o", 10);
  ASSERT_EQ(values(first), std::vector<std::string>{"a1"});
  expect_ok(ack(first[0], "g", "o"));
  // a2 is auto-acked, which hands the key to a3 (in this consume or, once
  // the release is applied, the next one).
  auto got = consume("t", "g", "o", 10);
  if (got.empty()) got = consume("t", "g", "o", 10);
  EXPECT_EQ(values(got), std::vector<std::string>{"a3"});
  EXPECT_EQ(stats("t", "g").auto_acked, 1u);
}

TEST_F(OrderingTest, ADelayedMessageHoldsItsKey) {
  create("t", 1, ordered());
  put("t", "a1", "a", {}, 1000);
  put("t", "a2", "a");
  put("t", "b1", "b");
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"b1"});
  advance(999);
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  advance(1);
  auto got = consume("t", "g", "o", 10);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  expect_ok(ack(got[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, MessagesWithoutKeyAreDeliveredAsBefore) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "n1", std::nullopt);
  put("t", "a2", "a");
  put("t", "n2", std::nullopt);
  put("t", "n3", std::nullopt);
  EXPECT_EQ(values(consume("t", "g", "o", 10)), (std::vector<std::string>{"a1", "n1", "n2", "n3"}));
}

TEST_F(OrderingTest, OrderingNoneDeliversAKeysMessagesTogether) {
  create("t", 1);
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "a3", "a");
  EXPECT_EQ(values(consume("t", "g", "o", 10)), (std::vector<std::string>{"a1", "a2", "a3"}));
}

TEST_F(OrderingTest, TwoGroupsAreIndependent) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  auto g1 = consume("t", "g1", "o", 10);
  ASSERT_EQ(values(g1), std::vector<std::string>{"a1"});
  auto g2 = consume("t", "g2", "o", 10);
  ASSERT_EQ(values(g2), std::vector<std::string>{"a1"});
  expect_ok(ack(g1[0], "g1", "o"));
  EXPECT_EQ(values(consume("t", "g1", "o", 10)), std::vector<std::string>{"a2"});
  EXPECT_TRUE(consume("t", "g2", "o", 10).empty());
  expect_ok(ack(g2[0], "g2", "o"));
  EXPECT_EQ(values(consume("t", "g2", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, KeysSpreadOverPartitionsKeepTheirOrder) {
  create("t", 4, ordered());
  for (int i = 0; i < 3; ++i)
    for (const char* k : {"a", "b", "c", "d", "e"})
      put("t", std::string(k) + std::to_string(i), std::string(k));
  for (int i = 0; i < 3; ++i) {
    auto got = consume("t", "g", "o", 100);
    std::vector<std::string> want;
    for (const char* k : {"a", "b", "c", "d", "e"}) want.push_back(k + std::to_string(i));
    EXPECT_EQ(sorted(values(got)), want) << "round " << i;
    for (const auto& d : got) expect_ok(ack(d, "g", "o"));
  }
  EXPECT_TRUE(consume("t", "g", "o", 100).empty());
}

TEST_F(OrderingTest, ARestartKeepsTheHolds) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "b1", "b");
  auto first = consume("t", "g", "o", 1);
  ASSERT_EQ(values(first), std::vector<std::string>{"a1"});
  const auto before = state_of(b());
  restart();  // kill -9: the same store, a new broker
  EXPECT_EQ(state_of(b()), before);
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"b1"});
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  expect_ok(ack(first[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, ARestartKeepsAParkedQueueAndAHolderInBackoff) {
  auto s = ordered();
  s.backoff_ms = 1000;
  create("t", 1, s);
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "a3", "a");
  put("t", "d1", "d", {}, 5000);
  put("t", "d2", "d");
  auto got = consume("t", "g", "o", 10);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  expect_ok(nack(got[0], "g", "o"));
  const auto before = state_of(b());
  EXPECT_NE(before.find("order "), std::string::npos);
  EXPECT_NE(before.find("order_parked"), std::string::npos);
  restart();
  EXPECT_EQ(state_of(b()), before);
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  advance(1000);
  auto again = consume("t", "g", "o", 10);
  ASSERT_EQ(values(again), std::vector<std::string>{"a1"});
  EXPECT_EQ(again[0].attempts, 2);
  expect_ok(ack(again[0], "g", "o"));
  auto a2 = consume("t", "g", "o", 10);
  ASSERT_EQ(values(a2), std::vector<std::string>{"a2"});
  expect_ok(ack(a2[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a3"});
  advance(4000);
  auto d1 = consume("t", "g", "o", 10);
  ASSERT_EQ(values(d1), std::vector<std::string>{"d1"});
  expect_ok(ack(d1[0], "g", "o"));
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"d2"});
}

TEST_F(OrderingTest, ARestartAfterAReleaseGivesTheSameState) {
  create("t", 1, ordered());
  put("t", "a1", "a");
  put("t", "a2", "a");
  put("t", "a3", "a");
  auto got = consume("t", "g", "o", 10);
  ASSERT_EQ(values(got), std::vector<std::string>{"a1"});
  expect_ok(ack(got[0], "g", "o"));  // a2 now holds the key, undelivered
  const auto before = state_of(b());
  restart();
  EXPECT_EQ(state_of(b()), before);
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

TEST_F(OrderingTest, RetentionDroppingTheHolderReleasesTheNext) {
  auto s = ordered();
  s.retention_ms = 3000;
  create("t", 1, s);
  put("t", "a1", "a");
  advance(2000);
  put("t", "a2", "a");
  ASSERT_EQ(values(consume("t", "g", "o", 10, 60'000)), std::vector<std::string>{"a1"});
  EXPECT_TRUE(consume("t", "g", "o", 10).empty());
  advance(1100);  // a1 is older than the retention: dropped, its hold with it
  EXPECT_EQ(values(consume("t", "g", "o", 10)), std::vector<std::string>{"a2"});
}

// Random consumes, acks, nacks, lease expiries and delays over a few keys:
// never two deliveries of a key at once, each key's messages first
// delivered in offset order, and after every step a restart rebuilds the
// same state.
TEST_F(OrderingTest, RandomRunsKeepTheOrderAndSurviveRestarts) {
  for (std::int64_t partitions : {1, 3}) {
    store_ = storage::memory_store{};
    restart();
    auto s = ordered();
    s.backoff_ms = 50;
    s.max_attempts = 3;
    create("t", partitions, s);
    std::uint64_t x = 12345 + static_cast<std::uint64_t>(partitions);
    auto rnd = [&](std::uint64_t n) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      return (x >> 33) % n;
    };
    std::map<std::string, delivery> held;             // key -> the leased delivery
    std::map<std::string, std::uint64_t> last_first;  // key -> after its last first delivery
    std::set<std::pair<std::uint32_t, std::uint64_t>> seen;
    int produced = 0;
    for (int step = 0; step < 400; ++step) {
      switch (rnd(5)) {
        case 0: {
          const std::string k(1, static_cast<char>('a' + rnd(4)));
          std::optional<std::int64_t> delay;
          if (rnd(4) == 0) delay = static_cast<std::int64_t>(rnd(200));
          put("t", k + std::to_string(produced++), k, {}, delay);
          break;
        }
        case 1: {
          for (auto& d : consume("t", "g", "o", 1 + static_cast<std::int64_t>(rnd(4)), 100)) {
            ASSERT_TRUE(d.key.has_value());
            const auto& k = *d.key;
            EXPECT_EQ(held.count(k), 0u) << "two deliveries of key " << k << " at step " << step;
            held[k] = d;
            if (seen.emplace(d.partition, d.offset).second) {
              EXPECT_GE(d.offset, last_first[k]) << "key " << k << " out of order";
              last_first[k] = d.offset + 1;
            }
          }
          break;
        }
        case 2:
        case 3: {
          if (held.empty()) break;
          auto it = held.begin();
          std::advance(it, static_cast<long>(rnd(held.size())));
          if (rnd(3) == 0)
            (void)nack(it->second, "g", "o");
          else
            (void)ack(it->second, "g", "o");
          held.erase(it);
          break;
        }
        default:
          advance(static_cast<millis>(rnd(120)));
          // Expired leases: the key is no longer leased to us.
          for (auto it = held.begin(); it != held.end();)
            it = it->second.lease_expires_at_ms <= clock_.now_ms() ? held.erase(it) : std::next(it);
          break;
      }
      if (step % 7 == 0) {
        advance(0);
        const auto before = state_of(b());
        restart();
        ASSERT_EQ(state_of(b()), before) << "step " << step << " partitions " << partitions;
      }
    }
    EXPECT_GT(seen.size(), 20u);
  }
}

}  // namespace
}  // namespace onceq::testing
