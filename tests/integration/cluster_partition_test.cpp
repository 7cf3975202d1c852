// A 3-node cluster (onceqd --cluster) in three network namespaces bridged
// to the test; one node is cut off from the other two (blackhole routes
// both ways), not from the test.
//
// The leader of the topic's shard: while cut off, writes sent to it get no
// 2xx; the other two elect a leader within seconds (measured) and take
// writes, applied by that leader; keys are committed there. After healing,
// every write answered 2xx (before, during, after) is consumed exactly
// once, the keys committed during the cut are committed once with their
// result, and later duplicates of those keys are auto-acked.
//
// A follower: it answers 503 with Retry-After while the other two go on,
// and catches up after healing; a request it forwarded to the leader just
// as the link went dark is answered within seconds too.
//
// Needs root and iproute2 (skipped otherwise).

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_api.hpp"
#include "cluster_fixture.hpp"
#include "cluster_netns.hpp"
#include "cluster_support.hpp"

namespace onceq::itest {
namespace {

constexpr std::string_view k_topic = "part";

class cluster_partition : public cluster_test {
 protected:
  cluster_partition() : cluster_test(k_topic) {}

  void SetUp() override {
    const std::string why = netns_lab::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    lab_ = std::make_unique<netns_lab>(3);
    local_cluster::options o;
    for (int i = 0; i < lab_->size(); ++i) {
      // Each node has its own namespace, hence its own ports.
      o.members.push_back({"n" + std::to_string(i + 1), lab_->address(i), 8080, 7000});
      o.command_prefixes.push_back(lab_->exec_prefix(i));
    }
    o.shards = 1;
    start_cluster(std::move(o), 7);
  }

  void TearDown() override {
    cluster_test::TearDown();  // the nodes die before their namespaces go
    lab_.reset();
  }

  // The leader of the topic's shard as every node of `nodes` reports it
  // (the same, and one of them), or "" while they disagree or know none.
  std::string agreed_leader(const std::vector<int>& nodes) {
    std::string leader;
    for (int i : nodes) {
      auto s = cluster_->status(static_cast<std::size_t>(i), 1s);
      const auto* sh = s ? s->shard_of_topic(k_topic) : nullptr;
      if (sh == nullptr || sh->leader.empty()) return {};
      if (!leader.empty() && sh->leader != leader) return {};
      leader = sh->leader;
    }
    for (int i : nodes) {
      if (cluster_->member(static_cast<std::size_t>(i)).id == leader) return leader;
    }
    return {};
  }

  // Consumes through `nodes` and acks each message (committing its key
  // with {"by": by, "id": value}), until `want` messages or `limit`, or
  // until drained (the group's backlog and inflight 0, three times in a
  // row) when want is 0. Counts deliveries per value in delivered_.
  std::vector<json> consume_and_ack(const std::vector<int>& nodes, const std::string& owner,
                                    const std::string& by, std::size_t want,
                                    std::chrono::seconds limit) {
    std::vector<json> acked;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int quiet = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (want > 0 && acked.size() >= want) break;
      auto r = api_->send_retry(nodes, "POST", "/v1/consume",
                                {{"topic", k_topic},
                                 {"group", k_group},
                                 {"owner", owner},
                                 {"max_messages", 10},
                                 {"wait_ms", 200},
                                 {"lease_ms", 10000}},
                                {}, 5s);
      if (!r) continue;
      EXPECT_EQ(r->status, 200u) << r->body;
      if (r->status != 200) continue;
      const auto msgs = r->ndjson();
      for (const auto& m : msgs) {
        const std::string value = m.at("value").get<std::string>();
        ++delivered_[value];
        const json result = {{"by", by}, {"id", value}};
        auto a =
            api_->send_retry(nodes, "POST", "/v1/ack",
                             cluster_api::ack_body(k_topic, k_group, owner, m, result), {}, 10s);
        EXPECT_TRUE(a.has_value()) << "ack of " << value << ": no answer";
        if (!a) continue;
        EXPECT_EQ(a->status, 204u) << "ack of " << value << ": " << a->body;
        if (a->status == 204) acked.push_back(m);
      }
      if (want == 0) {
        auto t =
            api_->send_retry(nodes, "GET", "/v1/topics/" + std::string(k_topic), nullptr, {}, 5s);
        bool empty = false;
        if (t && t->status == 200) {
          const auto j = t->json();
          if (j.at("groups").contains(k_group)) {
            const auto& g = j.at("groups").at(k_group);
            empty = g.at("backlog") == 0 && g.at("inflight") == 0;
          }
        }
        quiet = empty && msgs.empty() ? quiet + 1 : 0;
        if (quiet >= 3) break;
      }
    }
    return acked;
  }

