#pragma once

// A real onceqd cluster for one test or run: the cluster file, one
// server_process per node (each on its own data directory), kill -9 and
// restart of one node by its own PID, and GET /v1/cluster as data.
//
//   onceqd --cluster FILE --node-id ID --data-dir DIR [--shards N]
//
// FILE has one [[node]] table per node (id, http, raft); group g of a node
// speaks Raft on its raft port + g. A node is ready when it printed its
// listening line and its GET /v1/cluster answers 200.
//
// Thread safety: none; drive a local_cluster from one thread (the nodes are
// tied to the thread that forks them, PR_SET_PDEATHSIG). The free functions
// may be called from any thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http_client.hpp"
#include "server_process.hpp"

namespace onceq::itest {

// Milliseconds since t (steady clock).
inline long long ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

struct cluster_member {
  std::string id;               // "n1"
  std::string host;             // "127.0.0.1": its http and raft listen here
  std::uint16_t http_port = 0;  // its API
  std::uint16_t raft_port = 0;  // group g on raft_port + g
};

// The cluster file of these members: one [[node]] table each, in order.
std::string cluster_file_text(const std::vector<cluster_member>& members,
                              std::string_view head = {});

// n members n1..n<n> on 127.0.0.1 whose http port and raft ports raft + 0 ..
// raft + k_max_test_groups - 1 were free a moment ago (each bound and
// released), below the kernel's ephemeral range so that no outgoing
// connection takes them meanwhile. Throws std::runtime_error if none are
// found.
inline constexpr int k_max_test_groups = 10;
std::vector<cluster_member> free_loopback_members(int n, std::uint64_t seed);

// GET /v1/cluster.
struct cluster_shard_status {
  unsigned shard = 0;
  std::string leader;  // "" while none is known
  std::uint64_t term = 0;
  std::uint64_t commit_index = 0;
  std::uint64_t applied_index = 0;
  std::uint64_t last_index = 0;
  std::string failure;  // why the shard stopped applying on that node; "" when healthy
  std::vector<std::string> topics;
  std::vector<std::string> replicas;  // the placement: first = preferred leader
  std::uint64_t config_version = 0;
  bool held_here = false;           // the answering node runs this shard's group
  std::vector<std::string> voters;  // its raft configuration's voters there (held_here)
  // While a move runs: from ("" when nothing leaves), to, state.
  std::string moving_from, moving_to, moving_state;
};
struct cluster_node_status {
  std::string id;
  std::string http;
  std::string raft;
  bool reachable = false;
  std::string state;  // active, draining, drained, down
  std::size_t replicas = 0;
};
struct cluster_status {
  std::string node;  // who answered
  std::vector<cluster_node_status> nodes;
  std::vector<cluster_shard_status> shards;
  std::string meta_leader;
  bool placed = false;
  std::uint64_t moves_started = 0, moves_finished = 0, moves_cancelled = 0;
  const cluster_node_status* node_status(std::string_view id) const;

