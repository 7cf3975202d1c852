// Ordered delivery per key ("ordering":"key", docs/DESIGN.md "Ordering per
// key") seen over HTTP: within a group at most one message of a key is
// leased at a time, in offset order; a crashed consumer's lease, a nack and
// a dead-letter decide what comes next of the key; the held state survives
// kill -9 and a leader change; carried acks and long-polls respect it.

#include <algorithm>
#include <map>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

json ordered(json extra = json::object()) {
  extra["ordering"] = "key";
  return extra;
}

// The values of msgs, sorted (a consume's order across keys is not part of
// the promise).
std::vector<std::string> values(const std::vector<json>& msgs) {
  std::vector<std::string> out;
  for (const auto& m : msgs) out.push_back(m.at("value").get<std::string>());
  std::sort(out.begin(), out.end());
  return out;
}

class ordering : public onceq_test {
 protected:
  // Produces, for i in 0..per_key-1 and each key, a message "<key><i>"
  // with that key: the messages of one key in order, interleaved with the
  // other keys'. Returns each value's answer.
  std::map<std::string, json> fill(const std::string& topic, const std::vector<std::string>& keys,
                                   int per_key) {
    std::map<std::string, json> out;
    for (int i = 0; i < per_key; ++i) {
      for (const auto& k : keys) {
        const std::string v = numbered(k, i);
        out[v] = produce(topic, v, k);
      }
    }
    return out;
  }

  // Consumes (wait_ms 200 each) until n messages came or the deadline
  // passed; every message is leased for lease_ms.
  std::vector<json> collect(const std::string& topic, const std::string& owner, std::size_t n,
                            std::chrono::milliseconds deadline, std::int64_t lease_ms = 30'000) {
    std::vector<json> got;
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (got.size() < n && std::chrono::steady_clock::now() < end) {
      auto batch = consume(topic, "g", owner, 10, lease_ms, 200);
      got.insert(got.end(), batch.begin(), batch.end());
    }
    return got;
  }

  void ack_all(const std::string& topic, const std::string& owner, const std::vector<json>& msgs) {
    for (const auto& m : msgs) {
      EXPECT_EQ(ack(topic, "g", owner, m).status, 204u) << m.dump();
    }
  }
};

