#pragma once

// cluster_node: what onceqd runs as a node of a cluster (--cluster FILE
// --node-id ID; docs/REPLICATION.md). Per shard: its RocksDB store (the
// applied state: written without syncs, the Raft log is the durable
// record), a replica applying the shard's Raft group, and the shard_group
// the shard proposes through; one raft_node running every group; and the
// cluster view the HTTP edge reads (X-Onceq-Node, forwarding, GET
// /v1/cluster, /metrics). Leadership is spread over the nodes at start and
// every k_rebalance_every after (a node that rejoins gets its groups back).
//
// Thread safety: open, start and stop from one thread (onceqd's main);
// the cluster_view members from any thread.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/config.hpp"
#include "cluster/raft_node.hpp"
#include "cluster/replica.hpp"
#include "cluster/shard_group.hpp"
#include "cmd/config.hpp"
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

 private:
  cluster_node(cluster::cluster_config cfg, const cmd::config& opts);

  cluster::cluster_config cfg_;
  std::string self_;
  std::string data_dir_;
  unsigned election_timeout_ms_;
  unsigned snapshot_every_;
  std::vector<std::unique_ptr<storage::rocksdb_store>> stores_;
  std::vector<std::unique_ptr<cluster::replica>> replicas_;
  std::vector<std::unique_ptr<cluster::shard_group>> groups_;
  std::unique_ptr<cluster::raft_node> raft_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // mu_
  std::thread rebalancer_;
};

}  // namespace onceq::cmd
