#include "cmd/cluster_node.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/http_client.hpp"
#include "cmd/log.hpp"
#include "http/codec/inspector.hpp"
#include "shard/layout.hpp"

namespace onceq::cmd {

namespace {
// The meta group's open raft segments: raft's own default size.
constexpr std::size_t k_meta_segment_bytes = 8u << 20;
}  // namespace

// One thread that runs blocking requests to the meta group (the
// operator's drain and rebalance, other nodes' entries), in order.
class meta_worker {
 public:
  meta_worker() : thread_([this] { run(); }) {}
  ~meta_worker() { stop(); }
  // Ends the thread once the tasks queued so far ran; post() refuses from
  // now on. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    std::lock_guard join_lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  // False once stopping (the task is dropped).
  bool post(std::function<void(bool stopping)> task) {
    std::lock_guard lock(mu_);
    if (stopping_ || tasks_.size() >= 1'000) return false;
    tasks_.push_back(std::move(task));
    wake_.notify_one();
    return true;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (stopping_) break;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task(false);
      lock.lock();
    }
    // What is left answers that the node is stopping.
    auto left = std::move(tasks_);
    lock.unlock();
    for (auto& t : left) t(true);
  }
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::deque<std::function<void(bool stopping)>> tasks_;
  std::mutex join_mu_;
  std::thread thread_;
};

cluster_node::cluster_node(cluster::cluster_config cfg, const cmd::config& opts)
    : cfg_(std::move(cfg)),
      self_(cfg_.self().id),
      election_timeout_ms_(opts.election_timeout_ms),
      snapshot_every_(opts.raft_snapshot_every),
      segment_bytes_(std::size_t{opts.raft_segment_mib} << 20),
      join_(opts.join) {}

cluster_node::~cluster_node() {
  stop();
}

result<std::unique_ptr<cluster_node>> cluster_node::open(cmd::config& cfg) {
  auto file = cluster::cluster_config::load(cfg.cluster_file, cfg.node_id);
  if (!file.ok()) return std::move(file).err();
  // Groups 0 .. shards - 1 are the shards; group `shards` is the meta group.
  if (auto ports = file->check_ports(cfg.shards + 1); !ports.ok()) return std::move(ports).err();
  cfg.http.host = file->self().http_host;
  cfg.http.port = file->self().http_port;
  std::unique_ptr<cluster_node> n(new cluster_node(std::move(*file), cfg));
  n->data_dir_ = cfg.storage.data_dir;
  n->meta_ = std::make_unique<cluster::meta_machine>(cfg.shards);
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
    if (cfg.apply_trace) {
      const std::string path = fmt::format("{}/apply-trace-{}.log", cfg.storage.data_dir, g);
      std::FILE* f = std::fopen(path.c_str(), "a");
      if (f == nullptr) {
        return make_error(errc::unavailable,
                          fmt::format("cannot open {}: {}", path, std::strerror(errno)));
      }
      n->traces_.emplace_back(f);
      // One write(2) per line: a kill -9 keeps every line written.
      n->replicas_.back()->on_trace([f](std::uint64_t index, log_tag tag, std::uint64_t digest) {
        std::fprintf(f, "%llu %u %016llx\n", static_cast<unsigned long long>(index),
                     static_cast<unsigned>(tag), static_cast<unsigned long long>(digest));
        std::fflush(f);
      });
    }
    if (auto r = n->replicas_.back()->open(); !r.ok()) {
      return make_error(r.err().code,
                        fmt::format("recovery of shard {} failed: {}", g, r.err().message));
    }
    n->groups_.push_back(std::make_unique<cluster::shard_group>(
        g, *n->replicas_.back(), n->cfg_, cfg.leader_grace_ms, cfg.broker.max_lease_ms));
    cluster_node* self = n.get();
    n->groups_.back()->set_leader_hint([self, g]() -> std::uint64_t {
      // Only a node that holds no replica (or is joining or leaving the
      // group, and knows no leader yet) forwards by the placement.
      if (!self->agent_ || !self->raft_) return 0;
      if (self->raft_->opened(g) && self->agent_->holds_replica(g)) return 0;
      return self->agent_->leader_hint(g);
    });
  }
  return n;
}