  std::unique_ptr<netns_lab> lab_;
  std::map<std::string, int> delivered_;  // value (= dedup id) -> deliveries
};

TEST_F(cluster_partition, cut_off_leader_takes_no_writes_majority_elects_and_nothing_is_lost) {
  ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty()) << "no leader 30 s after the start";
  // The group exists before anything is acked (an acked message may go).
  ASSERT_TRUE(api_->create_topic(k_topic, k_group, {{"dedup_window_ms", 3'600'000}}));

  const std::string old_leader = cluster_->wait_for_leader(k_topic, 20s);
  ASSERT_FALSE(old_leader.empty());
  const int L = cluster_->index_of(old_leader);
  const std::vector<int> majority = api_->all_but(L);

  std::map<std::string, std::string> answered;  // dedup id -> key, every 2xx produce
  auto produce = [&](const std::vector<int>& nodes, const std::string& id,
                     const std::string& key) -> std::optional<http_response> {
    auto r =
        api_->send_retry(nodes, "POST", "/v1/produce", cluster_api::produce_body(k_topic, id, key),
                         cluster_api::produce_headers(id), 15s);
    if (r && r->status == 200) answered[id] = key;
    return r;
  };

  // Before.
  for (int i = 0; i < 10; ++i) {
    const std::string id = "before-" + std::to_string(i);
    auto r = produce(api_->all(), id, "k-" + id);
    ASSERT_TRUE(r && r->status == 200) << id << ": " << (r ? r->body : "no answer");
  }

  // Cut the leader off from the other two.
  const auto cut_at = std::chrono::steady_clock::now();
  lab_->isolate(L);
  std::cout << "partition: " << old_leader << " (" << lab_->address(L) << ") cut off from "
            << "the others\n";

  // Writes to the old leader, from their own thread: none may be 2xx.
  std::atomic<bool> stop_isolated{false};
  std::mutex isolated_mu;
  std::vector<std::string> isolated_answers;  // "503", "timeout", ...
  std::set<std::string> isolated_2xx;
  std::thread isolated([&] {
    cluster_api own(members(), 3s, 11);
    for (int i = 0; !stop_isolated.load() || i < 3; ++i) {
      const std::string id = "isolated-" + std::to_string(i);
      auto r = own.send(L, "POST", "/v1/produce", cluster_api::produce_body(k_topic, id, "k-" + id),
                        cluster_api::produce_headers(id));
      std::lock_guard lock(isolated_mu);
      isolated_answers.push_back(r ? std::to_string(r->status) : std::string("timeout"));
      if (r && r->status / 100 == 2) isolated_2xx.insert(id + ": " + r->body);
      if (r) std::this_thread::sleep_for(200ms);
    }
  });
  struct joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_isolated{stop_isolated, isolated};

