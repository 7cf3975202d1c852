// Placement on a real cluster (docs/REPLICATION.md, "Placement"): six nodes
// listed with `replicas = 3`, five started, `--shards 6`, on 127.0.0.1.
// - The first placement puts 3 replicas of every shard on the five started
//   nodes, each holding 3 or 4, the sixth none; the preferred leaders are
//   spread too; a node that holds no replica of a shard forwards to it.
// - Under a steady load of produces (each with its own Idempotency-Key):
//   kill -9 of a node, and writes to every shard resume within 5 s; the
//   node comes back; `onceq cluster drain` moves every replica off a node
//   (it ends `drained`, holding nothing, as `onceq cluster status` says),
//   and it is stopped; the sixth node starts and `onceq cluster rebalance`
//   fills it to within one of the others.
// - Then every answered produce is consumed exactly once per key, and no
//   key is committed twice.

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_api.hpp"
#include "cluster_support.hpp"

namespace onceq::itest {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr int k_listed = 6;
constexpr int k_started = 5;
constexpr int k_shards = 6;
constexpr std::string_view k_group = "g";

// `onceq --url <node> args...`, stderr into the output.
cli_run run_cli(std::uint16_t port, const std::string& args) {
  return itest::run_cli(ONCEQ_CLI_PATH, port, args);
}

class cluster_placement : public ::testing::Test {
 protected:
  void SetUp() override { start(k_listed, k_started, k_listed, k_shards); }

  // `members` nodes n1.., the first `in_file` in the cluster file, the
  // first `started` started; replicas = 3, dead_after_ms = 0.
  void start(int members, int started, int in_file, int shards,
             const std::string& head = "replicas = 3\ndead_after_ms = 0\n") {
    ::signal(SIGPIPE, SIG_IGN);
    local_cluster::options o;
    o.members = free_loopback_members(members, 3131);
    o.shards = shards;
    o.start_count = static_cast<std::size_t>(started);
    o.file_count = static_cast<std::size_t>(in_file);
    o.file_head = head;
    o.extra_args = {"--election-timeout-ms", "500"};
    members_ = o.members;
    shards_ = shards;
    cluster_ = std::make_unique<local_cluster>(std::move(o));
    api_ = std::make_unique<cluster_api>(members_, 5s, 7);
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << cluster_->log_tails() << "\n";
      cluster_->keep_root();
    }
  }

  // GET /v1/cluster from the first live node that answers.
  std::optional<cluster_status> status_any() {
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->alive(i)) continue;
      if (auto s = cluster_->status(i)) return s;
    }
    return std::nullopt;
  }

  // Polls until pred(status) holds (on any live node) or limit passes.
  template <class Pred>
  std::optional<cluster_status> wait_status(Pred pred, std::chrono::milliseconds limit) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<cluster_status> last;
    while (std::chrono::steady_clock::now() - start < limit) {
      last = status_any();
      if (last && pred(*last)) return last;
      std::this_thread::sleep_for(200ms);
    }
    return std::nullopt;
  }

  static bool settled(const cluster_status& s) {
    if (!s.placed) return false;
    for (const auto& sh : s.shards) {
      if (sh.replicas.size() != 3 || !sh.moving_to.empty() || sh.leader.empty()) return false;
    }
    return true;
  }

  static std::map<std::string, int> counts(const cluster_status& s) {
    std::map<std::string, int> out;
    for (const auto& sh : s.shards) {
      for (const auto& r : sh.replicas) ++out[r];
    }
    return out;
  }

  // Live member indexes.
  std::vector<int> live() {
    std::vector<int> out;
    for (std::size_t i = 0; i < cluster_->size(); ++i) {
      if (cluster_->alive(i)) out.push_back(static_cast<int>(i));
    }
    return out;
  }

  // One topic per shard, created through any node.
  void make_topics() {
    std::set<unsigned> covered;
    const auto want = static_cast<std::size_t>(shards_);
    for (int t = 0; t < 64 && covered.size() < want; ++t) {
      const std::string name = "pl" + std::to_string(t);
      ASSERT_TRUE(api_->create_topic(name, k_group));
      // Listed by the nodes holding a replica of its shard.
      std::optional<unsigned> shard;
      for (int attempt = 0; attempt < 50 && !shard; ++attempt) {
        for (std::size_t i = 0; i < cluster_->size() && !shard; ++i) {
          if (!cluster_->alive(i)) continue;
          auto st = cluster_->status(i);
          if (st && st->shard_of_topic(name) != nullptr) shard = st->shard_of_topic(name)->shard;
        }
        if (!shard) std::this_thread::sleep_for(200ms);
      }
      ASSERT_TRUE(shard) << "topic " << name << " not listed";
      if (covered.insert(*shard).second) topics_.push_back(name);
    }
    ASSERT_EQ(covered.size(), want);
  }

  std::vector<cluster_member> members_;
  int shards_ = k_shards;
  std::unique_ptr<local_cluster> cluster_;
  std::unique_ptr<cluster_api> api_;
  std::vector<std::string> topics_;
};

