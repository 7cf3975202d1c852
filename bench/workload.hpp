#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/driver.hpp"
#include "bench/options.hpp"

namespace onceq::bench {

enum class workload_kind {
  w1_batch,      // produce only, batches of --batch
  w1_single,     // produce only, one message per request
  w2_drain,      // preload a backlog (not timed), then drain it
  w2_piggyback,  // w2_drain with each batch's acks carried on the next fetch
  w2_stream,     // w2_drain through onceq's streaming consume
  w3_e2e,        // produce (batched) and consume concurrently, as fast as possible
  w3_rate,       // produce one message per request at a fixed total rate, consume
  w3_rate_aged,  // w3_rate on a server that first moved --history messages
  w4_faults,     // w3_e2e with duplicate produces and unacked deliveries
  // Workflow steps (onceq only): a preloaded topic A is consumed, and each
  // delivery is acked and produces one message to topic B.
  w5_step_ack_produce,  // one POST /v1/ack with "produce" per step
  w5_step_separate,     // POST /v1/produce, then POST /v1/ack, per step
  // w2_drain of messages over --order-keys ordering keys (onceq only).
  w6_drain_ordered,    // topic created with "ordering":"key"
  w6_drain_unordered,  // topic created with "ordering":"none"
};

std::string_view id_of(workload_kind k);                        // "w1-batch", ...
std::string describe(workload_kind k, const bench_options& o);  // for the report

// The workload names on the command line (w1..w4) as the runs they mean.
std::vector<workload_kind> expand_workloads(const bench_options& o);

// One measured run: one system, one durability level, one workload, on a
// fresh server and data dir.
struct run_result {
  std::string system;
  std::string version;
  std::string workload;    // id_of()
  std::string durability;  // "synced" / "default"
  std::string setting;     // the server's exact setting
  std::string clients;     // cluster mode: which nodes the clients used
  bool ran = false;
  std::string skipped;  // why it did not run
  std::string error;    // why it stopped early
  bool timed_out = false;

  std::size_t target = 0;    // unique messages asked for
  std::size_t messages = 0;  // unique messages completed (produced for W1, acked otherwise)
  double seconds = 0;
  double msgs_per_s = 0;

  std::uint64_t latency_samples = 0;  // end-to-end: produce call -> ack answered
  double p50_ms = -1;
  double p99_ms = -1;
  double p999_ms = -1;
  double max_ms = -1;

  std::uint64_t peak_rss_kb = 0;
  double server_cpu_s = 0;
  double server_cpu_s_per_m = 0;
  double client_cpu_s_per_m = 0;

  // W4 bookkeeping (and sanity everywhere).
  std::size_t sent = 0;  // produce messages sent, duplicates included
  std::size_t duplicates_sent = 0;
  std::size_t duplicates_detected = 0;  // the server said "duplicate"
  std::size_t deliveries = 0;
  std::size_t not_acked = 0;  // deliveries dropped on purpose ("crash")
  std::size_t acks_refused = 0;
  std::size_t keys_more_than_once = 0;  // keys processed (acked) more than once
  std::size_t extra_processings = 0;    // acked deliveries beyond the first per key
  std::size_t steps_pending = 0;        // w5: produced messages answered "pending" (outbox)
  std::size_t next_topic_found = 0;     // w5: work items whose next message topic B holds
  key_check keys_checked;
  std::string server_exit;
};

// Runs one workload against `driver` at `d` on a fresh server and data dir
// (removed afterwards unless --keep-data or the run failed), showing a
// progress line on stderr. Never throws: failures land in
// run_result::error / skipped.
run_result run_workload(system_driver& driver, workload_kind kind, durability d,
                        const bench_options& o);

}  // namespace onceq::bench
