// Idempotency keys (consumer side) and produce dedup (producer side).

#include <future>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class idempotency : public onceq_test {
 protected:
  json get_key(const std::string& topic, const std::string& group, const std::string& key,
               const std::string& extra = {}) {
    auto res = client().get("/v1/keys?topic=" + url_encode(topic) + "&group=" + url_encode(group) +
                            "&key=" + url_encode(key) + extra);
    EXPECT_EQ(res.status, 200u) << res.body;
    return res.status == 200 ? res.json() : json();
  }
};

TEST_F(idempotency, committed_key_auto_acks_duplicates) {
  create_topic("pay", 1);
  // g2 exists before g acks (a message acked by every group may be deleted).
  ASSERT_TRUE(consume("pay", "g2", "x", 1).empty());
  auto first = produce("pay", "charge-1", std::nullopt, json{{"idempotency_key", "order-7"}});
  auto second =
      produce("pay", "charge-1-retry", std::nullopt, json{{"idempotency_key", "order-7"}});
  produce("pay", "other", std::nullopt, json{{"idempotency_key", "order-8"}});
  // Different offsets: these are two stored messages, not a produce dedup.
  EXPECT_NE(first.at("offset"), second.at("offset"));

  EXPECT_EQ(get_key("pay", "g", "order-7"), json({{"state", "none"}}));

  // The second message with the leased key is held back; the other key flows.
  auto msgs = consume("pay", "g", "worker-a", 10);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].at("value"), "charge-1");
  EXPECT_EQ(msgs[0].at("envelope").at("idempotency_key"), "order-7");
  EXPECT_EQ(msgs[1].at("value"), "other");
  EXPECT_TRUE(consume("pay", "g", "worker-b", 10).empty());

  auto leased = get_key("pay", "g", "order-7");
  EXPECT_EQ(leased.at("state"), "leased");
  EXPECT_EQ(leased.at("owner"), "worker-a");
  EXPECT_EQ(leased.at("partition"), 0);
  EXPECT_EQ(leased.at("offset"), first.at("offset"));
  EXPECT_EQ(leased.at("attempts"), 1);
  EXPECT_EQ(leased.at("lease_expires_at_ms"), msgs[0].at("lease_expires_at_ms"));

  const json result = {{"charge_id", "ch_123"}, {"amount", 42}, {"nested", {{"ok", true}}}};
  const auto before = now_ms();
  auto res = ack("pay", "g", "worker-a", msgs[0], result);
  ASSERT_EQ(res.status, 204u) << res.body;

  auto committed = get_key("pay", "g", "order-7");
  EXPECT_EQ(committed.at("state"), "committed");
  EXPECT_EQ(committed.at("result"), result);
  EXPECT_EQ(committed.at("offset"), first.at("offset"));
  const auto committed_at = committed.at("committed_at_ms").get<std::int64_t>();
  EXPECT_GE(committed_at, before - 5);
  EXPECT_LE(committed_at, now_ms() + 5);
  EXPECT_EQ(committed.at("expires_at_ms").get<std::int64_t>(), committed_at + 604'800'000);

  // The duplicate is auto-acknowledged: never delivered, in any later consume.
  EXPECT_TRUE(consume("pay", "g", "worker-b", 10).empty());
  produce("pay", "charge-1-third", std::nullopt, json{{"idempotency_key", "order-7"}});
  EXPECT_TRUE(consume("pay", "g", "worker-b", 10, std::nullopt, 200).empty());
  auto stats = topic_info("pay").at("groups").at("g");
  EXPECT_EQ(stats.at("acked"), 1);
  EXPECT_EQ(stats.at("auto_acked"), 2);
  EXPECT_EQ(stats.at("backlog"), 0);
  EXPECT_EQ(stats.at("inflight"), 1);  // "other"

  // A repeated ack with a different result does not replace the first one;
  // an ack of the auto-acked message by anyone fails.
  res = ack("pay", "g", "worker-a", msgs[0], json{{"charge_id", "ch_999"}});
  EXPECT_EQ(res.status, 204u) << res.body;
  EXPECT_EQ(get_key("pay", "g", "order-7").at("result"), result);
  res = ack("pay", "g", "worker-b", second);
  EXPECT_TRUE(is_error(res, 409, "FAILED_PRECONDITION"));

  // Keys are scoped by group (and tenant): another group processes order-7.
  auto other_group = consume("pay", "g2", "x", 10);
  ASSERT_FALSE(other_group.empty());
  EXPECT_EQ(other_group[0].at("value"), "charge-1");
  EXPECT_EQ(get_key("pay", "g2", "order-7").at("state"), "leased");
  EXPECT_EQ(get_key("pay", "g", "order-7", "&tenant_id=someone-else"), json({{"state", "none"}}));
}