TEST_F(cluster_placement, five_of_six_nodes_hold_three_replicas_of_each_shard_spread_within_one) {
  auto s = wait_status(settled, 60s);
  ASSERT_TRUE(s) << "the placement did not settle";
  const auto c = counts(*s);
  EXPECT_EQ(c.count("n6"), 0u) << "a node not started gets nothing";
  int lo = 100, hi = 0;
  for (int i = 1; i <= k_started; ++i) {
    const int n = c.count("n" + std::to_string(i)) ? c.at("n" + std::to_string(i)) : 0;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  EXPECT_LE(hi - lo, 1) << "replicas per node differ by more than one";
  std::map<std::string, int> preferred;
  for (const auto& sh : s->shards) {
    std::set<std::string> distinct(sh.replicas.begin(), sh.replicas.end());
    EXPECT_EQ(distinct.size(), 3u) << "shard " << sh.shard << " has two replicas on one node";
    ++preferred[sh.replicas.front()];
  }
  for (const auto& [node, n] : preferred) EXPECT_LE(n, 2) << node << " prefers " << n;
  const auto* n6 = s->node_status("n6");
  ASSERT_NE(n6, nullptr);
  EXPECT_EQ(n6->state, "down");

  // Bad placement requests get a clear error and change nothing.
  auto code = [&](const std::string& target, const std::string& body) {
    auto r = api_->send_retry({0, 1, 2, 3, 4}, "POST", target,
                              body.empty() ? json(nullptr) : json::parse(body));
    return r ? static_cast<int>(r->status) : -1;
  };
  EXPECT_EQ(code("/v1/cluster/shards/x/move", R"({"from":"n1","to":"n6"})"), 400);
  EXPECT_EQ(code("/v1/cluster/shards/0/move", R"({"from":"n1"})"), 400);
  EXPECT_EQ(code("/v1/cluster/shards/0/move", R"({"from":"n1","to":"n6","x":1})"), 400);
  EXPECT_EQ(code("/v1/cluster/shards/9/move", R"({"from":"n1","to":"n6"})"), 404);
  EXPECT_EQ(code("/v1/cluster/shards/0/move", R"({"from":"n1","to":"n9"})"), 404);
  EXPECT_EQ(code("/v1/cluster/nodes/n9/drain", ""), 404);
  {
    // From a node that does not hold shard 0 to one that does: refused.
    const auto& r0 = s->shard(0)->replicas;
    std::string outside;
    for (int i = 1; i <= k_started; ++i) {
      const std::string id = "n" + std::to_string(i);
      if (std::find(r0.begin(), r0.end(), id) == r0.end()) outside = id;
    }
    ASSERT_FALSE(outside.empty());
    EXPECT_EQ(code("/v1/cluster/shards/0/move", json{{"from", outside}, {"to", r0.front()}}.dump()),
              409);
    // To a node that is down (never started): refused.
    EXPECT_EQ(code("/v1/cluster/shards/0/move", json{{"from", r0.front()}, {"to", "n6"}}.dump()),
              409);
  }
  auto unchanged = status_any();
  ASSERT_TRUE(unchanged);
  EXPECT_EQ(unchanged->moves_started, 0u) << "a refused request started a move";

  // Every node serves every shard: a node without a replica forwards.
  make_topics();
  // Lists over every shard too: each node lists every topic, and its
  // /metrics answers (with the shards it holds).
  for (int node = 0; node < k_started; ++node) {
    auto r = api_->send_retry({node}, "GET", "/v1/topics", nullptr, {}, 20s);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << "n" << node + 1 << ": " << r->body;
    const auto listed = r->json().at("topics");
    for (const auto& t : topics_) {
      EXPECT_NE(std::find(listed.begin(), listed.end(), t), listed.end())
          << "n" << node + 1 << " does not list " << t;
    }
    auto m = api_->send(node, "GET", "/metrics");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 200) << "n" << node + 1 << ": " << m->body;
    EXPECT_NE(m->body.find("onceq_cluster_moves_started_total"), std::string::npos);
  }
  for (int node = 0; node < k_started; ++node) {
    for (const auto& t : topics_) {
      const std::string id = "fwd-" + std::to_string(node) + "-" + t;
      auto r = api_->send_retry({node}, "POST", "/v1/produce", cluster_api::produce_body(t, id, id),
                                cluster_api::produce_headers(id), 20s);
      ASSERT_TRUE(r) << "no answer from n" << node + 1 << " for " << t;
      EXPECT_EQ(r->status, 200) << "n" << node + 1 << " " << t << ": " << r->body;
    }
  }
}

