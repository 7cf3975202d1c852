#pragma once

// The cluster file: which nodes exist, where each one serves its API and
// where it speaks Raft. One TOML file, the same on every node:
//
//   replicas = 3              # optional: nodes holding each shard (default 3)
//   dead_after_ms = 600000    # optional: a node down this long loses its replicas
//
//   [[node]]
//   id = "n1"
//   http = "127.0.0.1:8081"   # the node's API listener
//   raft = "127.0.0.1:7081"   # its Raft peer address (see below)
//
// Raft ids: the node at position k (0-based) of the file has raft id k + 1.
// Raft stores these ids in every group's log and in its votes, so the file
// may only grow at the end: reordering or deleting nodes would give a data
// dir another node's identity (raft_node refuses to start on a data dir
// whose recorded node id or raft id disagrees with the file).
//
// Raft address of a group: raft's TCP transport listens on one address per
// Raft instance, so group g of a node listens on the node's raft port + g
// (group 0 on the port written in the file). check_ports(groups) verifies
// that these ranges fit and do not overlap.
//
// Thread safety: a cluster_config is a value; const members may be called
// from any thread.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace onceq::cluster {

using raft_id = std::uint64_t;

// Longest node id; ids match [A-Za-z0-9_.-]+.
inline constexpr std::size_t k_max_node_id = 64;
// Largest cluster file. A shard's group has `replicas` voters (at most
// k_max_replicas: more only slow commits), the meta group 3 or 5.
inline constexpr std::size_t k_max_nodes = 16;
inline constexpr std::size_t k_max_replicas = 7;
// The cluster file's top-level keys: replicas (nodes holding each shard)
// and dead_after_ms (how long a node may be down before its replicas are
// placed on other nodes; 0: never).
inline constexpr std::size_t k_default_replicas = 3;
inline constexpr std::uint64_t k_default_dead_after_ms = 600'000;

struct node_config {
  std::string id;           // "n1"
  std::string http;         // "127.0.0.1:8081" as written ("[::1]:8081" is allowed)
  std::string http_host;    // "127.0.0.1" ("::1" without brackets)
  std::uint16_t http_port;  // 8081
  std::string raft_host;    // "127.0.0.1" (IPv4 or a name: raft's TCP transport has no IPv6)
  std::uint16_t raft_port;  // 7081: group 0's port; group g listens on raft_port + g
};

class cluster_config {
 public:
  // Parses the text of a cluster file; source names it in error messages
  // (a path, or "<string>"). self_id is this node's --node-id.
  // Errors: errc::invalid_argument "SOURCE: ..." for TOML syntax (with
  // line:column), unknown keys, a missing or ill-typed field, a bad id or
  // address, duplicates, 0 or more than 7 nodes, self_id not in the file.
  static result<cluster_config> parse(std::string_view toml_text, std::string_view source,
                                      std::string_view self_id);
  // Reads and parses the file at path (errc::invalid_argument when it cannot
  // be read).
  static result<cluster_config> load(const std::string& path, std::string_view self_id);

  // Copies of each shard as written (replicas_of() caps it at the nodes).
  std::size_t replicas() const noexcept { return replicas_; }
  // How many nodes hold each shard: min(replicas, nodes).
  std::size_t replicas_of() const noexcept { return std::min(replicas_, nodes_.size()); }
  // Whether every node holds every shard (the placement is the file).
  bool full_replication() const noexcept { return replicas_ >= nodes_.size(); }
  std::uint64_t dead_after_ms() const noexcept { return dead_after_ms_; }
  // Every node, in file order.
  const std::vector<node_config>& nodes() const noexcept { return nodes_; }
  const node_config& self() const noexcept { return nodes_[self_]; }
  raft_id self_raft_id() const noexcept { return self_ + 1; }

  // Node id -> raft id (position + 1); nullopt for an unknown id.
  std::optional<raft_id> raft_id_of(std::string_view node_id) const;
  // Raft id -> node; nullptr for 0 or an id past the file.
  const node_config* node_of(raft_id id) const noexcept;

  // "host:port" that group g of node n listens on for Raft.
  std::string raft_address(const node_config& n, unsigned group) const;
  // The node whose raft id is the preferred leader of group g: the nodes
  // take turns, group g prefers the node at position g mod n.
  raft_id preferred_leader(unsigned group) const noexcept;

  // Whether `groups` groups fit: every node's ports raft_port ..
  // raft_port + groups - 1 are <= 65535 and no two nodes on the same host
  // share one of them, nor a node's http port on that host.
  // Errors: errc::invalid_argument naming the nodes.
  result<void> check_ports(unsigned groups) const;

 private:
  std::vector<node_config> nodes_;
  std::size_t self_ = 0;
  std::size_t replicas_ = k_default_replicas;
  std::uint64_t dead_after_ms_ = k_default_dead_after_ms;
};

}  // namespace onceq::cluster
