// POST /v1/replay in the core: the dry run's outcome for each message, the
// real replay handing back exactly the would_deliver ones, its idempotence,
// paging, and replay_window_ms keeping acked messages (and no longer).

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "broker_test_support.hpp"

namespace onceq::testing {
namespace {

constexpr millis k_second = 1000;
constexpr millis k_hour = 3600 * k_second;

using outcome = replay_outcome;

class ReplayTest : public BrokerTest {
 protected:
  static replay_cmd offsets(std::int64_t from, std::int64_t to, bool dry_run = true) {
    replay_cmd c;
    c.topic = "t";
    c.group = "g";
    c.partition = 0;
    c.from_offset = from;
    c.to_offset = to;
    c.dry_run = dry_run;
    return c;
  }

  replay_reply run(const replay_cmd& c) {
    auto r = b().replay(c);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? std::move(*r) : replay_reply{};
  }

  static std::vector<outcome> outcomes(const replay_reply& r) {
    std::vector<outcome> out;
    for (const auto& m : r.messages) out.push_back(m.outcome);
    return out;
  }

  static std::uint64_t count(const replay_reply& r, outcome o) {
    return r.summary[static_cast<std::size_t>(o)];
  }

  // Offsets 0..6 of "t" (window 1 h), each in one state for group "g":
  // 0 acked with its key committed, 1 acked without a key, 2 acked but its
  // key expired since, 3 leased by "a", 4 nacked and waiting for its retry,
  // 5 dead-lettered, 6 never delivered.
  void mixed_range() {
    topic_settings s;
    s.replay_window_ms = k_hour;
    create("t", 1, s);
    produce("t", "v0", "k0");
    produce("t", msg("v1"));
    auto m2 = msg("v2", "k2");
    m2.key_ttl_ms = k_second;
    produce("t", m2);
    produce("t", "v3", "k3");
    produce("t", "v4", "k4");
    auto m5 = msg("v5", "k5");
    m5.retry.max_attempts = 1;
    produce("t", m5);
    auto got = consume("t", "g", "a", 10, k_hour);
    ASSERT_EQ(got.size(), 6u);
    ASSERT_TRUE(ack(got[0], "g", "a", R"({"charged":1})").ok());
    ASSERT_TRUE(ack(got[1], "g", "a").ok());
    ASSERT_TRUE(ack(got[2], "g", "a").ok());
    ASSERT_TRUE(nack(got[4], "g", "a", k_hour, "bug").ok());
    ASSERT_TRUE(nack(got[5], "g", "a", std::nullopt, "bug").ok());
    produce("t", "v6", "k6");
    advance(2 * k_second);  // k2 expires; retention runs, the window keeps 0..2
  }
};

TEST_F(ReplayTest, DryRunAnswersEachMessagesOutcomeForTheGroup) {
  mixed_range();
  committed_key want{R"({"charged":1})", clock_.now_ms() - 2 * k_second, "a"};
  const auto before = b().describe_state();
  auto r = run(offsets(0, 100));
  EXPECT_TRUE(r.dry_run);
  EXPECT_EQ(outcomes(r),
            (std::vector<outcome>{outcome::already_committed, outcome::would_deliver,
                                  outcome::would_deliver, outcome::in_flight, outcome::pending,
                                  outcome::dead_lettered, outcome::pending}));
  ASSERT_TRUE(r.messages[0].committed.has_value());
  EXPECT_EQ(*r.messages[0].committed, want);
  EXPECT_EQ(r.messages[0].idempotency_key, "k0");
  EXPECT_EQ(r.messages[3].owner, "a");
  EXPECT_EQ(r.messages[3].attempts, 1);
  EXPECT_EQ(count(r, outcome::would_deliver), 2u);
  EXPECT_EQ(count(r, outcome::pending), 2u);
  EXPECT_EQ(count(r, outcome::already_committed), 1u);
  EXPECT_EQ(r.replayed, 0u);
  EXPECT_FALSE(r.next.has_value());
  EXPECT_EQ(b().describe_state(), before) << "a dry run changes nothing";
  auto next = consume("t", "g", "b");
  ASSERT_EQ(next.size(), 1u) << "nothing else became deliverable";
  EXPECT_EQ(next[0].value, "v6");
}

TEST_F(ReplayTest, ReplayRedeliversExactlyTheWouldDeliverMessagesOnce) {
  mixed_range();
  auto r = run(offsets(0, 100, false));
  EXPECT_FALSE(r.dry_run);
  EXPECT_EQ(r.replayed, 2u);
  EXPECT_EQ(count(r, outcome::would_deliver), 2u);
  auto got = consume("t", "g", "b", 2);  // redeliveries come first
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].value, "v1");
  EXPECT_EQ(got[1].value, "v2");
  for (const auto& d : got) {
    EXPECT_EQ(d.attempts, 1) << "attempts start again";
    EXPECT_EQ(d.last_error, "replay");
  }
  // While they are pending or leased, a second replay finds nothing to do.
  const auto before = b().describe_state();
  auto again = run(offsets(0, 100, false));
  EXPECT_EQ(again.replayed, 0u);
  EXPECT_EQ(count(again, outcome::in_flight), 3u);
  EXPECT_EQ(b().describe_state(), before);
  ASSERT_TRUE(ack(got[0], "g", "b").ok());
  ASSERT_TRUE(ack(got[1], "g", "b", R"({"ok":1})").ok());
  // k2 is committed now: only the keyless message would run again.
  auto after = run(offsets(0, 3));
  EXPECT_EQ(outcomes(after),
            (std::vector<outcome>{outcome::already_committed, outcome::would_deliver,
                                  outcome::already_committed}));
}