TEST_F(cluster_placement,
       kill_drain_and_rebalance_under_load_lose_nothing_and_commit_no_key_twice) {
  ASSERT_TRUE(wait_status(settled, 60s)) << "the placement did not settle";
  make_topics();
  ASSERT_EQ(topics_.size(), static_cast<std::size_t>(k_shards));

  // The load: one producer thread over the live nodes, every shard in
  // turn; `answered` holds every id a 200 answered.
  std::mutex mu;
  std::set<std::string> answered;
  std::vector<std::chrono::steady_clock::time_point> last_ok(k_shards,
                                                             std::chrono::steady_clock::now());
  std::vector<int> targets = live();
  std::atomic<bool> stop{false};
  std::thread load([&] {
    cluster_api api(members_, 3s, 11);
    for (int i = 0; !stop; ++i) {
      const int t = i % k_shards;
      const std::string id = "ld-" + std::to_string(i);
      std::vector<int> nodes;
      {
        std::lock_guard lock(mu);
        nodes = targets;
      }
      auto r = api.send_retry(nodes, "POST", "/v1/produce",
                              cluster_api::produce_body(topics_[t], id, id),
                              cluster_api::produce_headers(id), 3s);
      if (r && r->status == 200) {
        std::lock_guard lock(mu);
        answered.insert(topics_[t] + "/" + id);
        last_ok[t] = std::chrono::steady_clock::now();
      }
    }
  });
  // The load ends with the test, however it ends.
  struct joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_load{stop, load};
  auto set_targets = [&](std::vector<int> nodes) {
    std::lock_guard lock(mu);
    targets = std::move(nodes);
  };
  // Waits until every shard took a write after `since`; the time it took.
  auto resumed_after = [&](std::chrono::steady_clock::time_point since,
                           std::chrono::milliseconds limit) -> std::optional<long long> {
    while (std::chrono::steady_clock::now() - since < limit) {
      {
        std::lock_guard lock(mu);
        if (std::all_of(last_ok.begin(), last_ok.end(), [&](auto t) { return t > since; })) {
          auto latest = *std::max_element(last_ok.begin(), last_ok.end());
          return std::chrono::duration_cast<std::chrono::milliseconds>(latest - since).count();
        }
      }
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  };
  std::this_thread::sleep_for(1s);

  // 1. kill -9 of the leader of shard 0: writes to every shard resume.
  auto s = status_any();
  ASSERT_TRUE(s);
  const int victim = cluster_->index_of(s->shard(0)->leader);
  ASSERT_GE(victim, 0);
  {
    std::vector<int> others = live();
    others.erase(std::remove(others.begin(), others.end(), victim), others.end());
    set_targets(others);
  }
  const auto killed_at = std::chrono::steady_clock::now();
  cluster_->kill9(static_cast<std::size_t>(victim));
  auto resumed = resumed_after(killed_at, 20s);
  ASSERT_TRUE(resumed) << "writes did not resume after the kill";
  EXPECT_LE(*resumed, 5'000) << "writes resumed after " << *resumed << " ms";
  std::cerr << "writes to every shard resumed " << *resumed << " ms after the kill\n";
  cluster_->restart(static_cast<std::size_t>(victim));
  set_targets(live());

  // 2. Drain a node under load (`onceq cluster drain`); it ends drained,
  // holding nothing.
  const std::string drained_id = members_[1].id;
  {
    const cli_run r = run_cli(members_[0].http_port, "cluster drain " + drained_id);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("draining"), std::string::npos) << r.out;
  }
  auto d = wait_status(
      [&](const cluster_status& st) {
        const auto* n = st.node_status(drained_id);
        return n != nullptr && n->state == "drained" && counts(st).count(drained_id) == 0 &&
               settled(st);
      },
      120s);
  ASSERT_TRUE(d) << "the drain did not finish";
  EXPECT_GE(d->moves_finished, 3u);
  {
    // The moves in /metrics: started, finished, and how long the last took.
    auto m = api_->send_retry(live(), "GET", "/metrics", nullptr, {}, 10s);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->status, 200);
    auto value = [&](const std::string& name) {
      const auto at = m->body.find("\n" + name + " ");
      return at == std::string::npos ? -1.0 : std::stod(m->body.substr(at + name.size() + 2));
    };
    EXPECT_GE(value("onceq_cluster_moves_finished_total"), 3.0) << m->body;
    EXPECT_GE(value("onceq_cluster_moves_started_total"), 3.0);
    EXPECT_GT(value("onceq_cluster_last_move_seconds"), 0.0);
    EXPECT_GT(value("onceq_cluster_move_seconds_total"), 0.0);
  }
  {
    const cli_run r = run_cli(members_[0].http_port, "cluster status");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("drained"), std::string::npos) << r.out;
  }
  {
    std::vector<int> others = live();
    others.erase(std::remove(others.begin(), others.end(), 1), others.end());
    set_targets(others);
  }
  cluster_->kill9(1);  // a drained node may be stopped: nothing depends on it

  // 3. The sixth node starts; once the cluster sees it active, a rebalance
  // fills it to within one.
  cluster_->restart(k_listed - 1);
  ASSERT_TRUE(wait_status(
      [&](const cluster_status& st) {
        const auto* n = st.node_status("n6");
        return n != nullptr && n->state == "active";
      },
      30s))
      << "n6 did not become active";
  {
    std::vector<int> nodes = live();
    set_targets(nodes);
    const cli_run r = run_cli(members_[k_listed - 1].http_port, "cluster rebalance");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  auto b = wait_status(
      [&](const cluster_status& st) {
        if (!settled(st)) return false;
        const auto c = counts(st);
        if (!c.count("n6")) return false;
        int lo = 100, hi = 0;
        for (const auto& m : members_) {
          if (m.id == drained_id) continue;
          const int n = c.count(m.id) ? c.at(m.id) : 0;
          lo = std::min(lo, n);
          hi = std::max(hi, n);
        }
        return hi - lo <= 1;
      },
      120s);
  ASSERT_TRUE(b) << "the rebalance did not fill the new node";
  std::this_thread::sleep_for(1s);
  stop = true;
  load.join();

  // 4. Every answered produce is there once, and no key commits twice.
  std::map<std::string, int> seen;
  std::vector<std::string> errors;
  for (const auto& t : topics_) {
    for (const auto& [value, n] : api_->drain(live(), t, k_group, 60s, errors)) {
      seen[t + "/" + value] += n;
    }
    EXPECT_TRUE(api_->drained()) << t << " did not drain";
  }
  EXPECT_TRUE(errors.empty()) << errors.front();
  std::size_t lost = 0;
  for (const auto& id : answered) {
    if (!seen.count(id)) ++lost;
  }
  EXPECT_EQ(lost, 0u) << "of " << answered.size() << " answered produces";
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id << " delivered " << n << " times";
  std::cerr << answered.size() << " produces answered, all delivered once\n";
}