TEST_F(idempotency, key_lookup_waits_for_the_commit) {
  create_topic("w", 1);
  produce("w", "job", std::nullopt, json{{"idempotency_key", "K"}, {"tenant_id", "t1"}});
  auto msgs = consume("w", "g", "worker", 1);
  ASSERT_EQ(msgs.size(), 1u);
  auto waiter = std::async(std::launch::async, [p = port()] {
    http_client c(p);
    const auto t0 = std::chrono::steady_clock::now();
    auto res = c.get("/v1/keys?topic=w&group=g&key=K&tenant_id=t1&wait_ms=5000");
    return std::make_pair(res, std::chrono::steady_clock::now() - t0);
  });
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(ack("w", "g", "worker", msgs[0], json{{"answer", 42}}).status, 204u);
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  auto [res, elapsed] = waiter.get();
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_EQ(res.json().at("state"), "committed");
  EXPECT_EQ(res.json().at("result"), json({{"answer", 42}}));
  EXPECT_LT(elapsed, 2500ms) << "GET /v1/keys?wait_ms did not wake up on the commit";
  // Without the tenant the key is another one.
  EXPECT_EQ(client().get("/v1/keys?topic=w&group=g&key=K").json(), json({{"state", "none"}}));
}

TEST_F(idempotency, produce_dedup_by_header_and_msg_id) {
  create_topic("dd", 2);
  const json body = {{"topic", "dd"}, {"key", "k"}, {"value", "v"}};
  auto r1 = client().post("/v1/produce", body, {{"Idempotency-Key", "req-1"}});
  ASSERT_EQ(r1.status, 200u) << r1.body;
  auto r2 = client().post("/v1/produce", body, {{"Idempotency-Key", "req-1"}});
  ASSERT_EQ(r2.status, 200u) << r2.body;
  EXPECT_EQ(r1.json().at("duplicate"), false);
  EXPECT_EQ(r2.json().at("duplicate"), true);
  EXPECT_EQ(r2.json().at("partition"), r1.json().at("partition"));
  EXPECT_EQ(r2.json().at("offset"), r1.json().at("offset"));

  auto m1 = produce("dd", "w", std::nullopt, json{{"msg_id", "m-1"}});
  auto m2 = produce("dd", "w", std::nullopt, json{{"msg_id", "m-1"}});
  EXPECT_EQ(m1.at("duplicate"), false);
  EXPECT_EQ(m2.at("duplicate"), true);
  EXPECT_EQ(m2.at("offset"), m1.at("offset"));
  EXPECT_EQ(m2.at("partition"), m1.at("partition"));

  // Exactly two messages are stored.
  EXPECT_EQ(drain("dd", "g", "o").size(), 2u);
  EXPECT_EQ(topic_info("dd").at("groups").at("g").at("inflight"), 2);
}

TEST_F(idempotency, dedup_window_does_not_slide) {
  create_topic("win", 1, {{"dedup_window_ms", 400}});
  const auto t0 = std::chrono::steady_clock::now();
  auto a = produce("win", "x", std::nullopt, json{{"msg_id", "same"}});
  ASSERT_EQ(a.at("duplicate"), false);
  auto b = produce("win", "x", std::nullopt, json{{"msg_id", "same"}});
  if (std::chrono::steady_clock::now() - t0 < 300ms) {
    EXPECT_EQ(b.at("duplicate"), true);
  }
  std::this_thread::sleep_until(t0 + 500ms);
  auto c = produce("win", "x", std::nullopt, json{{"msg_id", "same"}});
  EXPECT_EQ(c.at("duplicate"), false) << "the window must count from the first produce";
  EXPECT_NE(c.at("offset"), a.at("offset"));
}

}  // namespace
}  // namespace onceq::itest