TEST_F(ReplayTest, ReplayOfPendingMessagesChangesNothing) {
  mixed_range();
  ASSERT_EQ(run(offsets(0, 100, false)).replayed, 2u);
  const auto before = b().describe_state();
  const auto deliveries = store_.count(storage::column::deliveries);
  auto again = run(offsets(0, 100, false));
  EXPECT_EQ(again.replayed, 0u);
  EXPECT_EQ(count(again, outcome::pending), 4u);
  EXPECT_EQ(b().describe_state(), before);
  EXPECT_EQ(store_.count(storage::column::deliveries), deliveries);
}

TEST_F(ReplayTest, AReplaySurvivesARestart) {
  mixed_range();
  ASSERT_EQ(run(offsets(0, 100, false)).replayed, 2u);
  restart();
  auto got = consume("t", "g", "b", 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].offset, 1u);
  EXPECT_EQ(got[1].offset, 2u);
  EXPECT_EQ(got[1].last_error, "replay");
}

TEST_F(ReplayTest, PagesCoverTheRangeOnceEachAndReplayPageByPage) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  create("t", 2, s);
  for (int i = 0; i < 7; ++i) {
    auto m = msg("v" + std::to_string(i));
    m.partition_override = i % 2;
    produce("t", m);
  }
  for (const auto& d : consume("t", "g", "a", 10)) ASSERT_TRUE(ack(d, "g", "a").ok());
  replay_cmd c;
  c.topic = "t";
  c.group = "g";
  c.from_ms = 0;
  c.to_ms = clock_.now_ms() + 1;
  c.dry_run = false;
  c.max_messages = 3;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> seen;
  std::uint64_t replayed = 0;
  for (int page = 0; page < 10; ++page) {
    auto r = run(c);
    EXPECT_LE(r.messages.size(), 3u);
    for (const auto& m : r.messages) seen.emplace_back(m.partition, m.offset);
    replayed += r.replayed;
    if (!r.next) break;
    c.cursor = r.next;
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::uint32_t, std::uint64_t>>{
                      {0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}}));
  EXPECT_EQ(replayed, 7u);
  EXPECT_EQ(consume("t", "g", "b", 100).size(), 7u);
}

TEST_F(ReplayTest, ATimeRangeTakesTheMessagesProducedInIt) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  create("t", 1, s);
  const millis t0 = clock_.now_ms();
  for (int i = 0; i < 5; ++i) {
    produce("t", "v" + std::to_string(i));
    clock_.advance(10 * k_second);
  }
  for (const auto& d : consume("t", "g", "a", 10)) ASSERT_TRUE(ack(d, "g", "a").ok());
  replay_cmd c;
  c.topic = "t";
  c.group = "g";
  c.from_ms = t0 + 10 * k_second;
  c.to_ms = t0 + 30 * k_second;  // the end is excluded
  auto r = run(c);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].offset, 1u);
  EXPECT_EQ(r.messages[1].offset, 2u);
  EXPECT_EQ(r.messages[0].produced_at_ms, t0 + 10 * k_second);
}

TEST_F(ReplayTest, WithoutAWindowAckedMessagesAreGoneAsToday) {
  create("t");
  produce("t", "v0");
  auto got = consume("t", "g", "a");
  ASSERT_TRUE(ack(got[0], "g", "a").ok());
  advance(2 * k_second);
  EXPECT_EQ(store_.count(storage::column::messages), 0u);
  auto r = run(offsets(0, 1, false));
  EXPECT_EQ(outcomes(r), std::vector<outcome>{outcome::gone});
  EXPECT_EQ(r.replayed, 0u);
}

TEST_F(ReplayTest, TheWindowKeepsAckedMessagesThenRetentionDeletesThem) {
  topic_settings s;
  s.replay_window_ms = 10 * k_second;
  create("t", 1, s);
  produce("t", "v0");
  produce("t", "v1");
  auto got = consume("t", "g", "a");
  ASSERT_TRUE(ack(got[0], "g", "a").ok());
  advance(5 * k_second);
  ASSERT_TRUE(ack(got[1], "g", "a").ok());
  advance(6 * k_second);  // 11 s after the first ack, 6 s after the second
  EXPECT_EQ(store_.count(storage::column::messages), 1u);
  EXPECT_EQ(outcomes(run(offsets(0, 2))),
            (std::vector<outcome>{outcome::gone, outcome::would_deliver}));
  advance(5 * k_second);
  EXPECT_EQ(store_.count(storage::column::messages), 0u);
  EXPECT_EQ(store_.count(storage::column::deliveries), 0u);
  EXPECT_EQ(outcomes(run(offsets(0, 2))), (std::vector<outcome>{outcome::gone, outcome::gone}));
}