  // The majority elects a leader of its own.
  std::string new_leader;
  while (ms_since(cut_at) < 20'000) {
    const std::string l = agreed_leader(majority);
    if (!l.empty() && l != old_leader) {
      new_leader = l;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  const long long election_ms = ms_since(cut_at);
  ASSERT_FALSE(new_leader.empty()) << "the majority elected no leader within 20 s of the cut";
  std::cout << "partition: " << new_leader << " leads the majority " << election_ms
            << " ms after the cut\n";
  RecordProperty("election_ms", std::to_string(election_ms));
  EXPECT_LT(election_ms, 10'000) << "the majority took over 10 s to elect a leader";

  // The majority takes writes, applied by its leader.
  for (int i = 0; i < 10; ++i) {
    const std::string id = "during-" + std::to_string(i);
    const std::vector<int> target = {majority[static_cast<std::size_t>(i) % majority.size()]};
    auto r = produce(target, id, "k-" + id);
    ASSERT_TRUE(r.has_value()) << id << ": no answer from the majority";
    EXPECT_EQ(r->status, 200u) << id << ": " << r->body;
    EXPECT_EQ(r->header("X-Onceq-Node"), new_leader) << id;
  }
  const long long majority_writes_ms = ms_since(cut_at);

  // Keys committed while the old leader is cut off.
  const auto committed_during = consume_and_ack(majority, "w-during", "during", 15, 20s);
  EXPECT_GE(committed_during.size(), 15u);

  stop_isolated = true;
  isolated.join();
  {
    std::lock_guard lock(isolated_mu);
    std::string list;
    for (const auto& a : isolated_answers) list += " " + a;
    std::cout << "partition: writes to the cut-off " << old_leader << " answered:" << list << "\n";
    EXPECT_TRUE(isolated_2xx.empty())
        << "the cut-off old leader answered 2xx: " << *isolated_2xx.begin();
  }
  auto old_view = cluster_->status(static_cast<std::size_t>(L), 2s);
  if (old_view && old_view->shard_of_topic(k_topic) != nullptr) {
    std::cout << "partition: " << old_leader << " itself says the leader is '"
              << old_view->shard_of_topic(k_topic)->leader << "'\n";
  }

  // Heal; the old leader rejoins.
  const auto healed_at = std::chrono::steady_clock::now();
  lab_->heal();
  std::string rejoined;
  while (ms_since(healed_at) < 30'000) {
    rejoined = agreed_leader(api_->all());
    if (!rejoined.empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(rejoined.empty()) << "the three nodes did not agree on a leader 30 s after healing";
  std::cout << "partition: healed; all three follow " << rejoined << " after "
            << ms_since(healed_at) << " ms\n";

  // After.
  for (int i = 0; i < 10; ++i) {
    const std::string id = "after-" + std::to_string(i);
    auto r = produce(api_->all(), id, "k-" + id);
    ASSERT_TRUE(r && r->status == 200) << id << ": " << (r ? r->body : "no answer");
  }
  // Duplicates of the keys committed during the cut: auto-acked, never
  // delivered.
  std::set<std::string> duplicates;
  for (const auto& m : committed_during) {
    const std::string key = m.at("envelope").at("idempotency_key").get<std::string>();
    const std::string id = "dup-of-" + key;
    auto r = api_->send_retry(api_->all(), "POST", "/v1/produce",
                              cluster_api::produce_body(k_topic, id, key),
                              cluster_api::produce_headers(id), 15s);
    ASSERT_TRUE(r.has_value()) << id;
    ASSERT_EQ(r->status, 200u) << id << ": " << r->body;
    duplicates.insert(id);
  }

  // Drain through every node.
  consume_and_ack(api_->all(), "w-after", "after", 0, 60s);

  // Every answered write consumed exactly once; duplicates never; nothing
  // more than once.
  for (const auto& [id, key] : answered) {
    EXPECT_EQ(delivered_[id], 1) << id << " (answered 2xx) delivered " << delivered_[id]
                                 << " times";
  }
  for (const auto& id : duplicates) {
    EXPECT_EQ(delivered_[id], 0) << id << " (a duplicate of a committed key) was delivered";
  }
  for (const auto& [id, n] : delivered_) EXPECT_LE(n, 1) << id << " delivered " << n << " times";

  // The keys committed during the cut: committed once, with their result,
  // the same from every node.
  for (const auto& m : committed_during) {
    const std::string key = m.at("envelope").at("idempotency_key").get<std::string>();
    for (int i : api_->all()) {
      auto r = api_->send_retry({i}, "GET",
                                "/v1/keys?topic=" + std::string(k_topic) +
                                    "&group=" + std::string(k_group) + "&key=" + key,
                                nullptr, {}, 10s);
      ASSERT_TRUE(r.has_value()) << key;
      ASSERT_EQ(r->status, 200u) << key << ": " << r->body;
      const auto j = r->json();
      EXPECT_EQ(j.at("state"), "committed") << key << " from node " << i << ": " << r->body;
      EXPECT_EQ(j.value("result", json()), json({{"by", "during"}, {"id", m.at("value")}}))
          << key << " from node " << i << ": " << r->body;
      EXPECT_EQ(j.value("offset", json()), m.at("offset")) << key << ": " << r->body;
      EXPECT_EQ(j.value("partition", json()), m.at("partition")) << key << ": " << r->body;
    }
  }
  auto t = api_->send_retry(api_->all(), "GET", "/v1/topics/" + std::string(k_topic));
  ASSERT_TRUE(t && t->status == 200);
  const auto g = t->json().at("groups").at(k_group);
  EXPECT_GE(g.at("auto_acked").get<std::uint64_t>(), duplicates.size()) << g.dump();
  EXPECT_EQ(g.at("backlog"), 0) << g.dump();
  EXPECT_EQ(g.at("inflight"), 0) << g.dump();

  std::cout << "partition: " << answered.size() << " writes answered 2xx, "
            << committed_during.size() << " keys committed during the cut, " << duplicates.size()
            << " duplicates auto-acked; election " << election_ms
            << " ms, 10 writes through the majority done " << majority_writes_ms
            << " ms after the cut\n";
}

// A follower cut off from the other two: the leader and the other follower
// go on taking writes; the cut-off follower, which cannot reach any leader,
// answers 503 with Retry-After; after healing it catches up and nothing is
// lost or doubled.
TEST_F(cluster_partition, cut_off_follower_answers_503_and_the_other_two_go_on) {
  ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty()) << "no leader 30 s after the start";
  ASSERT_TRUE(api_->create_topic(k_topic, {}, {{"dedup_window_ms", 3'600'000}}));
  const std::string leader = cluster_->wait_for_leader(k_topic, 20s);
  ASSERT_FALSE(leader.empty());
  const int L = cluster_->index_of(leader);
  const int F = (L + 1) % 3;
  const std::vector<int> others = api_->all_but(F);

  std::map<std::string, std::string> answered;
  auto produce = [&](const std::vector<int>& nodes, const std::string& id) {
    auto r = api_->send_retry(nodes, "POST", "/v1/produce",
                              cluster_api::produce_body(k_topic, id, "k-" + id),
                              cluster_api::produce_headers(id), 15s);
    if (r && r->status == 200) answered[id] = "k-" + id;
    return r;
  };
  for (int i = 0; i < 10; ++i) {
    auto r = produce(api_->all(), "before-" + std::to_string(i));
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  }

  lab_->isolate(F);
  std::cout << "partition: follower " << cluster_->member(static_cast<std::size_t>(F)).id
            << " cut off from the others\n";
  for (int i = 0; i < 30; ++i) {
    const std::string id = "during-" + std::to_string(i);
    auto r = produce(others, id);
    ASSERT_TRUE(r.has_value()) << id << ": no answer";
    ASSERT_EQ(r->status, 200u) << id << ": " << r->body;
    EXPECT_EQ(r->header("X-Onceq-Node"), leader) << id;
  }
  // Once it has noticed (no leader in its /v1/cluster, an election
  // timeout or two), asked, the cut-off follower says at once that it
  // cannot serve, and when to retry.
  std::vector<std::string> seen;
  const auto cut_at = std::chrono::steady_clock::now();
  bool noticed = false;
  while (!noticed && ms_since(cut_at) < 10'000) {
    auto v = cluster_->status(static_cast<std::size_t>(F), 1s);
    const auto* sh = v ? v->shard_of_topic(k_topic) : nullptr;
    noticed = sh != nullptr && sh->leader.empty();
    if (!noticed) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(noticed) << "the cut-off follower still names a leader 10 s after the cut";
  std::cout << "partition: the cut-off follower names no leader " << ms_since(cut_at)
            << " ms after the cut\n";
  for (int i = 0; i < 5; ++i) {
    const std::string id = "to-follower-" + std::to_string(i);
    const auto t = std::chrono::steady_clock::now();
    auto r = api_->send(F, "POST", "/v1/produce", cluster_api::produce_body(k_topic, id, "k-" + id),
                        cluster_api::produce_headers(id));
    seen.push_back((r ? std::to_string(r->status) : std::string("no answer")) + " in " +
                   std::to_string(ms_since(t)) + " ms");
    ASSERT_TRUE(r.has_value()) << "the cut-off follower did not answer within 3 s";
    EXPECT_EQ(r->status, 503u) << r->body;
    EXPECT_FALSE(r->header("Retry-After").empty()) << r->body;
    if (r->status == 200) answered[id] = "k-" + id;
    std::this_thread::sleep_for(200ms);
  }
  std::string list;
  for (const auto& x : seen) list += " [" + x + "]";
  std::cout << "partition: the cut-off follower answered:" << list << "\n";

  const auto healed_at = std::chrono::steady_clock::now();
  lab_->heal();
  auto lead = cluster_->status(static_cast<std::size_t>(L), 2s);
  ASSERT_TRUE(lead && lead->shard_of_topic(k_topic) != nullptr);
  const std::uint64_t target = lead->shard_of_topic(k_topic)->commit_index;
  std::uint64_t applied = 0;
  while (ms_since(healed_at) < 30'000 && applied < target) {
    auto f = cluster_->status(static_cast<std::size_t>(F), 1s);
    if (f && f->shard_of_topic(k_topic) != nullptr) {
      applied = f->shard_of_topic(k_topic)->applied_index;
    }
    if (applied < target) std::this_thread::sleep_for(100ms);
  }
  ASSERT_GE(applied, target) << "the follower did not catch up within 30 s of healing";
  std::cout << "partition: healed; the follower applied the leader's commit index " << target
            << " after " << ms_since(healed_at) << " ms\n";

  const auto delivered = drain_expecting_once(api_->all(), k_topic, k_group, answered);
  for (const auto& [id, n] : delivered) EXPECT_LE(n, 1) << id << " delivered " << n << " times";
}

// A request that a follower forwards to the leader just as the link between
// them goes dark: the follower must answer it (503, the leader being
// unreachable) within seconds, as it answers once it has noticed, not hold
// it for the forwarder's long-poll timeout.
TEST_F(cluster_partition,
       request_forwarded_as_the_leader_becomes_unreachable_is_answered_in_seconds) {
  ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty()) << "no leader 30 s after the start";
  auto created = api_->send_retry(api_->all(), "POST", "/v1/topics",
                                  {{"name", k_topic}, {"partitions", 2}}, {}, 30s);
  ASSERT_TRUE(created && (created->status == 201 || created->status == 200));
  const std::string leader = cluster_->wait_for_leader(k_topic, 20s);
  ASSERT_FALSE(leader.empty());
  const int F = (cluster_->index_of(leader) + 1) % 3;
  // Warm the follower's kept-alive connection to the leader.
  for (int i = 0; i < 3; ++i) {
    const std::string id = "warm-" + std::to_string(i);
    auto r = api_->send_retry({F}, "POST", "/v1/produce",
                              cluster_api::produce_body(k_topic, id, "k-" + id),
                              cluster_api::produce_headers(id), 10s);
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    EXPECT_EQ(r->header("X-Onceq-Node"), leader);
  }
  lab_->isolate(F);
  const auto cut_at = std::chrono::steady_clock::now();
  host_client c(cluster_->member(static_cast<std::size_t>(F)).host,
                cluster_->member(static_cast<std::size_t>(F)).http_port, 20s);
  std::optional<http_response> r;
  std::string error;
  try {
    r = c.post("/v1/produce", cluster_api::produce_body(k_topic, "cut", "k-cut"),
               cluster_api::produce_headers("cut"));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const long long took = ms_since(cut_at);
  std::cout << "partition: a request to " << cluster_->member(static_cast<std::size_t>(F)).id
            << " as it was cut off from the leader answered after " << took << " ms: "
            << (r ? std::to_string(r->status) + " " + r->body : "no answer (" + error + ")")
            << "\n";
  RecordProperty("forwarded_request_ms", std::to_string(took));
  ASSERT_TRUE(r.has_value()) << "no answer within 20 s (" << error << ")";
  EXPECT_LT(took, 10'000);
  EXPECT_NE(r->status / 100, 2u) << "the leader is unreachable: " << r->body;
}

}  // namespace
}  // namespace onceq::itest

namespace onceq::itest {
namespace {

constexpr std::string_view k_move_topic = "pmove";

// Four nodes, replicas = 3, one shard: a move of the shard to the fourth
// node is asked, and at once its leader is cut off from every other node.
// The cut-off leader is alone: no majority of the group, whatever point the
// move reached (3 members, or 4 with the target), so writes sent to it get
// no 2xx. The other side elects a leader, the move finishes there, and
// writes go on; after healing nothing answered is lost or doubled.
class cluster_partition_move : public cluster_test {
 protected:
  cluster_partition_move() : cluster_test(k_move_topic) {}

  void SetUp() override {
    const std::string why = netns_lab::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    lab_ = std::make_unique<netns_lab>(4);
    local_cluster::options o;
    for (int i = 0; i < lab_->size(); ++i) {
      o.members.push_back({"n" + std::to_string(i + 1), lab_->address(i), 8080, 7000});
      o.command_prefixes.push_back(lab_->exec_prefix(i));
    }
    o.shards = 1;
    o.file_head = "replicas = 3\ndead_after_ms = 0\n";
    start_cluster(std::move(o), 11);
  }

  void TearDown() override {
    cluster_test::TearDown();
    lab_.reset();
  }

  std::unique_ptr<netns_lab> lab_;
};

TEST_F(cluster_partition_move, the_side_without_a_majority_of_a_moving_shard_answers_no_2xx) {
  // Placed, led, and the topic there.
  std::optional<cluster_status> st;
  for (int attempt = 0; attempt < 300; ++attempt) {
    st = cluster_->status(static_cast<std::size_t>(attempt % 4), 1s);
    if (st && st->placed && st->shard(0) && st->shard(0)->replicas.size() == 3 &&
        !st->shard(0)->leader.empty())
      break;
    st.reset();
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(st) << "the shard was not placed and led within 30 s";
  ASSERT_TRUE(api_->create_topic(k_move_topic, k_group));
  std::map<std::string, bool> answered;
  auto produce = [&](const std::vector<int>& nodes, const std::string& id, auto limit) {
    auto r = api_->send_retry(nodes, "POST", "/v1/produce",
                              cluster_api::produce_body(k_move_topic, id, "k-" + id),
                              cluster_api::produce_headers(id), limit);
    if (r && r->status == 200) answered[id] = true;
    return r;
  };
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(produce(api_->all(), "before-" + std::to_string(i), 20s));

  st = cluster_->status(0, 2s);
  ASSERT_TRUE(st);
  const auto replicas = st->shard(0)->replicas;
  std::string spare;
  for (const auto& m : members()) {
    if (std::find(replicas.begin(), replicas.end(), m.id) == replicas.end()) spare = m.id;
  }
  const std::string leader = cluster_->leader_of(k_move_topic);
  const int L = cluster_->index_of(leader);
  ASSERT_GE(L, 0);
  std::string from;
  for (const auto& r : replicas) {
    if (r != leader) from = r;
  }
  ASSERT_FALSE(spare.empty());
  auto asked = api_->send_retry(api_->all(), "POST", "/v1/cluster/shards/0/move",
                                json{{"from", from}, {"to", spare}}, {}, 10s);
  ASSERT_TRUE(asked);
  ASSERT_EQ(asked->status, 202u) << asked->body;
  lab_->isolate(L);
  const auto cut_at = std::chrono::steady_clock::now();
  std::cout << "partition: move of shard 0 " << from << " -> " << spare << " asked; its leader "
            << leader << " cut off\n";

  // Writes sent to the cut-off leader: never a 2xx.
  std::set<unsigned> isolated_status;
  for (int i = 0; ms_since(cut_at) < 6'000; ++i) {
    auto r = api_->send(L, "POST", "/v1/produce",
                        cluster_api::produce_body(k_move_topic, "cut-" + std::to_string(i), "x"),
                        cluster_api::produce_headers("cut-" + std::to_string(i)));
    if (r) isolated_status.insert(r->status);
    EXPECT_FALSE(r && r->status >= 200 && r->status < 300)
        << "the cut-off leader answered " << r->status << ": " << r->body;
  }
  // The other side: the move finishes, the shard is led and takes writes.
  std::vector<int> majority;
  for (int i = 0; i < 4; ++i) {
    if (i != L) majority.push_back(i);
  }
  bool moved = false;
  while (!moved && ms_since(cut_at) < 60'000) {
    auto s = cluster_->status(static_cast<std::size_t>(majority.front()), 1s);
    const auto* sh = s ? s->shard(0) : nullptr;
    moved = sh != nullptr && sh->moving_to.empty() &&
            std::find(sh->replicas.begin(), sh->replicas.end(), spare) != sh->replicas.end() &&
            std::find(sh->replicas.begin(), sh->replicas.end(), from) == sh->replicas.end();
    if (!moved) std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(moved) << "the move did not finish on the majority side within 60 s";
  std::cout << "partition: the move had finished on the majority side when checked, "
            << ms_since(cut_at) << " ms after the cut\n";
  for (int i = 0; i < 20; ++i) {
    auto r = produce(majority, "during-" + std::to_string(i), 20s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
  }

  lab_->heal();
  for (int i = 0; i < 10; ++i) produce(api_->all(), "after-" + std::to_string(i), 20s);
  drain_expecting_once(api_->all(), k_move_topic, k_group, answered);
}

}  // namespace
}  // namespace onceq::itest
