// Consume modes: the NDJSON stream (no max_messages) and the long poll.

#include <future>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class consume_modes : public onceq_test {};

TEST_F(consume_modes, stream_delivers_as_messages_arrive) {
  create_topic("s", 1);
  produce("s", "one");
  produce("s", "two");

  ndjson_stream stream(port(), "GET", "/v1/consume?topic=s&group=g&owner=streamer&lease_ms=60000");
  ASSERT_EQ(stream.status(), 200u);
  EXPECT_NE(stream.head().header("Content-Type").find("application/x-ndjson"), std::string::npos);
  EXPECT_FALSE(stream.head().header("X-Request-Id").empty());

  auto first = stream.next(5s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->at("value"), "one");
  EXPECT_EQ(first->at("attempts"), 1);
  auto second = stream.next(5s);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->at("value"), "two");

  // A message produced while the stream is open arrives on it.
  const auto t0 = std::chrono::steady_clock::now();
  produce("s", "three");
  auto third = stream.next(5s);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->at("value"), "three");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  for (const char* field : {"topic", "partition", "offset", "attempts", "key", "value",
                            "last_error", "envelope", "lease_expires_at_ms"}) {
    EXPECT_TRUE(third->contains(field)) << field;
  }

  // Streamed messages are leased to the streamer: nobody else gets them, and
  // the streamer can ack them on another connection.
  EXPECT_TRUE(consume("s", "g", "other", 10).empty());
  EXPECT_EQ(ack("s", "g", "streamer", *first).status, 204u);

  // The stream also works as POST with a JSON body.
  ndjson_stream post_stream(port(), "POST", "/v1/consume",
                            json({{"topic", "s"}, {"group", "g2"}, {"owner", "p"}}).dump());
  ASSERT_EQ(post_stream.status(), 200u);
  auto m = post_stream.next(5s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->at("value"), "one");

  // Closing the streams leaves the server healthy.
  EXPECT_EQ(client().get("/v1/healthz").status, 200u);
}

TEST_F(consume_modes, closed_stream_takes_no_more_messages) {
  create_topic("sc", 1);
  {
    ndjson_stream stream(port(), "GET", "/v1/consume?topic=sc&group=g&owner=gone");
    ASSERT_EQ(stream.status(), 200u);
    EXPECT_FALSE(stream.next(100ms).has_value());
  }  // the consumer disconnects
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 3; ++i) produce("sc", numbered("after-close-", i));
  // The messages go to a live consumer, not to the stream that is gone
  // (whose leases would hold them for 30 s).
  std::vector<json> got;
  const auto end = std::chrono::steady_clock::now() + 2s;
  while (got.size() < 3 && std::chrono::steady_clock::now() < end) {
    auto batch = consume("sc", "g", "alive", 10, std::nullopt, 200);
    got.insert(got.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(got.size(), 3u) << "inflight after the stream closed: "
                            << topic_info("sc").at("groups").at("g").dump();
}

TEST_F(consume_modes, long_poll_returns_when_a_message_arrives) {
  create_topic("lp", 1);
  auto waiter =
      timed_post_async([p = port()] { return std::make_unique<http_client>(p); }, "/v1/consume",
                       consume_body("lp", "g", "w", 5, {{"wait_ms", 5000}}));
  std::this_thread::sleep_for(200ms);
  produce("lp", "hello");
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  auto [res, elapsed] = waiter.get();
  ASSERT_EQ(res.status, 200u) << res.body;
  auto msgs = res.ndjson();
  ASSERT_EQ(msgs.size(), 1u) << res.body;
  EXPECT_EQ(msgs[0].at("value"), "hello");
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 2500ms) << "the long poll did not wake up on produce";
}

TEST_F(consume_modes, long_poll_times_out_empty) {
  create_topic("empty", 1);
  auto res = client().post("/v1/consume", consume_body("empty", "g", "o", 1));
  ASSERT_EQ(res.status, 200u);
  EXPECT_TRUE(res.body.empty()) << res.body;

  const auto t0 = std::chrono::steady_clock::now();
  res = client().post("/v1/consume", consume_body("empty", "g", "o", 1, {{"wait_ms", 300}}));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(res.status, 200u);
  EXPECT_TRUE(res.body.empty()) << res.body;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 3s);
}

TEST_F(consume_modes, delayed_message_does_not_hold_back_its_partition) {
  create_topic("d", 1);
  const auto t0 = now_ms();
  auto delayed = produce("d", "later", std::nullopt, json{{"delay_ms", 400}});
  produce("d", "now");
  auto msgs = consume("d", "g", "o", 10);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].at("value"), "now");
  std::vector<json> later;
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (later.empty() && std::chrono::steady_clock::now() < end) {
    later = consume("d", "g", "o", 10, std::nullopt, 500);
  }
  ASSERT_EQ(later.size(), 1u);
  EXPECT_GE(now_ms(), t0 + 400);
  EXPECT_EQ(later[0].at("value"), "later");
  EXPECT_EQ(later[0].at("offset"), delayed.at("offset"));
  EXPECT_EQ(later[0].at("attempts"), 1);
}

TEST_F(consume_modes, retention_drops_old_messages) {
  create_topic("r", 1, {{"retention_ms", 300}});
  produce("r", "old");
  std::this_thread::sleep_for(450ms);
  produce("r", "new");
  auto msgs = consume("r", "g", "o", 10);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].at("value"), "new");
}

TEST_F(consume_modes, max_messages_caps_the_batch) {
  create_topic("cap", 1);
  for (int i = 0; i < 5; ++i) produce("cap", numbered("m", i));
  EXPECT_EQ(consume("cap", "g", "o", 2).size(), 2u);
  EXPECT_EQ(consume("cap", "g", "o", 2).size(), 2u);
  EXPECT_EQ(consume("cap", "g", "o", 2).size(), 1u);
  EXPECT_EQ(consume("cap", "g", "o", 2).size(), 0u);
}

}  // namespace
}  // namespace onceq::itest