// A node added to the file of a running cluster: four nodes listed and
// started, the file grows to five, the four restart one at a time on it,
// the fifth starts with --join (it bootstraps nothing). The meta group's
// leader grows the registry and adds the fifth to the meta group as a
// standby; it becomes active, and a rebalance gives it replicas. Every
// write answered before, during and after is delivered once.
class cluster_growth : public cluster_placement {
 protected:
  void SetUp() override { start(5, 4, 4, 2); }
};

TEST_F(cluster_growth, a_node_added_to_the_file_joins_and_a_rebalance_fills_it) {
  ASSERT_TRUE(wait_status(settled, 60s)) << "the placement did not settle";
  make_topics();
  std::map<std::string, bool> answered;
  auto produce = [&](const std::string& id) {
    const std::string& topic = topics_[answered.size() % topics_.size()];
    auto r =
        api_->send_retry(live(), "POST", "/v1/produce", cluster_api::produce_body(topic, id, id),
                         cluster_api::produce_headers(id), 20s);
    if (r && r->status == 200) answered[topic + "/" + id] = true;
    return r && r->status == 200;
  };
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(produce("before-" + std::to_string(i)));

  // The file grows; the four nodes restart on it one at a time.
  cluster_->write_file(5);
  for (std::size_t i = 0; i < 4; ++i) {
    cluster_->kill9(i);
    cluster_->restart(i);
    ASSERT_FALSE(cluster_->wait_for_leader("", 30s).empty()) << "after the restart of n" << i + 1;
    for (int k = 0; k < 5; ++k) {
      ASSERT_TRUE(produce("restart" + std::to_string(i) + "-" + std::to_string(k)));
    }
  }
  // The fifth joins.
  cluster_->add_args(4, {"--join"});
  cluster_->restart(4);
  auto joined = wait_status(
      [](const cluster_status& st) {
        const auto* n = st.node_status("n5");
        return n != nullptr && n->state == "active";
      },
      60s);
  ASSERT_TRUE(joined) << "n5 did not become active";
  {
    auto r = api_->send_retry(live(), "POST", "/v1/cluster/rebalance");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 202) << r->body;
  }
  auto filled = wait_status(
      [](const cluster_status& st) {
        if (!settled(st)) return false;
        const auto c = counts(st);
        return c.count("n5") && c.at("n5") >= 1;
      },
      120s);
  ASSERT_TRUE(filled) << "the rebalance gave n5 nothing";
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(produce("after-" + std::to_string(i)));
  // n5 serves too (it holds a replica now, and forwards the rest).
  for (const auto& t : topics_) {
    const std::string id = "via-n5-" + t;
    auto r = api_->send_retry({4}, "POST", "/v1/produce", cluster_api::produce_body(t, id, id),
                              cluster_api::produce_headers(id), 20s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    if (r->status == 200) answered[t + "/" + id] = true;
  }

  std::map<std::string, int> seen;
  std::vector<std::string> errors;
  for (const auto& t : topics_) {
    for (const auto& [value, n] : api_->drain(live(), t, k_group, 60s, errors)) {
      seen[t + "/" + value] += n;
    }
  }
  EXPECT_TRUE(errors.empty()) << errors.front();
  for (const auto& [id, ok] : answered) EXPECT_EQ(seen[id], 1) << id;
}