// A consumer takes the first message of every key and never acks (it
// crashed): nothing later of those keys is delivered while the leases run;
// after they lapse the SAME messages come again (attempts 2) before any
// later one of their keys.
TEST_F(ordering, crashed_consumer_lease_expiry_redelivers_the_same_message_first) {
  create_topic("ord", 1, ordered({{"lease_ms", 300}, {"backoff_ms", 0}}));
  auto produced = fill("ord", {"a", "b", "c"}, 3);

  auto first = consume("ord", "g", "crasher", 10, 300);
  ASSERT_EQ(values(first), (std::vector<std::string>{"a0", "b0", "c0"}));
  std::int64_t latest_deadline = 0;
  for (const auto& m : first) {
    latest_deadline = std::max(latest_deadline, m.at("lease_expires_at_ms").get<std::int64_t>());
  }
  // While the leases run, the keys' next messages wait (and nothing else is
  // there).
  EXPECT_TRUE(consume("ord", "g", "w", 10, 30'000, 150).empty());

  auto again = collect("ord", "w", 3, 4s);
  ASSERT_EQ(values(again), (std::vector<std::string>{"a0", "b0", "c0"}));
  for (const auto& m : again) {
    EXPECT_EQ(m.at("attempts"), 2) << m.dump();
    EXPECT_EQ(m.at("last_error"), "lease_expired") << m.dump();
    EXPECT_EQ(m.at("offset"), produced.at(m.at("value").get<std::string>()).at("offset"));
  }
  EXPECT_GE(now_ms(), latest_deadline - 5);
  // Still nothing of round 1 while the redeliveries are leased.
  EXPECT_TRUE(consume("ord", "g", "x", 10, 30'000, 150).empty());

  // The crashed owner's late acks are fenced: someone else has them now.
  EXPECT_TRUE(is_error(ack("ord", "g", "crasher", first[0]), 409, "FAILED_PRECONDITION"));

  ack_all("ord", "w", again);
  auto second = collect("ord", "w", 3, 3s);
  ASSERT_EQ(values(second), (std::vector<std::string>{"a1", "b1", "c1"}));
  for (const auto& m : second) EXPECT_EQ(m.at("attempts"), 1);
  // One key acked releases only that key.
  auto a1 = std::find_if(second.begin(), second.end(),
                         [](const json& m) { return m.at("value") == "a1"; });
  ASSERT_NE(a1, second.end());
  EXPECT_EQ(ack("ord", "g", "w", *a1).status, 204u);
  auto third = collect("ord", "w", 1, 2s);
  ASSERT_EQ(values(third), (std::vector<std::string>{"a2"}));
  EXPECT_TRUE(consume("ord", "g", "x", 10, 30'000, 150).empty());
}

// A nack puts the same message back (after the backoff); the next message
// of its key waits for it, other keys go on.
TEST_F(ordering, nack_redelivers_the_same_message_before_the_next_of_its_key) {
  create_topic("ord", 1, ordered({{"backoff_ms", 300}}));
  auto produced = fill("ord", {"a", "b"}, 2);
  auto first = consume("ord", "g", "alice", 10, 30'000);
  ASSERT_EQ(values(first), (std::vector<std::string>{"a0", "b0"}));
  const json& a0 = first[0].at("value") == "a0" ? first[0] : first[1];
  const json& b0 = first[0].at("value") == "a0" ? first[1] : first[0];

  ASSERT_EQ(client().post("/v1/nack", delivery_body("ord", "g", "alice", a0)).status, 204u);
  // During the backoff: not a1 (a0 still holds the key), not b1 (b0 leased).
  EXPECT_TRUE(consume("ord", "g", "bob", 10, 30'000, 150).empty());

  auto again = collect("ord", "bob", 1, 3s);
  ASSERT_EQ(values(again), (std::vector<std::string>{"a0"}));
  EXPECT_EQ(again[0].at("attempts"), 2);
  EXPECT_EQ(again[0].at("last_error"), "nack");
  EXPECT_EQ(again[0].at("offset"), produced.at("a0").at("offset"));

  // b's turn is independent of a's.
  EXPECT_EQ(ack("ord", "g", "alice", b0).status, 204u);
  auto b = collect("ord", "bob", 1, 2s);
  ASSERT_EQ(values(b), (std::vector<std::string>{"b1"}));
  EXPECT_TRUE(consume("ord", "g", "bob", 10, 30'000, 150).empty());

  // A nack with delay_ms 0 of the redelivery: a0 a third time, still first.
  ASSERT_EQ(client()
                .post("/v1/nack", delivery_body("ord", "g", "bob", again[0], {{"delay_ms", 0}}))
                .status,
            204u);
  auto third = collect("ord", "carol", 1, 2s);
  ASSERT_EQ(values(third), (std::vector<std::string>{"a0"}));
  EXPECT_EQ(third[0].at("attempts"), 3);
  ack_all("ord", "carol", third);
  auto a1 = collect("ord", "carol", 1, 2s);
  ASSERT_EQ(values(a1), (std::vector<std::string>{"a1"}));
}

// Dead-lettering the holder releases its key: the next message comes.
TEST_F(ordering, dead_lettering_releases_the_next_message_of_the_key) {
  create_topic("ord", 1, ordered({{"max_attempts", 1}}));
  auto produced = fill("ord", {"a", "b"}, 2);
  auto first = consume("ord", "g", "alice", 10, 30'000);
  ASSERT_EQ(values(first), (std::vector<std::string>{"a0", "b0"}));
  const json& a0 = first[0].at("value") == "a0" ? first[0] : first[1];

  auto res =
      client().post("/v1/nack", delivery_body("ord", "g", "alice", a0, {{"reason", "poison"}}));
  ASSERT_EQ(res.status, 204u) << res.body;
  auto next = collect("ord", "bob", 1, 3s);
  ASSERT_EQ(values(next), (std::vector<std::string>{"a1"}));
  EXPECT_EQ(next[0].at("attempts"), 1);
  // b1 still waits for b0.
  EXPECT_TRUE(consume("ord", "g", "bob", 10, 30'000, 150).empty());

  auto dead = consume("dlq.ord", "d", "inspector", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].at("value"), "a0");
  EXPECT_EQ(dead[0].at("envelope").at("dlq").at("original_offset"), produced.at("a0").at("offset"));
  EXPECT_EQ(topic_info("ord").at("groups").at("g").at("dead_lettered"), 1);
}

// kill -9 while keys are held: after the restart the next messages are
// still held back until their holders are acked (or lapse, are redelivered
// and acked).
TEST_F(ordering, kill9_keeps_the_next_message_of_a_held_key_waiting) {
  create_topic("ord", 1, ordered({{"backoff_ms", 0}}));
  auto produced = fill("ord", {"a", "b"}, 2);
  auto a = consume("ord", "g", "alice", 1, 60'000);
  ASSERT_EQ(values(a), (std::vector<std::string>{"a0"}));
  auto b = consume("ord", "g", "bob", 1, 1'500);
  ASSERT_EQ(values(b), (std::vector<std::string>{"b0"}));
  // Round 1 parked behind its holders before the kill.
  EXPECT_TRUE(consume("ord", "g", "x", 10, 30'000, 0).empty());

  server_->kill9();
  restart_server();

  // Whatever comes first after the restart is b0 again (its lease lapsed),
  // never a1 or b1.
  auto again = collect("ord", "carol", 1, 6s, 60'000);
  ASSERT_EQ(values(again), (std::vector<std::string>{"b0"}));
  EXPECT_EQ(again[0].at("attempts"), 2);
  EXPECT_EQ(again[0].at("offset"), produced.at("b0").at("offset"));
  EXPECT_TRUE(consume("ord", "g", "x", 10, 30'000, 200).empty());

  // The lapsed lease's owner lost it; carol's ack releases b1.
  EXPECT_TRUE(is_error(ack("ord", "g", "bob", b[0]), 409, "FAILED_PRECONDITION"));
  ASSERT_EQ(ack("ord", "g", "carol", again[0]).status, 204u);
  auto b1 = collect("ord", "x", 1, 2s);
  ASSERT_EQ(values(b1), (std::vector<std::string>{"b1"}));
  EXPECT_TRUE(consume("ord", "g", "x", 10, 30'000, 150).empty());

  // alice's lease survived the kill: her ack is accepted and releases a1.
  ASSERT_EQ(ack("ord", "g", "alice", a[0]).status, 204u);
  auto a1 = collect("ord", "x", 1, 2s);
  ASSERT_EQ(values(a1), (std::vector<std::string>{"a1"}));

  // And again across a second kill, with nothing leased but a1 and b1.
  server_->kill9();
  restart_server();
  EXPECT_TRUE(consume("ord", "g", "y", 10, 30'000, 200).empty());
}

// Acks carried on the next consume run first and release their keys for
// that very consume (or the one after); a long-poll that found every key
// held wakes when a holder is acked, and gets that key's next message.
TEST_F(ordering, carried_acks_and_long_polls_respect_the_order) {
  create_topic("ord", 1, ordered());
  auto produced = fill("ord", {"a", "b"}, 3);
  auto first = consume("ord", "g", "w", 10, 60'000);
  ASSERT_EQ(values(first), (std::vector<std::string>{"a0", "b0"}));
  const json a0 = first[0].at("value") == "a0" ? first[0] : first[1];
  const json b0 = first[0].at("value") == "a0" ? first[1] : first[0];

  // A long-poll meeting only held keys waits...
  auto waiter = timed_post_async(
      [p = port()] { return std::make_unique<http_client>(p); }, "/v1/consume",
      consume_body("ord", "g", "x", 10, {{"wait_ms", 5000}, {"lease_ms", 60'000}}));
  std::this_thread::sleep_for(400ms);
  // ...and wakes on a0's ack with a1 (only: b is still held).
  ASSERT_EQ(ack("ord", "g", "w", a0).status, 204u);
  auto [res, took] = waiter.get();
  ASSERT_EQ(res.status, 200u) << res.body;
  auto woke = res.ndjson();
  ASSERT_EQ(values(woke), (std::vector<std::string>{"a1"}));
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 3s) << "the long-poll did not wake on the holder's ack";

  // A consume carrying b0's ack: b1 comes (a2 does not, a1 is leased).
  json body = consume_body("ord", "g", "w", 10, {{"wait_ms", 1000}, {"lease_ms", 60'000}});
  body["acks"] = json::array({{{"partition", b0.at("partition")}, {"offset", b0.at("offset")}}});
  res = client().post("/v1/consume", body);
  ASSERT_EQ(res.status, 200u) << res.body;
  auto lines = res.ndjson();
  ASSERT_FALSE(lines.empty());
  ASSERT_TRUE(lines[0].contains("acks")) << lines[0].dump();
  EXPECT_EQ(lines[0].at("acks").at(0).at("status"), "acked") << lines[0].dump();
  std::vector<json> got(lines.begin() + 1, lines.end());
  if (got.empty()) got = collect("ord", "w", 1, 2s, 60'000);
  ASSERT_EQ(values(got), (std::vector<std::string>{"b1"}));
  const json b1 = got[0];

  // A consume carrying an ack refused by the fence (b1, by someone who does
  // not hold it) releases nothing.
  body = consume_body("ord", "g", "y", 10, {{"wait_ms", 200}, {"lease_ms", 60'000}});
  body["acks"] = json::array({{{"partition", b1.at("partition")}, {"offset", b1.at("offset")}}});
  res = client().post("/v1/consume", body);
  ASSERT_EQ(res.status, 200u) << res.body;
  lines = res.ndjson();
  ASSERT_EQ(lines.size(), 1u) << res.body;
  EXPECT_EQ(lines[0].at("acks").at(0).at("status"), "error") << lines[0].dump();

  // x acks a1 on its next consume: a2 follows, b2 still waits for b1.
  body = consume_body("ord", "g", "x", 10, {{"wait_ms", 1000}, {"lease_ms", 60'000}});
  body["acks"] =
      json::array({{{"partition", woke[0].at("partition")}, {"offset", woke[0].at("offset")}}});
  res = client().post("/v1/consume", body);
  ASSERT_EQ(res.status, 200u) << res.body;
  lines = res.ndjson();
  ASSERT_FALSE(lines.empty());
  got.assign(lines.begin() + 1, lines.end());
  if (got.empty()) got = collect("ord", "x", 1, 2s, 60'000);
  ASSERT_EQ(values(got), (std::vector<std::string>{"a2"}));
  EXPECT_TRUE(consume("ord", "g", "z", 10, 60'000, 150).empty());
}

// Consumes and acks through whichever node answers, retrying on 503 and on
// no answer (a leader change under way).
class cluster_ordering : public ::testing::Test {
 protected:
  void SetUp() override {
#if !ONCEQ_IT_HAS_CLUSTER
    GTEST_SKIP() << "built without clustering";
#else
    local_cluster::options o;
    o.members = free_loopback_members(3, static_cast<std::uint64_t>(::getpid()) + 7);
    o.extra_args = {"--leader-grace-ms", "0"};
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    ASSERT_FALSE(cluster_->wait_for_leader({}, 30s).empty()) << cluster_->log_tails();
#endif
  }

  // POST to a live node other than `avoid` until an answer that is not 503
  // (or 15 s passed).
  http_response post(const std::string& target, const json& body) {
    const auto end = std::chrono::steady_clock::now() + 15s;
    http_response last;
    while (std::chrono::steady_clock::now() < end) {
      for (std::size_t i = 0; i < cluster_->size(); ++i) {
        if (!cluster_->alive(i)) continue;
        auto r = cluster_->request(i, "POST", target, body.dump());
        if (r && r->status != 503) return *r;
        if (r) last = *r;
      }
      std::this_thread::sleep_for(100ms);
    }
    return last;
  }

  std::vector<json> consume(const std::string& owner, std::int64_t wait_ms) {
    auto r = post("/v1/consume", consume_body("ord", "g", owner, 10,
                                              {{"wait_ms", wait_ms}, {"lease_ms", 60'000}}));
    EXPECT_EQ(r.status, 200u) << r.body;
    return r.status == 200 ? r.ndjson() : std::vector<json>{};
  }

  std::unique_ptr<local_cluster> cluster_;
};

TEST_F(cluster_ordering, leader_change_keeps_the_next_message_waiting) {
  auto r = post("/v1/topics", {{"name", "ord"}, {"partitions", 1}, {"ordering", "key"}});
  ASSERT_EQ(r.status, 201u) << r.body;
  for (int i = 0; i < 3; ++i) {
    for (const char* k : {"a", "b"}) {
      r = post("/v1/produce", {{"topic", "ord"}, {"key", k}, {"value", numbered(k, i)}});
      ASSERT_EQ(r.status, 200u) << r.body;
    }
  }
  auto first = consume("w", 0);
  ASSERT_EQ(values(first), (std::vector<std::string>{"a0", "b0"}));
  const json a0 = first[0].at("value") == "a0" ? first[0] : first[1];
  const json b0 = first[0].at("value") == "a0" ? first[1] : first[0];
  r = post("/v1/ack", delivery_body("ord", "g", "w", b0));
  ASSERT_EQ(r.status, 204u) << r.body;
  auto b1 = consume("w", 0);
  ASSERT_EQ(values(b1), (std::vector<std::string>{"b1"}));

  const std::string old_leader = cluster_->leader_of("ord");
  ASSERT_FALSE(old_leader.empty());
  const int li = cluster_->index_of(old_leader);
  ASSERT_GE(li, 0);
  cluster_->kill9(static_cast<std::size_t>(li));
  std::string new_leader;
  const auto end = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < end &&
         (new_leader.empty() || new_leader == old_leader)) {
    new_leader = cluster_->leader_of("ord");
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(new_leader.empty());
  ASSERT_NE(new_leader, old_leader) << cluster_->log_tails();

  // The new leader holds a1 and b2 back: a0 and b1 are leased.
  EXPECT_TRUE(consume("x", 300).empty());
  r = post("/v1/ack", delivery_body("ord", "g", "w", a0));
  ASSERT_EQ(r.status, 204u) << r.body;
  auto a1 = consume("x", 1000);
  ASSERT_EQ(values(a1), (std::vector<std::string>{"a1"}));

  // The old leader back as a follower: still in order.
  cluster_->restart(static_cast<std::size_t>(li));
  EXPECT_TRUE(consume("y", 300).empty());
  r = post("/v1/ack", delivery_body("ord", "g", "w", b1[0]));
  ASSERT_EQ(r.status, 204u) << r.body;
  auto b2 = consume("y", 1000);
  ASSERT_EQ(values(b2), (std::vector<std::string>{"b2"}));
}

}  // namespace
}  // namespace onceq::itest
