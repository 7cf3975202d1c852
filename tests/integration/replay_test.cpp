// POST /v1/replay against a real onceqd: the dry run's summary of a mixed
// range, the real replay handing back exactly the messages acked without a
// committed key, and both surviving kill -9 (also in the middle of a paged
// replay).

#include <set>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class replay : public onceq_test {
 protected:
  // Topic "r" (window 1 h, one attempt) with 100 keyed messages for group
  // "g": 0..49 acked with results (committed), 50..59 acked but their keys
  // expired since (1 s TTL), 60..69 nacked into dlq.r, 70..79 nacked and
  // waiting 10 min for their retry, 80..99 never delivered.
  void mixed_range() {
    create_topic("r", 1, {{"replay_window_ms", 3'600'000}, {"max_attempts", 1}});
    for (int i = 0; i < 100; ++i) {
      json env = {{"idempotency_key", numbered("k", i)}};
      if (i >= 50 && i < 60) env["key_ttl_ms"] = 1000;
      if (i >= 70 && i < 80) env["retry_policy"] = {{"max_attempts", 2}};
      produce("r", numbered("v", i), std::nullopt, env);
    }
    auto got = consume("r", "g", "w", 80, 60'000);
    ASSERT_EQ(got.size(), 80u);
    for (int i = 0; i < 60; ++i) ASSERT_EQ(ack("r", "g", "w", got[i], json{{"i", i}}).status, 204u);
    for (int i = 60; i < 80; ++i) {
      json nack = delivery_body("r", "g", "w", got[i], {{"reason", "bug"}});
      if (i >= 70) nack["delay_ms"] = 600'000;
      ASSERT_EQ(client().post("/v1/nack", nack).status, 204u);
    }
    std::this_thread::sleep_for(1500ms);  // the 1 s keys expire
  }

  json replay_page(bool dry_run, int max = 1000, json cursor = json()) {
    json body = {{"topic", "r"},     {"group", "g"},       {"partition", 0},     {"from_offset", 0},
                 {"to_offset", 100}, {"dry_run", dry_run}, {"max_messages", max}};
    if (cursor.is_string()) body["cursor"] = cursor;
    auto res = client().post("/v1/replay", body);
    EXPECT_EQ(res.status, 200u) << res.body;
    return res.status == 200 ? res.json() : json();
  }

  static json summary(int committed, int would, int pending, int in_flight = 0) {
    return {{"already_committed", committed},
            {"would_deliver", would},
            {"in_flight", in_flight},
            {"pending", pending},
            {"dead_lettered", 10},
            {"superseded", 0},
            {"gone", 0}};
  }

  // The offsets group g gets now (lease 60 s).
  std::set<std::int64_t> deliverable() {
    std::set<std::int64_t> out;
    for (const auto& m : consume("r", "g", "check", 1000, 60'000))
      out.insert(m.at("offset").get<std::int64_t>());
    return out;
  }

  static std::set<std::int64_t> replayed_and_fresh() {
    std::set<std::int64_t> want;
    for (int i = 50; i < 60; ++i) want.insert(i);
    for (int i = 80; i < 100; ++i) want.insert(i);
    return want;
  }
};

TEST_F(replay, dry_run_summary_matches_and_changes_nothing) {
  mixed_range();
  auto dry = replay_page(true);
  EXPECT_EQ(dry.at("summary"), summary(50, 10, 30));
  EXPECT_EQ(dry.at("replayed"), 0);
  EXPECT_TRUE(dry.at("next").is_null());
  const auto& first = dry.at("messages").at(0);
  EXPECT_EQ(first.at("outcome"), "already_committed");
  EXPECT_EQ(first.at("result"), json({{"i", 0}}));
  EXPECT_EQ(first.at("owner"), "w");
  // The same range by produce time.
  auto res = client().post(
      "/v1/replay", {{"topic", "r"}, {"group", "g"}, {"from_ms", 0}, {"to_ms", now_ms() + 1}});
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_EQ(res.json().at("summary"), summary(50, 10, 30));
  // Nothing became deliverable but the never-delivered ones.
  std::set<std::int64_t> fresh;
  for (int i = 80; i < 100; ++i) fresh.insert(i);
  EXPECT_EQ(deliverable(), fresh);
}

TEST_F(replay, replay_hands_back_only_the_uncommitted_and_survives_kill9) {
  mixed_range();
  auto done = replay_page(false);
  EXPECT_EQ(done.at("replayed"), 10);
  EXPECT_EQ(done.at("summary"), summary(50, 10, 30));
  server_->kill9();
  restart_server();
  // The same state after the kill: a second replay finds them pending.
  auto again = replay_page(false);
  EXPECT_EQ(again.at("replayed"), 0);
  EXPECT_EQ(again.at("summary"), summary(50, 0, 40));
  auto got = consume("r", "g", "check", 1000, 60'000);
  std::set<std::int64_t> offsets;
  for (const auto& m : got) {
    offsets.insert(m.at("offset").get<std::int64_t>());
    const auto off = m.at("offset").get<std::int64_t>();
    if (off < 60) {
      EXPECT_EQ(m.at("last_error"), "replay");
      EXPECT_EQ(m.at("attempts"), 1);
    }
  }
  EXPECT_EQ(offsets, replayed_and_fresh());
}

TEST_F(replay, a_paged_replay_killed_midway_completes_without_repeats) {
  mixed_range();
  auto first = replay_page(false, 55);  // offsets 0..54: replays 50..54
  EXPECT_EQ(first.at("replayed"), 5);
  ASSERT_TRUE(first.at("next").is_string());
  server_->kill9();
  restart_server();
  // Run again from the start: the first page replays nothing twice.
  int replayed = 0;
  json cursor;
  for (int page = 0; page < 5; ++page) {
    auto r = replay_page(false, 55, cursor);
    replayed += r.at("replayed").get<int>();
    cursor = r.at("next");
    if (cursor.is_null()) break;
  }
  EXPECT_EQ(replayed, 5);
  EXPECT_EQ(deliverable(), replayed_and_fresh());
}

TEST_F(replay, errors_in_the_apis_format) {
  create_topic("r");
  produce("r", "v");
  consume("r", "g", "w", 1);
  EXPECT_TRUE(
      is_error(client().post("/v1/replay",
                             {{"topic", "nope"}, {"group", "g"}, {"from_ms", 0}, {"to_ms", 1}}),
               404, "NOT_FOUND"));
  EXPECT_TRUE(
      is_error(client().post("/v1/replay",
                             {{"topic", "r"}, {"group", "nope"}, {"from_ms", 0}, {"to_ms", 1}}),
               404, "NOT_FOUND"));
  EXPECT_TRUE(is_error(
      client().post("/v1/replay", {{"topic", "r"}, {"group", "g"}, {"from_ms", 5}, {"to_ms", 1}}),
      400, "INVALID_ARGUMENT"));
}

}  // namespace
}  // namespace onceq::itest
