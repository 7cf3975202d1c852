#pragma once

// What the HTTP edge needs of the cluster a node belongs to (cmd/ implements
// it over cluster::raft_node): this node's id (X-Onceq-Node), where another
// node serves its API (forwarding), GET /v1/cluster and the cluster's lines
// of /metrics. A single node has none (router's cluster is null).
//
// Thread safety: every member may be called from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

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
};

}  // namespace onceq::http