// dead_after_ms: a node that stays down that long has its replicas
// placed on the other nodes, with no one asking. Four nodes, replicas = 3,
// one shard, dead_after_ms = 3000: a replica holder is killed and not
// restarted; the shard gets back to 3 replicas on the live nodes, and the
// writes answered before are all there.
class cluster_dead_node : public cluster_placement {
 protected:
  void SetUp() override { start(4, 4, 4, 1, "replicas = 3\ndead_after_ms = 3000\n"); }
};

TEST_F(cluster_dead_node, a_node_down_longer_than_dead_after_ms_loses_its_replicas_to_the_others) {
  auto s = wait_status(settled, 60s);
  ASSERT_TRUE(s) << "the placement did not settle";
  make_topics();
  std::map<std::string, bool> answered;
  for (int i = 0; i < 20; ++i) {
    const std::string id = "d-" + std::to_string(i);
    auto r = api_->send_retry(live(), "POST", "/v1/produce",
                              cluster_api::produce_body(topics_[0], id, id),
                              cluster_api::produce_headers(id), 20s);
    ASSERT_TRUE(r && r->status == 200);
    answered[id] = true;
  }
  s = status_any();
  ASSERT_TRUE(s);
  const auto replicas = s->shard(0)->replicas;
  // A replica that does not lead (the shard keeps serving at once).
  std::string victim;
  for (const auto& r : replicas) {
    if (r != s->shard(0)->leader) victim = r;
  }
  const int v = cluster_->index_of(victim);
  ASSERT_GE(v, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  cluster_->kill9(static_cast<std::size_t>(v));
  auto replaced = wait_status(
      [&](const cluster_status& st) {
        const auto* sh = st.shard(0);
        return settled(st) &&
               std::find(sh->replicas.begin(), sh->replicas.end(), victim) == sh->replicas.end();
      },
      90s);
  ASSERT_TRUE(replaced) << victim << " kept its replica";
  const auto after_ms = ms_since(killed_at);
  EXPECT_GE(after_ms, 3'000) << "replaced before dead_after_ms";
  std::cerr << victim << " down: its replica was placed elsewhere " << after_ms
            << " ms after the kill\n";
  const auto* n = replaced->node_status(victim);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->state, "down");
  std::vector<std::string> errors;
  auto seen = api_->drain(live(), topics_[0], k_group, 60s, errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  for (const auto& [id, ok] : answered) EXPECT_EQ(seen[id], 1) << id;
}

}  // namespace
}  // namespace onceq::itest
