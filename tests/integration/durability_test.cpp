// kill -9 under load: nothing answered is lost, nothing acked comes back,
// leases and attempt counts survive the restart.

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "test_support.hpp"

namespace onceq::itest {
namespace {

using position = std::pair<std::int64_t, std::int64_t>;  // (partition, offset)

position pos_of(const json& j) {
  return {j.at("partition").get<std::int64_t>(), j.at("offset").get<std::int64_t>()};
}

class durability : public onceq_test {};

TEST_F(durability, kill9_under_load_loses_nothing_answered) {
  constexpr int k_producers = 3;
  constexpr std::int64_t k_c1_lease_ms = 2000;
  create_topic("load", 4);
  create_topic("held", 1);
  auto held = produce("held", "leased-before-kill");
  // The group that checks the data after the restart exists (holds a lease)
  // before the load: a message acked by every group may be deleted.
  produce("load", "sentinel");
  ASSERT_EQ(consume("load", "verify", "v", 1, 60'000).size(), 1u);

  std::mutex mu;
  std::map<position, std::string> produced;  // answered produces
  std::set<position> acked;                  // answered acks
  std::set<position> delivered;              // everything handed to the consumer
  std::atomic<bool> stop{false};
  std::atomic<int> produce_errors{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < k_producers; ++t) {
    threads.emplace_back([&, t, p = port()] {
      http_client c(p, 5s);
      for (int i = 0; !stop.load(); ++i) {
        const std::string value = numbered("p", t) + numbered("-", i);
        try {
          http_response res;
          if (i % 10 == 9) {  // now and then a batch of 3
            json msgs = json::array();
            for (int j = 0; j < 3; ++j) msgs.push_back({{"value", value + numbered(".", j)}});
            res = c.post("/v1/produce", {{"topic", "load"}, {"messages", msgs}});
            if (res.status != 200) break;
            auto results = res.json().at("results");
            std::lock_guard lock(mu);
            for (int j = 0; j < 3; ++j) {
              produced[pos_of(results.at(j))] = value + numbered(".", j);
            }
          } else {
            res = c.post("/v1/produce", {{"topic", "load"}, {"key", value}, {"value", value}});
            if (res.status != 200) break;
            auto p = res.json();
            std::lock_guard lock(mu);
            produced[pos_of(p)] = value;
          }
        } catch (const std::exception&) {
          ++produce_errors;
          break;  // the server is gone
        }
      }
    });
  }
  threads.emplace_back([&, p = port()] {
    http_client c(p, 5s);
    while (!stop.load()) {
      try {
        auto res = c.post("/v1/consume", {{"topic", "load"},
                                          {"group", "g"},
                                          {"owner", "c1"},
                                          {"max_messages", 50},
                                          {"lease_ms", k_c1_lease_ms},
                                          {"wait_ms", 100}});
        if (res.status != 200) break;
        for (const auto& m : res.ndjson()) {
          {
            std::lock_guard lock(mu);
            delivered.insert(pos_of(m));
          }
          auto a = c.post("/v1/ack", delivery_body("load", "g", "c1", m));
          if (a.status != 204) break;
          std::lock_guard lock(mu);
          acked.insert(pos_of(m));
        }
      } catch (const std::exception&) {
        break;
      }
    }
  });

  std::this_thread::sleep_for(1500ms);
  // A delivery leased (not acked) right before the kill.
  auto leased = consume("held", "g", "holder", 1, 4000);
  ASSERT_EQ(leased.size(), 1u);
  const auto lease_deadline = leased[0].at("lease_expires_at_ms").get<std::int64_t>();
  std::this_thread::sleep_for(500ms);

  const auto kill_ms = now_ms();
  server_->kill9();  // mid-load
  stop = true;
  for (auto& th : threads) th.join();

  std::size_t n_produced = 0, n_acked = 0;
  {
    std::lock_guard lock(mu);
    n_produced = produced.size();
    n_acked = acked.size();
  }
  ASSERT_GT(n_produced, 100u) << "too little load to mean anything";
  ASSERT_GT(n_acked, 10u);
  EXPECT_GT(produce_errors.load(), 0) << "the kill should have interrupted producers";

  restart_server();

  // The delivery leased before the kill still belongs to holder.
  if (now_ms() < lease_deadline - 50) {
    EXPECT_TRUE(consume("held", "g", "other", 1).empty())
        << "delivered to another owner before the restored lease deadline";
  } else {
    ADD_FAILURE() << "restart took too long to check the restored lease";
  }

  // Every answered produce is there, with its value.
  auto all = drain("load", "verify", "v");
  std::map<position, std::string> stored;
  for (const auto& m : all) {
    EXPECT_TRUE(stored.emplace(pos_of(m), m.at("value").get<std::string>()).second)
        << "delivered twice to a new group: " << m.dump();
  }
  std::size_t missing = 0, wrong = 0;
  for (const auto& [p, v] : produced) {
    auto it = stored.find(p);
    if (it == stored.end()) {
      if (++missing <= 5) ADD_FAILURE() << "answered produce lost: " << p.first << "/" << p.second;
    } else if (it->second != v) {
      if (++wrong <= 5) ADD_FAILURE() << "value changed at " << p.first << "/" << p.second;
    }
  }
  EXPECT_EQ(missing, 0u);
  EXPECT_EQ(wrong, 0u);

  // The original group: once c1's leases from before the kill have run out,
  // no acked message comes back, and every answered produce is either
  // delivered again now or was handed to c1 before the kill (and its ack
  // may have been stored without an answer).
  while (now_ms() < kill_ms + k_c1_lease_ms + 100) std::this_thread::sleep_for(20ms);
  std::vector<json> rest;
  for (int round = 0; round < 100; ++round) {
    auto batch = consume("load", "g", "c2", 1000, 60'000, 300);
    if (batch.empty()) break;
    rest.insert(rest.end(), batch.begin(), batch.end());
  }
  std::set<position> redelivered;
  for (const auto& m : rest) redelivered.insert(pos_of(m));
  std::size_t resurrected = 0, unaccounted = 0;
  for (const auto& p : acked) {
    if (redelivered.count(p) != 0 && ++resurrected <= 5) {
      ADD_FAILURE() << "acked message delivered again: " << p.first << "/" << p.second;
    }
  }
  for (const auto& [p, v] : produced) {
    if (redelivered.count(p) == 0 && delivered.count(p) == 0 && ++unaccounted <= 5) {
      ADD_FAILURE() << "message neither acked nor delivered again to group g: " << p.first << "/"
                    << p.second;
    }
  }
  EXPECT_EQ(resurrected, 0u);
  EXPECT_EQ(unaccounted, 0u);
  std::cout << "[ durability ] answered produces " << n_produced << ", answered acks " << n_acked
            << ", stored after restart " << stored.size() << ", pending for g " << rest.size()
            << "\n";

  // The held delivery comes back after its deadline, with attempts + 1.
  std::vector<json> back;
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (back.empty() && std::chrono::steady_clock::now() < end) {
    back = consume("held", "g", "other", 1, std::nullopt, 500);
  }
  ASSERT_EQ(back.size(), 1u);
  EXPECT_GE(now_ms(), lease_deadline);
  EXPECT_EQ(back[0].at("offset"), held.at("offset"));
  EXPECT_EQ(back[0].at("attempts"), 2);
  EXPECT_EQ(back[0].at("last_error"), "lease_expired");
}

TEST_F(durability, keys_and_attempts_survive_kill9) {
  create_topic("k", 1);
  produce("k", "a", std::nullopt, json{{"idempotency_key", "K1"}});
  produce("k", "a-dup", std::nullopt, json{{"idempotency_key", "K1"}});
  produce("k", "b");
  auto msgs = consume("k", "g", "w", 10);
  ASSERT_EQ(msgs.size(), 2u);
  ASSERT_EQ(ack("k", "g", "w", msgs[0], json{{"done", 1}}).status, 204u);
  // Nack "b" (attempts 1, last_error "x") so that its next delivery is attempt 2.
  auto res = client().post(
      "/v1/nack", delivery_body("k", "g", "w", msgs[1], {{"reason", "x"}, {"delay_ms", 0}}));
  ASSERT_EQ(res.status, 204u) << res.body;

  // A produce with a dedup id, answered before the kill.
  res = client().post("/v1/produce", {{"topic", "k"}, {"value", "once"}},
                      {{"Idempotency-Key", "produce-1"}});
  ASSERT_EQ(res.status, 200u) << res.body;
  const auto once = res.json();

  server_->kill9();
  restart_server();

  // The dedup id survived: the retry is answered as a duplicate.
  res = client().post("/v1/produce", {{"topic", "k"}, {"value", "once"}},
                      {{"Idempotency-Key", "produce-1"}});
  ASSERT_EQ(res.status, 200u) << res.body;
  EXPECT_EQ(res.json().at("duplicate"), true);
  EXPECT_EQ(res.json().at("offset"), once.at("offset"));

  res = client().get("/v1/keys?topic=k&group=g&key=K1");
  ASSERT_EQ(res.status, 200u);
  EXPECT_EQ(res.json().at("state"), "committed");
  EXPECT_EQ(res.json().at("result"), json({{"done", 1}}));
  // The duplicate stays suppressed; "b" comes back as attempt 2.
  msgs = consume("k", "g", "w2", 10, std::nullopt, 300);
  ASSERT_EQ(msgs.size(), 2u);
  const json& b = msgs[0].at("value") == "b" ? msgs[0] : msgs[1];
  const json& once_msg = msgs[0].at("value") == "b" ? msgs[1] : msgs[0];
  EXPECT_EQ(b.at("value"), "b");
  EXPECT_EQ(b.at("attempts"), 2);
  EXPECT_EQ(b.at("last_error"), "x");
  EXPECT_EQ(once_msg.at("value"), "once");
  EXPECT_EQ(once_msg.at("attempts"), 1);
}

}  // namespace
}  // namespace onceq::itest
