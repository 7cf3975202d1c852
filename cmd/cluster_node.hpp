#pragma once

// cluster_node: what onceqd runs as a node of a cluster (--cluster FILE
// --node-id ID; docs/REPLICATION.md). Per shard: its RocksDB store (the
// applied state: written without syncs, the Raft log is the durable
// record), a replica applying the shard's Raft group, and the shard_group
// the shard proposes through; one raft_node running every group; and the
// cluster view the HTTP edge reads (X-Onceq-Node, forwarding, GET
// /v1/cluster, /metrics). The meta group (raft group `shards`) holds the
// placement; the placement_agent opens and closes this node's groups, runs
// moves and spreads the leaderships (docs/REPLICATION.md, "Placement").
//
// Thread safety: open, start and stop from one thread (onceqd's main);
// the cluster_view members from any thread.

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/config.hpp"
#include "cluster/meta.hpp"
#include "cluster/raft_node.hpp"
#include "cluster/replica.hpp"
#include "cluster/shard_group.hpp"
#include "cmd/config.hpp"
#include "cmd/placement_agent.hpp"
#include "http/cluster_view.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"

namespace onceq::cmd {

class cluster_node final : public http::cluster_view {
 public:
  // Loads the cluster file, opens every shard's store and replica
  // (recovered to their applied position). cfg.http's address becomes the
  // node's http address from the file. Errors: errc::invalid_argument (the
  // file, the node id, ports), storage errors of the stores.
  static result<std::unique_ptr<cluster_node>> open(cmd::config& cfg);
  ~cluster_node() override;  // stop()

  unsigned shards() const noexcept { return static_cast<unsigned>(replicas_.size()); }
  broker& core(unsigned g) { return replicas_[g]->core(); }
  storage::store& store(unsigned g) { return *stores_[g]; }
  shard_log& log(unsigned g) { return *groups_[g]; }

  // Starts raft (every group) and the rebalancing. Errors: raft_node::start's.
  result<void> start();
  // Stops raft: proposals in flight answer errc::unavailable. Idempotent.
  void stop();

  // http::cluster_view
  const std::string& self() const override { return self_; }
  std::string node_at(unsigned n) const override;
  std::optional<http::node_address> http_of(std::string_view node) const override;
  nlohmann::json status() const override;
  void render_metrics(std::string& body) const override;
  void drain(std::string_view node, std::function<void(result<void>)> done) const override;
  void rebalance(std::function<void(result<void>)> done) const override;
  void move_shard(std::uint32_t shard, std::string_view from, std::string_view to,
                  std::function<void(result<void>)> done) const override;
  void meta_submit(std::string entry, std::function<void(result<void>)> done) const override;

 private:
  cluster_node(cluster::cluster_config cfg, const cmd::config& opts);
  // The answer of a meta request on a node that does not lead the meta
  // group: unavailable, with error::leader naming the leader when known
  // (the router forwards there).
  error not_meta_leader() const;

  cluster::cluster_config cfg_;
  std::string self_;
  std::string data_dir_;
  unsigned election_timeout_ms_;
  unsigned snapshot_every_;
  std::size_t segment_bytes_;  // a shard group's open segments (--raft-segment-mib)
  bool join_;                  // --join: bootstrap nothing
  struct file_closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  // --apply-trace: each shard's trace file, written by its replica on the
  // raft thread (declared first: it outlives the replicas).
  std::vector<std::unique_ptr<std::FILE, file_closer>> traces_;
  std::vector<std::unique_ptr<storage::rocksdb_store>> stores_;
  std::vector<std::unique_ptr<cluster::replica>> replicas_;
  std::vector<std::unique_ptr<cluster::shard_group>> groups_;
  std::unique_ptr<cluster::raft_node> raft_;

  system_clock clock_;
  std::unique_ptr<cluster::meta_machine> meta_;
  std::unique_ptr<placement_agent> agent_;
  // Runs the operator's and the nodes' meta requests off the raft and
  // HTTP threads (each one waits for the meta group).
  std::unique_ptr<class meta_worker> worker_;
};

}  // namespace onceq::cmd