TEST_F(ReplayTest, RetentionStillCapsTheAgeOfKeptMessages) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  s.retention_ms = 10 * k_second;
  create("t", 1, s);
  produce("t", "v0");
  ASSERT_TRUE(ack(consume("t", "g", "a").at(0), "g", "a").ok());
  advance(11 * k_second);
  EXPECT_EQ(store_.count(storage::column::messages), 0u);
}

TEST_F(ReplayTest, TheWindowKeepsAutoAckedAndDeadLetteredMessagesToo) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  s.max_attempts = 1;
  create("t", 1, s);
  produce("t", "v0", "k");
  produce("t", "v1", "k");
  produce("t", "v2", "other");
  auto got = consume("t", "g", "a", 1);
  ASSERT_TRUE(ack(got.at(0), "g", "a", R"({"n":1})").ok());
  got = consume("t", "g", "a");  // 1 is auto-acked, 2 leased
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(nack(got[0], "g", "a").ok());
  advance(5 * k_second);
  EXPECT_EQ(store_.count(storage::column::messages), 3u + 1u) << "the three and the DLQ copy";
  auto r = run(offsets(0, 3));
  EXPECT_EQ(outcomes(r),
            (std::vector<outcome>{outcome::already_committed, outcome::already_committed,
                                  outcome::dead_lettered}));
  EXPECT_EQ(r.messages[1].committed->result_json, R"({"n":1})");
}

TEST_F(ReplayTest, SupersededMessagesAreReportedAndLeftAlone) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  s.key_conflict = topic_settings::conflict::supersede;
  create("t", 1, s);
  produce("t", "old", "k");
  produce("t", "new", "k");
  auto got = consume("t", "g", "a");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "new");
  auto r = run(offsets(0, 2, false));
  EXPECT_EQ(outcomes(r), (std::vector<outcome>{outcome::superseded, outcome::in_flight}));
  EXPECT_EQ(r.replayed, 0u);
}

TEST_F(ReplayTest, AReplayIsInTheKeysHistory) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  s.key_history = true;
  create("t", 1, s);
  auto m = msg("v", "k");
  m.key_ttl_ms = k_second;
  produce("t", m);
  ASSERT_TRUE(ack(consume("t", "g", "a").at(0), "g", "a").ok());
  advance(2 * k_second);
  ASSERT_EQ(run(offsets(0, 1, false)).replayed, 1u);
  auto h = b().get_key_history(key_query{"t", "g", "k", ""});
  ASSERT_TRUE(h.ok()) << h.err().message;
  ASSERT_FALSE(h->events.empty());
  EXPECT_EQ(h->events.back().what, key_event::kind::replayed);
  EXPECT_EQ(h->events.back().offset, 0u);
}

TEST_F(ReplayTest, UnknownTopicOrGroupAndBadRangesAreRefused) {
  create("t", 2);
  produce("t", "v");
  consume("t", "g", "a");
  auto code = [&](replay_cmd c) { return b().replay(c).code(); };
  auto c = offsets(0, 1);
  c.topic = "nope";
  EXPECT_EQ(code(c), errc::not_found);
  c = offsets(0, 1);
  c.group = "nope";
  EXPECT_EQ(code(c), errc::not_found);
  EXPECT_EQ(code(offsets(3, 1)), errc::invalid_argument);
  c = offsets(0, 1);
  c.partition = 2;
  EXPECT_EQ(code(c), errc::invalid_argument);
  c = offsets(0, 1);
  c.partition.reset();
  EXPECT_EQ(code(c), errc::invalid_argument);
  c = offsets(0, 1);
  c.from_ms = 0;
  c.to_ms = 5;
  EXPECT_EQ(code(c), errc::invalid_argument) << "both forms";
  c = replay_cmd{};
  c.topic = "t";
  c.group = "g";
  EXPECT_EQ(code(c), errc::invalid_argument) << "no range";
  c.from_ms = 5;
  EXPECT_EQ(code(c), errc::invalid_argument) << "no to_ms";
  c = offsets(0, 1);
  c.max_messages = 0;
  EXPECT_EQ(code(c), errc::invalid_argument);
}

TEST_F(ReplayTest, TheWindowIsPartOfTheTopicsSettings) {
  topic_settings s;
  s.replay_window_ms = k_hour;
  create("t", 1, s);
  auto same = b().create_topic(create_topic_cmd{"t", 1, s});
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->created);
  s.replay_window_ms = 2 * k_hour;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"t", 1, s}).code(), errc::already_exists);
  s.replay_window_ms = -1;
  EXPECT_EQ(b().create_topic(create_topic_cmd{"u", 1, s}).code(), errc::invalid_argument);
  restart();
  EXPECT_EQ(b().get_topic("t")->settings.replay_window_ms, k_hour);
}

}  // namespace
}  // namespace onceq::testing
