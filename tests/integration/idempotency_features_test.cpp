// Fencing tokens, already_committed produces and key history against a
// real onceqd and RocksDB, across kill -9.

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class idempotency_features : public onceq_test {};

TEST_F(idempotency_features, tokens_commits_and_history_survive_kill9) {
  create_topic("pay", 1, {{"key_history", true}});
  produce("pay", "a", std::nullopt, json{{"idempotency_key", "k1"}});
  produce("pay", "b", std::nullopt, json{{"idempotency_key", "k2"}});
  auto d = consume("pay", "billing", "w1", 1, 30'000);
  ASSERT_EQ(d.size(), 1u);
  const auto t1 = d[0].at("fencing_token").get<std::int64_t>();
  EXPECT_GE(t1, 1);
  ASSERT_EQ(ack("pay", "billing", "w1", d[0], json{{"id", 7}}).status, 204u);

  server_->kill9();
  restart_server();

  // Tokens keep increasing after the restart.
  auto d2 = consume("pay", "billing", "w1", 1, 30'000);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_GT(d2[0].at("fencing_token").get<std::int64_t>(), t1);
  // A stale token is refused and changes nothing.
  json stale = {{"topic", "pay"}, {"group", "billing"},        {"owner", "w1"},
                {"partition", 0}, {"offset", d2[0]["offset"]}, {"fencing_token", t1}};
  EXPECT_TRUE(is_error(client().post("/v1/ack", stale), 409, "FAILED_PRECONDITION"));

  // The commit from before the crash answers a produce of the same work.
  auto res = client().post("/v1/produce", {{"topic", "pay"},
                                           {"value", "a again"},
                                           {"envelope", {{"idempotency_key", "k1"}}},
                                           {"skip_if_committed", {"billing"}}});
  ASSERT_EQ(res.status, 200u) << res.body;
  auto body = res.json();
  EXPECT_EQ(body["status"], "already_committed");
  EXPECT_EQ(body["committed"]["billing"]["result"], (json{{"id", 7}}));
  EXPECT_EQ(body["committed"]["billing"]["owner"], "w1");

  // The key's history was kept.
  auto h = client().get("/v1/keys/history?topic=pay&group=billing&key=k1");
  ASSERT_EQ(h.status, 200u) << h.body;
  auto events = h.json()["events"];
  ASSERT_GE(events.size(), 3u) << events.dump();
  EXPECT_EQ(events[0]["event"], "leased");
  EXPECT_EQ(events[0]["fencing_token"], t1);
  EXPECT_EQ(events[1]["event"], "committed");
  EXPECT_EQ(events[2]["event"], "produce_already_committed");
  auto k = client().get("/v1/keys?topic=pay&group=billing&key=k1");
  EXPECT_EQ(k.json()["fencing_token"], t1);
}

// Derived keys and content dedup read the message through the broker's
// message inspector, which onceqd gives each shard's broker: without it
// these produces would be 500 INTERNAL.
TEST_F(idempotency_features, derived_keys_and_content_dedup_read_the_message) {
  create_topic("orders", 1, {{"idempotency_key_fields", {"value.order"}}});
  create_topic("hashed", 1, {{"dedup_by_content", true}});
  produce("orders", R"({"order":"o-17"})");
  auto d = consume("orders", "billing", "w1", 1, 30'000);
  ASSERT_EQ(d.size(), 1u);
  ASSERT_EQ(ack("orders", "billing", "w1", d[0]).status, 204u);
  auto k = client().get("/v1/keys?topic=orders&group=billing&key=o-17");
  ASSERT_EQ(k.status, 200u) << k.body;
  EXPECT_EQ(k.json()["state"], "committed");

  auto first = produce("hashed", "same bytes");
  auto again = produce("hashed", "same bytes");
  EXPECT_EQ(first["duplicate"], false);
  EXPECT_EQ(again["duplicate"], true);
  EXPECT_EQ(again["offset"], first["offset"]);
}

TEST_F(idempotency_features, bad_settings_are_400_and_create_nothing) {
  for (const json& bad : {json{{"name", "x"}, {"key_conflict", "newest"}},
                          json{{"name", "x"}, {"idempotency_key_fields", {"value..a"}}},
                          json{{"name", "x"}, {"key_history", 1}}}) {
    EXPECT_TRUE(is_error(client().post("/v1/topics", bad), 400, "INVALID_ARGUMENT")) << bad.dump();
  }
  EXPECT_EQ(client().get("/v1/topics/x").status, 404u);
}

}  // namespace
}  // namespace onceq::itest
