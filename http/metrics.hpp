#pragma once

// Prometheus text exposition for GET /metrics: the broker's per topic/group
// counters and gauges (from broker::metrics()), the store's WAL sync
// statistics, and the HTTP layer's own request latency histogram and
// response counters per route.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.hpp"
#include "broker/commands.hpp"
#include "storage/store.hpp"
#include "storage/sync_stats.hpp"

namespace onceq::http {

// Counters of the listener and its connections, shared by the server, its
// sessions and the /metrics renderer. Lock-free; any thread.
struct connection_stats {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> rejected{0};  // closed at accept: max_connections reached
  std::atomic<std::int64_t> open{0};
  std::atomic<std::uint64_t> header_timeouts{0};         // cut: header block not complete in time
  std::atomic<std::uint64_t> tls_handshake_failures{0};  // incl. plain HTTP on the TLS port
  std::atomic<std::uint64_t> migrations{0};  // connections moved to their topics' shard's loop
  std::atomic<std::uint64_t> spreads{0};     // connections moved off a saturated loop
  // Idle cores in thousandths as the last placement decision read them
  // (shard/cpu_idle.hpp); -1: none read yet, or unknown.
  std::atomic<std::int64_t> idle_cores_milli{-1};
};

// Appends onceq_connections_* and onceq_http_header_timeouts_total.
void render_connection_metrics(std::string& out, const connection_stats& s);

// Request latency (base/histogram.hpp's buckets) and status counts
// per route label. observe() is
// lock-free and may be called from any thread; render() reads a snapshot
// that is consistent per bucket (not across buckets).
class http_metrics {
 public:
  // labels: one per route (index = the id passed to observe()).
  explicit http_metrics(std::vector<std::string> labels);
  ~http_metrics();

  void observe(std::size_t route, double seconds, unsigned status) noexcept;

  // Appends the onceq_http_* families.
  void render(std::string& out) const;

  std::uint64_t count(std::size_t route) const noexcept;

  // The server's connection counters, rendered with the rest. The server
  // updates them through a const router: they are shared, not state of
  // this object.
  connection_stats& connections() const noexcept { return *connections_; }

 private:
  struct series;
  std::vector<std::string> labels_;
  std::unique_ptr<series[]> series_;
  std::unique_ptr<connection_stats> connections_ = std::make_unique<connection_stats>();
};

// Appends the onceq_* broker families for topics observed at now_ms.
void render_broker_metrics(std::string& out, const std::vector<topic_info>& topics, millis now_ms);

// Appends onceq_wal_sync_duration_seconds (histogram) and
// onceq_wal_sync_waiters_total (counter) from a store's snapshot.
void render_wal_sync_metrics(std::string& out, const storage::sync_stats& s);

// Appends onceq_storage_writable (gauge: 1 when the store accepts writes,
// 0 while a disk/IO fault keeps it from writing).
void render_storage_metrics(std::string& out, const storage::store_health& h);

// What /metrics shows of one shard.
struct shard_gauges {
  std::uint32_t id = 0;
  storage::store_health health;
  std::size_t queue_depth = 0;        // commands posted from other loops, not run yet
  std::size_t topics = 0;             // topics placed on it (DLQs included)
  std::uint64_t iterations = 0;       // loop iterations so far
  std::uint64_t write_stalls = 0;     // writes the loop waited for in a storage write stall
  std::uint64_t disk_reads = 0;       // commands whose reads went to the reader thread
  std::uint64_t loop_disk_reads = 0;  // of those, run again reading from the disk on the loop
  std::uint64_t outbox_depth = 0;     // messages acks produced for other shards, not taken yet
  double outbox_age_seconds = 0;      // how long the oldest of them has waited (0: none)
  double loop_busy = 0;               // fraction of the last window the loop ran on a core
  double loop_waiting = 0;            // fraction of it the loop waited for a core
};
// onceq_shard_writable, onceq_shard_queue_depth, onceq_shard_topics,
// onceq_shard_write_stalls_total, onceq_shard_disk_reads_total,
// onceq_shard_loop_disk_reads_total, onceq_shard_loop_iterations_total,
// onceq_shard_outbox_depth, onceq_shard_outbox_age_seconds,
// onceq_shard_loop_busy_ratio and onceq_shard_loop_cpu_wait_ratio, one
// series per shard.
void render_shard_metrics(std::string& out, const std::vector<shard_gauges>& shards);

// Escapes a Prometheus label value (\\, \" and \n).
std::string escape_label(std::string_view v);

}  // namespace onceq::http
