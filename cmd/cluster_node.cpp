#include "cmd/cluster_node.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cmd/log.hpp"
#include "http/codec/inspector.hpp"
#include "shard/layout.hpp"

namespace onceq::cmd {

namespace {
// How often every node hands the groups it leads to their preferred
// leaders (cluster_config::preferred_leader): spreads the leaderships
// again after a node rejoins.
constexpr auto k_rebalance_every = std::chrono::seconds(10);
}  // namespace

cluster_node::cluster_node(cluster::cluster_config cfg, const cmd::config& opts)
    : cfg_(std::move(cfg)),
      self_(cfg_.self().id),
      election_timeout_ms_(opts.election_timeout_ms),
      snapshot_every_(opts.raft_snapshot_every) {}

cluster_node::~cluster_node() {
  stop();
}

result<std::unique_ptr<cluster_node>> cluster_node::open(cmd::config& cfg) {
  auto file = cluster::cluster_config::load(cfg.cluster_file, cfg.node_id);
  if (!file.ok()) return std::move(file).err();
  if (auto ports = file->check_ports(cfg.shards); !ports.ok()) return std::move(ports).err();
  cfg.http.host = file->self().http_host;
  cfg.http.port = file->self().http_port;
  std::unique_ptr<cluster_node> n(new cluster_node(std::move(*file), cfg));
  n->data_dir_ = cfg.storage.data_dir;
  for (std::uint32_t g = 0; g < cfg.shards; ++g) {
    storage::storage_options so = cfg.storage;
    so.data_dir = shard_data_dir(cfg.storage.data_dir, g);
    // The Raft log is the durable record: the applied state needs no sync
    // (a kill -9 replays the log after the applied position).
    so.fsync = storage::fsync_policy{};
    so.fsync.kind = storage::fsync_policy::mode::none;
    auto opened = storage::rocksdb_store::open(so);
    if (!opened.ok()) {
      return make_error(opened.err().code,
                        fmt::format("cannot open the store of shard {} in {}: {}", g, so.data_dir,
                                    opened.err().message));
    }
    n->stores_.push_back(std::move(*opened));
    n->replicas_.push_back(std::make_unique<cluster::replica>(*n->stores_.back(),
                                                              &http::json_inspector(), cfg.broker));
    if (auto r = n->replicas_.back()->open(); !r.ok()) {
      return make_error(r.err().code,
                        fmt::format("recovery of shard {} failed: {}", g, r.err().message));
    }
    n->groups_.push_back(std::make_unique<cluster::shard_group>(
        g, *n->replicas_.back(), n->cfg_, cfg.leader_grace_ms, cfg.broker.max_lease_ms));
  }
  return n;
}

result<void> cluster_node::start() {
  cluster::raft_node_options ro;
  ro.data_dir = data_dir_;
  ro.groups = shards();
  ro.election_timeout_ms = election_timeout_ms_;
  ro.heartbeat_timeout_ms = std::max(10u, election_timeout_ms_ / 10);
  ro.snapshot_threshold = snapshot_every_;
  // A follower a little behind (a restart, a short partition) catches up
  // from the log, not from a whole snapshot.
  ro.snapshot_trailing = std::max(64u, snapshot_every_ / 4);
  std::vector<cluster::state_machine*> machines;
  for (auto& r : replicas_) machines.push_back(r.get());
  auto started = cluster::raft_node::start(cfg_, ro, std::move(machines));
  if (!started.ok()) return std::move(started).err();
  raft_ = std::move(*started);
  for (auto& g : groups_) g->attach(*raft_);
  rebalancer_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!wake_.wait_for(lock, k_rebalance_every, [this] { return stopping_; })) {
      lock.unlock();
      (void)raft_->rebalance();  // only fails once stopped
      lock.lock();
    }
  });
  (void)raft_->rebalance();
  return {};
}

void cluster_node::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (rebalancer_.joinable()) rebalancer_.join();
  if (raft_) raft_->stop();
}

std::string cluster_node::node_at(unsigned n) const {
  const auto* node = cfg_.node_of(n);
  return node != nullptr ? node->id : std::string();
}

std::optional<http::node_address> cluster_node::http_of(std::string_view node) const {
  for (const auto& n : cfg_.nodes()) {
    if (n.id == node) return http::node_address{n.http_host, n.http_port};
  }
  return std::nullopt;
}

