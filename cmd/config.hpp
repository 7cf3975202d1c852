#pragma once

// onceqd's configuration: every option struct of the server, filled from
// flags and from an optional TOML file (--config FILE) whose keys are the
// flags' names without "--"; a flag given on the command line overrides the
// file. The only place defaults are overridden.

#include <string>
#include <string_view>
#include <vector>

#include "broker/broker.hpp"
#include "cmd/log.hpp"
#include "http/options.hpp"
#include "shard/shard.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"

namespace onceq::cmd {

// The number of cores (1 when unknown), at most 256.
unsigned default_shards();

struct config {
  storage::storage_options storage = [] {
    storage::storage_options s;
    s.data_dir = "./data";  // Default: ./data
    return s;
  }();
  broker_options broker;
  shard_options shard;
  // Shards, each a broker core with its own store and one event-loop
  // thread that also serves connections (docs/DESIGN.md, "Threads").
  unsigned shards = default_shards();  // Default: the number of cores (1 in a cluster)
  bool shards_given = false;           // --shards was set (a cluster's default is 1)
  // A node of a cluster (docs/REPLICATION.md): the cluster file, this
  // node's id in it, and raft's timers. Empty: a single node.
  std::string cluster_file;               // Default: "" = a single node
  std::string node_id;                    // Required with cluster_file
  unsigned election_timeout_ms = 1'000;   // Default: raft's 1 s (randomised to 1-2 s)
  unsigned raft_snapshot_every = 65'536;  // Default: a snapshot every 65,536 entries
  // A shard group's open raft segments; raft keeps three per group and
  // reads them whole when a killed node starts (docs/OPERATIONS.md,
  // "Raft log segments").
  unsigned raft_segment_mib = 64;  // Default: 64 MiB
  // A new leader's stamps run this far behind its clock while leases of
  // earlier terms may run (docs/REPLICATION.md section 4): the clock skew
  // between nodes it absorbs.
  unsigned leader_grace_ms = 500;  // Default: 500 ms
  // --join: this node joins a running cluster whose file it was added to:
  // it bootstraps no Raft group and waits for the meta group's leader to
  // add it (docs/OPERATIONS.md, "Adding nodes").
  bool join = false;  // Default: off
  // --apply-trace: every shard replica of this node appends "index tag
  // digest" to <data-dir>/apply-trace-<shard>.log for each entry it applies
  // (a diagnostic: replicas that parted differ at some index).
  bool apply_trace = false;  // Default: off
  http::http_options http;
  millis shutdown_grace_ms = 10'000;  // Default: 10 s for open requests at SIGTERM
  // Bearer tokens, scopes and topics (docs/SECURITY.md); reread on SIGHUP.
  std::string auth_file;    // Default: "" = no auth, every route open
  log_options log;          // --log-level, --log-format
  std::string config_file;  // Default: "" = flags only
  bool show_help = false;
  bool show_version = false;
};

// Parses argv (without argv[0]); "--flag value" and "--flag=value" both work.
// With --config FILE, reads FILE first (a TOML table of flag names without
// "--" to strings, integers or booleans); flags on the command line win.
// Errors: errc::invalid_argument naming the flag, or the file and the key
// (unknown keys, values of the wrong type or out of range, TOML syntax).
result<config> parse_args(const std::vector<std::string_view>& args);

// The --help text: every flag with its default.
std::string usage();

// The keys a --config file may hold, in --help order: every flag but
// --config, --help and --version.
std::vector<std::string> config_keys();

}  // namespace onceq::cmd