result<void> cluster_node::start() {
  cluster::raft_node_options ro;
  ro.data_dir = data_dir_;
  ro.groups = shards() + 1;
  ro.election_timeout_ms = election_timeout_ms_;
  ro.heartbeat_timeout_ms = std::max(10u, election_timeout_ms_ / 10);
  ro.snapshot_threshold = snapshot_every_;
  // A follower a little behind (a restart, a short partition) catches up
  // from the log, not from a whole snapshot.
  ro.snapshot_trailing = std::max(64u, snapshot_every_ / 4);
  ro.segment_bytes = segment_bytes_;
  // A shard's group: every node of a file with no more nodes than
  // replicas holds it from the start (bootstrapped with every node, as
  // before placement existed); otherwise a group this node already holds
  // opens, and the placement agent opens the others when the meta group
  // places them here.
  std::vector<cluster::member> everyone;
  for (std::size_t i = 0; i < cfg_.nodes().size(); ++i) {
    everyone.push_back(cluster::member{i + 1, cluster::member_role::voter});
  }
  for (unsigned g = 0; g < shards(); ++g) {
    cluster::group_spec spec;
    if (cfg_.full_replication() && !join_) {
      spec.bootstrap = everyone;
    } else if (join_) {
      // Joining: a group already here opens; the others wait to be added.
      const auto dir = std::filesystem::path(data_dir_) / "raft" / std::to_string(g);
      std::error_code ec;
      spec.open = std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec);
    } else {
      const auto dir = std::filesystem::path(data_dir_) / "raft" / std::to_string(g);
      std::error_code ec;
      spec.open = std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec);
    }
    ro.specs.push_back(std::move(spec));
  }
  // The meta group: bootstrapped with the file's nodes on a first start,
  // unless this node joins a running cluster (its leader adds it).
  cluster::group_spec meta;
  meta.bootstrap =
      join_ ? std::vector<cluster::member>{} : cluster::meta_members(cfg_.nodes().size());
  // Its entries are placement changes of a few hundred bytes: raft's own
  // 8 MiB segments, not a shard's (a restart reads 24 MiB, not 192).
  meta.segment_bytes = k_meta_segment_bytes;
  ro.specs.push_back(std::move(meta));
  std::vector<cluster::state_machine*> machines;
  for (auto& r : replicas_) machines.push_back(r.get());
  machines.push_back(meta_.get());
  auto started = cluster::raft_node::start(cfg_, ro, std::move(machines));
  if (!started.ok()) return std::move(started).err();
  raft_ = std::move(*started);
  for (auto& g : groups_) g->attach(*raft_);

  placement_agent::options ao;
  ao.placement.replicas = cfg_.replicas_of();
  ao.placement.dead_after_ms = cfg_.dead_after_ms();
  // Down: not heard for ten election timeouts (a node busy catching up a
  // large shard answers late, and is not down).
  ao.placement.down_after_ms = 10ull * election_timeout_ms_;
  // The first placement waits this long for every node of the file to be
  // heard (a node is heard once its raft connections are up: seconds).
  ao.placement.settle_ms = std::max<std::uint64_t>(3'000, 10ull * election_timeout_ms_);
  const std::string self = self_;
  auto send = [this, self](const std::string& leader, const std::string& entry) -> result<void> {
    auto at = http_of(leader);
    if (!at) return make_error(errc::unavailable, fmt::format("no node {}", leader));
    try {
      client::options o;
      o.host = at->host;
      o.port = at->port;
      o.timeout = std::chrono::milliseconds(5'000);
      o.retry_stale_connection = false;
      client::http_client c(o);
      auto res = c.request("POST", "/v1/internal/meta", entry,
                           {{"Content-Type", "application/json"}, {"X-Onceq-Forwarded", self}});
      if (res.status == 200 || res.status == 204) return {};
      const errc code = res.status == 409 ? errc::failed_precondition : errc::unavailable;
      return make_error(code, fmt::format("node {} answered {}: {}", leader, res.status, res.body));
    } catch (const std::exception& e) {
      return make_error(errc::unavailable, fmt::format("node {}: {}", leader, e.what()));
    }
  };
  agent_ = std::make_unique<placement_agent>(cfg_, *raft_, *meta_, shards(), ao, clock_, send);
  worker_ = std::make_unique<meta_worker>();
  agent_->start();
  return {};
}

void cluster_node::stop() {
  // The worker and the agent stay (the HTTP edge may still call them: they
  // answer that the node is stopping); their threads end here.
  if (worker_) worker_->stop();
  if (agent_) agent_->stop();
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
  for (unsigned g = 0; g <= shards(); ++g) {
    auto s = raft_ ? raft_->status(g) : result<cluster::group_status>(cluster::group_status{});
    groups.push_back(s.ok() ? std::move(*s) : cluster::group_status{});
  }
  const cluster::meta_state placement = meta_->state();
  auto name = [&](cluster::raft_id id) { return node_at(static_cast<unsigned>(id)); };
  auto names = [&](const std::vector<cluster::raft_id>& ids) {
    json out = json::array();
    for (auto id : ids) out.push_back(name(id));
    return out;
  };
  // Reachable: this node; a leader it follows (it hears its heartbeats);
  // a member a group it leads heard from within an election timeout.
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
  for (std::size_t i = 0; i < cfg_.nodes().size(); ++i) {
    const auto& n = cfg_.nodes()[i];
    const cluster::node_entry entry =
        i < placement.nodes.size() ? placement.nodes[i] : cluster::node_entry{};
    nodes.push_back({{"id", n.id},
                     {"http", n.http},
                     {"raft", cfg_.raft_address(n, 0)},
                     {"reachable", reachable(n.id)},
                     {"state", std::string(cluster::to_string(entry.state))},
                     {"replicas", placement.load(i + 1)},
                     {"leads", std::count_if(groups.begin(), groups.end() - 1,
                                             [&](const cluster::group_status& s) {
                                               return s.leader == n.id;
                                             })}});
  }
  json shards_json = json::array();
  for (unsigned g = 0; g < shards(); ++g) {
    const auto& s = groups[g];
    const auto& p = placement.shards[g];
    // A shard this node holds no replica of: the leader the meta group
    // last recorded (it may be a moment old).
    const std::string leader = s.open || p.leader == 0 ? s.leader : name(p.leader);
    json one = {{"shard", g},
                {"leader", leader},
                {"term", s.term},
                {"commit_index", s.commit_index},
                {"applied_index", s.last_applied},
                {"last_index", s.last_index},
                {"replicas", names(p.replicas)},
                {"config_version", p.version},
                {"held_here", s.open},
                {"topics", groups_[g]->topics()}};
    if (s.open) {
      json voters = json::array();
      for (const auto& m : s.members) {
        if (m.role == cluster::member_role::voter) voters.push_back(name(m.id));
      }
      one["voters"] = std::move(voters);
    }
    if (p.moving) {
      one["moving"] = {{"from", p.moving->from != 0 ? json(name(p.moving->from)) : json(nullptr)},
                       {"to", name(p.moving->to)},
                       {"state", std::string(cluster::to_string(p.moving->state))},
                       {"reason", p.moving->reason}};
    }
    if (!s.failure.empty()) one["failure"] = s.failure;
    shards_json.push_back(std::move(one));
  }
  const auto& m = groups[shards()];
  json meta = {{"leader", m.leader},
               {"term", m.term},
               {"placed", placement.placed},
               {"rebalancing", placement.rebalance},
               {"replicas", cfg_.replicas_of()},
               {"dead_after_ms", cfg_.dead_after_ms()},
               {"moves_started", placement.moves_started},
               {"moves_finished", placement.moves_finished},
               {"moves_cancelled", placement.moves_cancelled}};
  return json{{"node", self_},
              {"nodes", std::move(nodes)},
              {"shards", std::move(shards_json)},
              {"meta", std::move(meta)}};
}

void cluster_node::drain(std::string_view node, std::function<void(result<void>)> done) const {
  auto id = cfg_.raft_id_of(node);
  if (!id) {
    return done(make_error(errc::not_found, fmt::format("no node \"{}\" in the cluster", node)));
  }
  cluster::meta_command c;
  c.op = cluster::meta_command::kind::drain;
  c.node = *id;
  c.at_ms = static_cast<std::uint64_t>(clock_.now_ms());
  meta_submit(cluster::encode(c), std::move(done));
}

void cluster_node::rebalance(std::function<void(result<void>)> done) const {
  cluster::meta_command c;
  c.op = cluster::meta_command::kind::rebalance;
  meta_submit(cluster::encode(c), std::move(done));
}

void cluster_node::move_shard(std::uint32_t shard, std::string_view from, std::string_view to,
                              std::function<void(result<void>)> done) const {
  if (shard >= shards()) {
    return done(make_error(errc::not_found,
                           fmt::format("no shard {}: the cluster has {}", shard, shards())));
  }
  auto from_id = cfg_.raft_id_of(from);
  auto to_id = cfg_.raft_id_of(to);
  if (!from_id || !to_id) {
    return done(make_error(errc::not_found,
                           fmt::format("no node \"{}\" in the cluster", from_id ? to : from)));
  }
  // The meta group's leader decides from its own state (a request to
  // another node is forwarded there first).
  if (raft_->leads(shards())) {
    const cluster::meta_state s = meta_->state();
    const auto& e = s.shards[shard];
    const auto to_state =
        *to_id <= s.nodes.size() ? s.nodes[*to_id - 1].state : cluster::node_state::down;
    if (to_state != cluster::node_state::active) {
      return done(make_error(errc::failed_precondition,
                             fmt::format("node {} is {}: a move needs an active target", to,
                                         cluster::to_string(to_state))));
    }
    cluster::meta_command c;
    c.op = cluster::meta_command::kind::move;
    c.shard = shard;
    c.version = e.version;
    c.from = *from_id;
    c.to = *to_id;
    c.at_ms = static_cast<std::uint64_t>(clock_.now_ms());
    c.reason = "operator";
    return meta_submit(cluster::encode(c), std::move(done));
  }
  done(not_meta_leader());
}

error cluster_node::not_meta_leader() const {
  auto st = raft_->status(shards());
  error e =
      make_error(errc::unavailable, "the meta group has no leader (an election is under way)");
  e.retry_after_ms = 1'000;
  if (st.ok() && !st->leader.empty()) {
    if (auto id = cfg_.raft_id_of(st->leader); id && st->leader != self_) {
      e.message = fmt::format("the meta group is led by node {}", st->leader);
      e.leader = static_cast<unsigned>(*id);
    }
  }
  return e;
}

void cluster_node::meta_submit(std::string entry, std::function<void(result<void>)> done) const {
  if (!agent_ || !worker_) {
    return done(make_error(errc::unavailable, "this node is not started"));
  }
  // Only the meta group's leader proposes: another node's request goes
  // there (the router forwards on error::leader).
  if (!raft_->leads(shards())) return done(not_meta_leader());
  auto shared = std::make_shared<std::function<void(result<void>)>>(std::move(done));
  placement_agent* agent = agent_.get();
  if (!worker_->post([agent, entry = std::move(entry), shared](bool stopping) {
        (*shared)(stopping ? make_error(errc::unavailable, "the node is stopping")
                           : agent->submit_local(entry));
      })) {
    (*shared)(make_error(errc::unavailable, "the node is stopping or busy"));
  }
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
      {"onceq_raft_snapshot_bytes_restored_total", "counter",
       "Bytes of the shard's snapshots restored on this node (a moved replica arrives so).",
       [](const cluster::group_status& s) { return s.snapshot_bytes_restored; }},
      {"onceq_raft_held", "gauge",
       "1 when this node holds a replica of the shard (its group runs here).",
       [](const cluster::group_status& s) -> std::uint64_t { return s.open ? 1 : 0; }},
      {"onceq_raft_failed", "gauge", "1 when the shard's replica on this node stopped applying.",
       [](const cluster::group_status& s) -> std::uint64_t { return s.failure.empty() ? 0 : 1; }},
  };
  std::vector<cluster::group_status> groups;
  for (unsigned g = 0; g < shards(); ++g) {
    auto s = raft_ ? raft_->status(g) : result<cluster::group_status>(cluster::group_status{});
    groups.push_back(s.ok() ? std::move(*s) : cluster::group_status{});
  }
  const cluster::meta_state placement = meta_->state();
  body += fmt::format(
      "# HELP onceq_cluster_moves_started_total Shard moves the meta group started.\n"
      "# TYPE onceq_cluster_moves_started_total counter\n"
      "onceq_cluster_moves_started_total {}\n"
      "# HELP onceq_cluster_moves_finished_total Shard moves that finished.\n"
      "# TYPE onceq_cluster_moves_finished_total counter\n"
      "onceq_cluster_moves_finished_total {}\n"
      "# HELP onceq_cluster_moves_failed_total Shard moves cancelled (their target went away).\n"
      "# TYPE onceq_cluster_moves_failed_total counter\n"
      "onceq_cluster_moves_failed_total {}\n"
      "# HELP onceq_cluster_moves_running Shard moves running now.\n"
      "# TYPE onceq_cluster_moves_running gauge\n"
      "onceq_cluster_moves_running {}\n"
      "# HELP onceq_cluster_move_seconds_total Time the finished shard moves took, in all.\n"
      "# TYPE onceq_cluster_move_seconds_total counter\n"
      "onceq_cluster_move_seconds_total {:.3f}\n"
      "# HELP onceq_cluster_last_move_seconds Time the last finished shard move took.\n"
      "# TYPE onceq_cluster_last_move_seconds gauge\n"
      "onceq_cluster_last_move_seconds {:.3f}\n",
      placement.moves_started, placement.moves_finished, placement.moves_cancelled,
      std::count_if(placement.shards.begin(), placement.shards.end(),
                    [](const cluster::shard_entry& e) { return e.moving.has_value(); }),
      static_cast<double>(placement.move_ms_total) / 1000.0,
      static_cast<double>(placement.last_move_ms) / 1000.0);
  body +=
      "# HELP onceq_cluster_node_state The placement state of each node (1 for its state).\n"
      "# TYPE onceq_cluster_node_state gauge\n";
  for (std::size_t i = 0; i < cfg_.nodes().size(); ++i) {
    for (auto st : {cluster::node_state::active, cluster::node_state::draining,
                    cluster::node_state::drained, cluster::node_state::down}) {
      const auto have =
          i < placement.nodes.size() ? placement.nodes[i].state : cluster::node_state::down;
      body += fmt::format("onceq_cluster_node_state{{node=\"{}\",state=\"{}\"}} {}\n",
                          cfg_.nodes()[i].id, cluster::to_string(st), have == st ? 1 : 0);
    }
  }
  for (const auto& x : k_series) {
    body += fmt::format("# HELP {} {}\n# TYPE {} {}\n", x.name, x.help, x.name, x.type);
    for (unsigned g = 0; g < shards(); ++g) {
      body += fmt::format("{}{{shard=\"{}\"}} {}\n", x.name, g, x.get(groups[g]));
    }
  }
}

}  // namespace onceq::cmd