nlohmann::json cluster_node::status() const {
  using json = nlohmann::json;
  std::vector<cluster::group_status> groups;
  for (unsigned g = 0; g < shards(); ++g) {
    auto s = raft_ ? raft_->status(g) : result<cluster::group_status>(cluster::group_status{});
    groups.push_back(s.ok() ? std::move(*s) : cluster::group_status{});
  }
  // Reachable: this node; a leader it follows (it hears its heartbeats);
  // a voter a group it leads heard from within an election timeout.
  auto reachable = [&](const std::string& id) {
    if (id == self_) return true;
    for (const auto& s : groups) {
      if (s.leader == id && !s.is_leader) return true;
      if (s.is_leader && std::find(s.heard.begin(), s.heard.end(), id) != s.heard.end()) {
        return true;
      }
    }
    return false;
  };
  json nodes = json::array();
  for (const auto& n : cfg_.nodes()) {
    nodes.push_back({{"id", n.id},
                     {"http", n.http},
                     {"raft", cfg_.raft_address(n, 0)},
                     {"reachable", reachable(n.id)}});
  }
  json shards_json = json::array();
  for (unsigned g = 0; g < shards(); ++g) {
    const auto& s = groups[g];
    json one = {{"shard", g},
                {"leader", s.leader},
                {"term", s.term},
                {"commit_index", s.commit_index},
                {"applied_index", s.last_applied},
                {"last_index", s.last_index},
                {"topics", groups_[g]->topics()}};
    if (!s.failure.empty()) one["failure"] = s.failure;
    shards_json.push_back(std::move(one));
  }
  return json{{"node", self_}, {"nodes", std::move(nodes)}, {"shards", std::move(shards_json)}};
}

void cluster_node::render_metrics(std::string& body) const {
  struct series {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t (*get)(const cluster::group_status&);
  };
  static const series k_series[] = {
      {"onceq_raft_term", "gauge", "The shard's Raft term on this node.",
       [](const cluster::group_status& s) { return s.term; }},
      {"onceq_raft_is_leader", "gauge", "1 when this node leads the shard.",
       [](const cluster::group_status& s) -> std::uint64_t { return s.is_leader ? 1 : 0; }},
      {"onceq_raft_commit_index", "gauge", "The shard's commit index known to this node.",
       [](const cluster::group_status& s) { return s.commit_index; }},
      {"onceq_raft_applied_index", "gauge", "The last index of the shard applied on this node.",
       [](const cluster::group_status& s) { return s.last_applied; }},
      {"onceq_raft_apply_lag", "gauge", "Committed entries of the shard not applied here yet.",
       [](const cluster::group_status& s) -> std::uint64_t {
         return s.commit_index > s.last_applied ? s.commit_index - s.last_applied : 0;
       }},
      {"onceq_raft_elections_total", "counter",
       "Terms this node saw the shard enter since it started (elections).",
       [](const cluster::group_status& s) { return s.terms_seen; }},
      {"onceq_raft_proposals_total", "counter", "Entries this node proposed as the leader.",
       [](const cluster::group_status& s) { return s.proposals; }},
      {"onceq_raft_snapshots_restored_total", "counter",
       "Snapshots of the shard restored on this node.",
       [](const cluster::group_status& s) { return s.snapshots_restored; }},
      {"onceq_raft_failed", "gauge", "1 when the shard's replica on this node stopped applying.",
       [](const cluster::group_status& s) -> std::uint64_t { return s.failure.empty() ? 0 : 1; }},
  };
  std::vector<cluster::group_status> groups;
  for (unsigned g = 0; g < shards(); ++g) {
    auto s = raft_ ? raft_->status(g) : result<cluster::group_status>(cluster::group_status{});
    groups.push_back(s.ok() ? std::move(*s) : cluster::group_status{});
  }
  for (const auto& x : k_series) {
    body += fmt::format("# HELP {} {}\n# TYPE {} {}\n", x.name, x.help, x.name, x.type);
    for (unsigned g = 0; g < shards(); ++g) {
      body += fmt::format("{}{{shard=\"{}\"}} {}\n", x.name, g, x.get(groups[g]));
    }
  }
}

}  // namespace onceq::cmd
