#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onceq::bench {

// Two durability levels, run for every system.
enum class durability {
  synced,    // fsync before answering: onceq --fsync always, JetStream sync
             // always, Redis appendfsync always
  fallback,  // "default" on the command line: each system's out-of-the-box
             // level (onceq's own default is synced, so it runs with
             // --onceq-default-fsync instead; see bench/README.md)
};

std::string_view to_string(durability d);

// What one run of onceq-bench does. Filled from the command line only.
struct bench_options {
  std::vector<std::string> systems{"onceq", "nats", "redis"};
  std::vector<std::string> workloads{"w1", "w2", "w3", "w4"};  // w5, w6: asked for
  std::vector<durability> durabilities{durability::synced, durability::fallback};

  std::size_t messages = 200000;    // Default: 200000 unique messages per run
  std::size_t single_messages = 0;  // Default: 0 = messages / 4 (one per request)
  int producers = 4;                // Default: 4
  int single_producers = 64;        // Default: 64 (w1-single's connections)
  int consumers = 4;                // Default: 4
  std::size_t batch = 100;          // Default: 100 (produce batch and consume max)
  std::size_t rate = 10000;         // Default: 10000 msg/s for W3's fixed-rate run; 0 = skip
  double rate_seconds = 5.0;        // Default: 5 s at the fixed rate
  std::size_t rate_batch = 10;      // Default: 10 messages per produce call at the fixed rate
  std::size_t history = 1'000'000;  // Default: messages through the server before w3-rate-aged
  std::size_t payload = 256;        // Default: 256 bytes
  int partitions = 4;               // Default: 4 (onceq topic partitions)
  std::size_t order_keys = 1000;    // Default: 1000 ordering keys in w6's drains
  int topics = 1;                   // Default: 1 (onceq, w1: producers spread over topics)
  double duplicate_ratio = 0.10;    // Default: 10% duplicate produces in W4
  double no_ack_ratio = 0.10;       // Default: 10% of deliveries not acked in W4
  int lease_ms = 1000;              // Default: 1000 ms lease / AckWait / claim idle in W4
  int wait_ms = 100;                // Default: 100 ms long-poll wait per fetch
  double time_limit_s = 120.0;      // Default: 120 s cap per measured phase

  // Cluster mode: onceq and JetStream each run as `cluster` nodes on
  // loopback (onceqd --cluster, nats-server routes + an R`cluster` stream).
  int cluster = 0;  // Default: 0 = one server per system
  // Which node the clients of a cluster run connect to: the leader of the
  // topic's shard / the stream (leader), or client i to node i mod N (spread).
  bool cluster_spread = false;  // Default: false (leader)
  int failover_runs = 0;        // Default: 0 = no failover measurement (cluster mode only)
  // Failover probe: one attempt's deadline (a lost write is sent again after
  // it) and the pause before retrying a refusal (503, connection refused).
  int failover_attempt_ms = 250;  // Default: 250 ms
  int failover_retry_ms = 10;     // Default: 10 ms

  std::string onceqd;                               // Default: <dir of onceq-bench>/../cmd/onceqd
  std::string onceq_default_fsync = "interval:10";  // Default: interval:10
  // More onceqd flags, split on spaces (e.g. "--shards 1 --wal-sync loop").
  std::vector<std::string> onceqd_args;  // Default: none
  std::string nats_server = "nats-server";
  std::string redis_server = "redis-server";
  std::string tmp_root = "/tmp";
  bool keep_data = false;

  std::string out_json;
  std::string out_md;
  std::string command_line;  // as typed, for the report
};

// Parses argv. Returns nullopt and fills `error` on a bad flag; `error` is
// empty and nullopt returned after --help (usage already printed).
std::optional<bench_options> parse_options(int argc, char** argv, std::string& error);

}  // namespace onceq::bench
