// Lease expiry, redelivery and the fencing of stale owners.

#include "test_support.hpp"

namespace onceq::itest {
namespace {

class lease : public onceq_test {
 protected:
  // Polls consume until a message arrives or the deadline passes.
  std::vector<json> poll(const std::string& topic, const std::string& group,
                         const std::string& owner, std::chrono::milliseconds deadline,
                         std::int64_t lease_ms = 30'000) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      auto msgs = consume(topic, group, owner, 10, lease_ms, 500);
      if (!msgs.empty()) return msgs;
    }
    return {};
  }
};

TEST_F(lease, expired_lease_redelivers_with_attempts_and_last_error) {
  create_topic("work", 1);
  auto produced = produce("work", "job", "k", json{{"idempotency_key", "job-1"}});
  const auto t0 = now_ms();
  auto first = consume("work", "g", "alice", 10, 300);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].at("attempts"), 1);
  const auto deadline = first[0].at("lease_expires_at_ms").get<std::int64_t>();
  EXPECT_GE(deadline, t0 + 300);
  EXPECT_LE(deadline, now_ms() + 300);

  // Not redelivered while the lease runs.
  EXPECT_TRUE(consume("work", "g", "bob", 10).empty());

  auto again = poll("work", "g", "bob", 3s);
  const auto got_at = now_ms();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_GE(got_at, deadline) << "redelivered before the lease deadline";
  EXPECT_EQ(again[0].at("offset"), produced.at("offset"));
  EXPECT_EQ(again[0].at("value"), "job");
  EXPECT_EQ(again[0].at("attempts"), 2);
  EXPECT_EQ(again[0].at("last_error"), "lease_expired");

  // alice lost the delivery to bob: her ack and extend are refused.
  EXPECT_TRUE(is_error(ack("work", "g", "alice", first[0]), 409, "FAILED_PRECONDITION"));
  auto res = client().post("/v1/extend",
                           delivery_body("work", "g", "alice", first[0], {{"lease_ms", 1000}}));
  EXPECT_TRUE(is_error(res, 409, "FAILED_PRECONDITION"));
  // bob holds it now; the key follows the delivery.
  res = client().get("/v1/keys?topic=work&group=g&key=job-1");
  ASSERT_EQ(res.status, 200u);
  EXPECT_EQ(res.json().at("state"), "leased");
  EXPECT_EQ(res.json().at("owner"), "bob");
  EXPECT_EQ(res.json().at("attempts"), 2);
  EXPECT_EQ(ack("work", "g", "bob", again[0]).status, 204u);
  auto stats = topic_info("work").at("groups").at("g");
  EXPECT_EQ(stats.at("redelivered"), 1);
  EXPECT_EQ(stats.at("acked"), 1);
  EXPECT_EQ(stats.at("inflight"), 0);
}

TEST_F(lease, late_ack_is_accepted_when_nobody_else_got_it) {
  create_topic("late", 1);
  produce("late", "x");
  auto msgs = consume("late", "g", "alice", 10, 200);
  ASSERT_EQ(msgs.size(), 1u);
  const auto deadline = msgs[0].at("lease_expires_at_ms").get<std::int64_t>();
  while (now_ms() <= deadline + 50) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ack("late", "g", "alice", msgs[0]).status, 204u);
  EXPECT_TRUE(consume("late", "g", "bob", 10, std::nullopt, 200).empty());
}

TEST_F(lease, extend_keeps_the_delivery) {
  create_topic("ext", 1);
  produce("ext", "x");
  auto msgs = consume("ext", "g", "alice", 10, 300);
  ASSERT_EQ(msgs.size(), 1u);
  auto res = client().post("/v1/extend",
                           delivery_body("ext", "g", "alice", msgs[0], {{"lease_ms", 5000}}));
  ASSERT_EQ(res.status, 200u) << res.body;
  const auto new_deadline = res.json().at("lease_expires_at_ms").get<std::int64_t>();
  EXPECT_GE(new_deadline, now_ms() + 4000);
  // Past the original 300 ms lease, nobody else gets it.
  EXPECT_TRUE(consume("ext", "g", "bob", 10, std::nullopt, 600).empty());
  EXPECT_EQ(ack("ext", "g", "alice", msgs[0]).status, 204u);
}

TEST_F(lease, nack_backs_off) {
  create_topic("bo", 1, {{"backoff_ms", 300}});
  produce("bo", "x");
  auto msgs = consume("bo", "g", "alice", 10);
  ASSERT_EQ(msgs.size(), 1u);
  json nack = delivery_body("bo", "g", "alice", msgs[0]);
  const auto t0 = now_ms();
  ASSERT_EQ(client().post("/v1/nack", nack).status, 204u);
  // Policy backoff: 300 * 2^(1-1) = 300 ms.
  auto again = poll("bo", "g", "bob", 3s);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_GE(now_ms(), t0 + 300) << "redelivered before the backoff";
  EXPECT_EQ(again[0].at("attempts"), 2);
  EXPECT_EQ(again[0].at("last_error"), "nack");  // the default reason

  // The nack's delay_ms overrides the policy (600 = 300 * 2^(2-1) would be the policy's).
  nack["owner"] = "bob";
  nack["delay_ms"] = 0;
  ASSERT_EQ(client().post("/v1/nack", nack).status, 204u);
  auto third = consume("bo", "g", "carol", 10, std::nullopt, 250);
  ASSERT_EQ(third.size(), 1u) << "nack delay_ms 0 should redeliver at once";
  EXPECT_EQ(third[0].at("attempts"), 3);
}

TEST_F(lease, nack_redelivers_with_reason_and_dead_letters_at_max_attempts) {
  create_topic("nk", 1, {{"max_attempts", 2}});
  auto produced = produce("nk", "poison");
  auto msgs = consume("nk", "g", "alice", 10);
  ASSERT_EQ(msgs.size(), 1u);
  json nack = delivery_body("nk", "g", "alice", msgs[0], {{"reason", "boom"}});
  auto res = client().post("/v1/nack", nack);
  ASSERT_EQ(res.status, 204u) << res.body;
  msgs = consume("nk", "g", "alice", 10, std::nullopt, 1000);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].at("attempts"), 2);
  EXPECT_EQ(msgs[0].at("last_error"), "boom");

  nack["reason"] = "boom again";
  res = client().post("/v1/nack", nack);
  ASSERT_EQ(res.status, 204u) << res.body;
  EXPECT_TRUE(consume("nk", "g", "alice", 10, std::nullopt, 200).empty());

  auto dead = consume("dlq.nk", "d", "inspector", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].at("value"), "poison");
  const auto& dlq = dead[0].at("envelope").at("dlq");
  EXPECT_EQ(dlq.at("original_topic"), "nk");
  EXPECT_EQ(dlq.at("original_partition"), 0);
  EXPECT_EQ(dlq.at("original_offset"), produced.at("offset"));
  EXPECT_EQ(dlq.at("attempts"), 2);
  EXPECT_EQ(dlq.at("last_error"), "boom again");
  EXPECT_TRUE(dlq.at("routed_at_ms").is_number_integer());
  EXPECT_EQ(topic_info("nk").at("groups").at("g").at("dead_lettered"), 1);

  res = client().post("/v1/dlq/redrive", {{"topic", "nk"}});
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_EQ(res.json().at("moved"), 1);
  msgs = consume("nk", "g", "alice", 10, std::nullopt, 1000);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].at("value"), "poison");
  EXPECT_EQ(msgs[0].at("attempts"), 1);
}

}  // namespace
}  // namespace onceq::itest
