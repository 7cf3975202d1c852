#pragma once

// What the HTTP edge needs of the cluster a node belongs to (cmd/ implements
// it over cluster::raft_node): this node's id (X-Onceq-Node), where another
// node serves its API (forwarding), GET /v1/cluster and the cluster's lines
// of /metrics. A single node has none (router's cluster is null).
//
// Thread safety: every member may be called from any thread.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/result.hpp"

namespace onceq::http {

struct node_address {
  std::string host;
  std::uint16_t port = 0;
};

class cluster_view {
 public:
  virtual ~cluster_view() = default;
  // This node's id, as in the cluster file.
  virtual const std::string& self() const = 0;
  // The id of the node at position n - 1 of the cluster file (error::leader);
  // "" for a position past the file.
  virtual std::string node_at(unsigned n) const = 0;
  // The API address of node id; nullopt for an id not in the file.
  virtual std::optional<node_address> http_of(std::string_view node) const = 0;
  // GET /v1/cluster's body (docs/API.md, "Clusters").
  virtual nlohmann::json status() const = 0;
  // Appends the per-shard replication series to a /metrics body.
  virtual void render_metrics(std::string& body) const = 0;

  // Requests to the meta group (placement; docs/API.md, "Clusters"). done
  // runs once, on any thread: ok once applied; errc::unavailable with
  // error::leader set when another node leads the meta group (the router
  // forwards there); errc::not_found for an unknown node;
  // errc::failed_precondition when the meta group refused it.
  // POST /v1/cluster/nodes/{id}/drain
  virtual void drain(std::string_view node, std::function<void(result<void>)> done) const {
    (void)node;
    done(make_error(errc::not_found, "this node does not place shards"));
  }
  // POST /v1/cluster/rebalance
  virtual void rebalance(std::function<void(result<void>)> done) const {
    done(make_error(errc::not_found, "this node does not place shards"));
  }
  // POST /v1/cluster/shards/{shard}/move: one replica of shard moves from
  // node `from` to node `to` (an active node that does not hold it).
  // errc::invalid_argument for a shard or node that does not exist.
  virtual void move_shard(std::uint32_t shard, std::string_view from, std::string_view to,
                          std::function<void(result<void>)> done) const {
    (void)shard;
    (void)from;
    (void)to;
    done(make_error(errc::not_found, "this node does not place shards"));
  }
  // POST /v1/internal/meta: another node's entry for the meta group.
  virtual void meta_submit(std::string entry, std::function<void(result<void>)> done) const {
    (void)entry;
    done(make_error(errc::not_found, "this node does not place shards"));
  }
};

}  // namespace onceq::http