  // The shard holding the topic, or nullptr.
  const cluster_shard_status* shard_of_topic(std::string_view topic) const;
  const cluster_shard_status* shard(unsigned s) const;
};
// nullopt unless a 200 with the expected JSON shape.
std::optional<cluster_status> parse_cluster_status(const http_response& r);

// One request to host:port on a fresh connection; nullopt on a network
// error or timeout.
std::optional<http_response> request_once(
    const std::string& host, std::uint16_t port, std::string_view method, std::string_view target,
    std::string_view body = {}, const header_list& headers = {},
    std::chrono::milliseconds timeout = std::chrono::seconds(3));

// `CLI --url http://127.0.0.1:<port> args...` (the onceq CLI at cli_path),
// stderr into the output.
struct cli_run {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};
cli_run run_cli(const std::string& cli_path, std::uint16_t port, const std::string& args);

class local_cluster {
 public:
  struct options {
    std::vector<cluster_member> members;
    int shards = 0;      // --shards; 0 = onceqd's default
    std::string onceqd;  // "" = the build's onceqd
    std::string fsync = "always";
    // cluster.toml, <id>/ (data) and <id>.log go here; "" = a fresh
    // /tmp/onceq-cluster-XXXXXX, removed afterwards unless ONCEQ_IT_KEEP_TMP
    // is set or keep_root() was called.
    std::string root;
    std::vector<std::string> extra_args;  // for every node
    // Per member (same order), run before onceqd ("ip netns exec NS"); may
    // be shorter than members.
    std::vector<std::vector<std::string>> command_prefixes;
    // Per member (same order), its --data-dir; "" or missing = root/<id>.
    std::vector<std::string> data_dirs;
    std::chrono::milliseconds start_timeout = std::chrono::seconds(30);
    // Top-level keys of the cluster file ("replicas = 3\n"), before the nodes.
    std::string file_head;
    // Members started by the constructor: the first start_count (the others
    // are listed in the file; restart(i) starts one).
    std::size_t start_count = static_cast<std::size_t>(-1);
    // Members written to the cluster file at first: the first file_count
    // (write_file() adds the others later, as a file that grows).
    std::size_t file_count = static_cast<std::size_t>(-1);
  };

  // Writes the cluster file and starts every node together; throws
  // std::runtime_error (after killing them) unless all become ready.
  explicit local_cluster(options opts);
  ~local_cluster();
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  std::size_t size() const { return nodes_.size(); }
  const cluster_member& member(std::size_t i) const { return opts_.members.at(i); }
  server_process& node(std::size_t i) { return *nodes_.at(i); }
  // Index of the member with that id, or -1.
  int index_of(std::string_view id) const;
  const std::string& root() const { return root_; }
  const std::string& file() const { return file_; }
  void keep_root() { keep_ = true; }

  // Rewrites the cluster file with the first `count` members (and the
  // file_head): nodes read it at their next start.
  void write_file(std::size_t count);
  // Flags added to node i's command line from its next start on.
  void add_args(std::size_t i, const std::vector<std::string>& args);
  // SIGKILL node i and reap it.
  void kill9(std::size_t i) { nodes_.at(i)->kill9(); }
  // Starts node i again on its data directory and waits until ready;
  // throws std::runtime_error.
  void restart(std::size_t i) { nodes_.at(i)->start(); }
  bool alive(std::size_t i) { return nodes_.at(i)->alive(); }

  // One request to node i on a fresh connection (nullopt: no answer).
  std::optional<http_response> request(std::size_t i, std::string_view method,
                                       std::string_view target, std::string_view body = {},
                                       const header_list& headers = {},
                                       std::chrono::milliseconds timeout = std::chrono::seconds(3));
  // GET /v1/cluster from node i.
  std::optional<cluster_status> status(std::size_t i,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(3));
  // The leader of the shard holding `topic` (shard 0 if topic is "") as
  // the first live node that knows one says; "" if none does.
  std::string leader_of(std::string_view topic = {});
  // Polls until a live node names a leader for the topic's shard (with an
  // empty topic: for every shard) and that leader, alive, names itself.
  // Returns the leader of the topic's shard (of shard 0), or "" on timeout.
  std::string wait_for_leader(std::string_view topic, std::chrono::milliseconds timeout);

  // Polls until a live node reports the first placement done and every
  // shard led by its preferred leader (the first of its replicas), so that
  // no handover of the placement follows; false on timeout.
  bool wait_settled(std::chrono::milliseconds timeout);
  // The tail of every node's stderr, headed by its id.
  std::string log_tails(std::size_t max_bytes_each = 3000) const;

 private:
  options opts_;
  std::string root_;
  std::string file_;
  bool temp_root_ = false;
  bool keep_ = false;
  std::vector<std::unique_ptr<server_process>> nodes_;
};

}  // namespace onceq::itest
