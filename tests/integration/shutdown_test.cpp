// SIGTERM: a clean exit 0, promptly, even with open consumers; the data
// is there after a restart.

#include <future>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class shutdown : public onceq_test {};

TEST_F(shutdown, sigterm_exits_zero_and_restart_sees_the_data) {
  create_topic("keep", 2, {{"lease_ms", 300}, {"key_ttl_ms", 0}});
  create_topic("idle", 1);
  // "new" exists before g acks (a message acked by every group may be deleted).
  ASSERT_TRUE(consume("keep", "new", "n", 1).empty());
  auto a = produce("keep", "a", "ka", json{{"idempotency_key", "A"}});
  auto b = produce("keep", "b", "kb");
  auto msgs = consume("keep", "g", "w", 10);
  ASSERT_EQ(msgs.size(), 2u);
  const json& ma = msgs[0].at("value") == "a" ? msgs[0] : msgs[1];
  ASSERT_EQ(ack("keep", "g", "w", ma, json{{"r", 1}}).status, 204u);

  // An open stream and a pending long poll must not hold the shutdown up.
  ndjson_stream stream(port(), "GET", "/v1/consume?topic=keep&group=s&owner=s");
  ASSERT_EQ(stream.status(), 200u);
  auto waiter = std::async(std::launch::async, [p = port()] {
    http_client c(p, 30s);
    try {
      return c
          .post("/v1/consume", {{"topic", "idle"},
                                {"group", "g"},
                                {"owner", "waiter"},
                                {"max_messages", 1},
                                {"wait_ms", 60000},
                                {"lease_ms", 60000}})
          .status;
    } catch (const std::exception&) {
      return 0u;  // the connection closed: fine too
    }
  });
  std::this_thread::sleep_for(100ms);

  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server_->terminate(15s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ASSERT_EQ(waiter.wait_for(20s), std::future_status::ready);
  const unsigned waiter_status = waiter.get();
  EXPECT_TRUE(waiter_status == 0 || waiter_status == 200 || waiter_status == 503) << waiter_status;

  restart_server();
  EXPECT_EQ(client().get("/v1/topics").json(), json({{"topics", {"idle", "keep"}}}));
  auto info = topic_info("keep");
  EXPECT_EQ(info.at("partitions"), 2);
  EXPECT_EQ(info.at("settings").at("lease_ms"), 300);
  EXPECT_EQ(info.at("settings").at("key_ttl_ms"), 0);

  // Both messages are stored; a is acked for g, b comes back after its lease.
  auto fresh = drain("keep", "new", "n");
  EXPECT_EQ(fresh.size(), 2u);
  std::vector<json> back;
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < end) {
    auto got = consume("keep", "g", "w2", 10, std::nullopt, 300);
    back.insert(back.end(), got.begin(), got.end());
    if (!back.empty()) {
      // Nothing else should follow.
      auto more = consume("keep", "g", "w2", 10, std::nullopt, 200);
      back.insert(back.end(), more.begin(), more.end());
      break;
    }
  }
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].at("value"), "b");
  EXPECT_EQ(back[0].at("offset"), b.at("offset"));
  EXPECT_EQ(back[0].at("attempts"), 2);
  auto key = client().get("/v1/keys?topic=keep&group=g&key=A").json();
  EXPECT_EQ(key.at("state"), "committed");
  EXPECT_EQ(key.at("result"), json({{"r", 1}}));
  EXPECT_FALSE(key.contains("expires_at_ms") && key.at("expires_at_ms") != 0)
      << "key_ttl_ms 0 means forever: " << key.dump();
  (void)a;

  // And a second clean shutdown right away.
  EXPECT_EQ(server_->terminate(15s), 0);
}

}  // namespace
}  // namespace onceq::itest
