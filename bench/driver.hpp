#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench/message.hpp"
#include "bench/options.hpp"
#include "bench/process.hpp"

namespace onceq::bench {

// How consumers fetch and ack.
enum class consume_mode {
  batch,      // fetch a batch (long-poll), then ack it: two round trips per cycle
  piggyback,  // the acks ride on the next fetch: onceq's consume `acks`, Redis
              // XACK pipelined with XREADGROUP; JetStream acks asynchronously
              // anyway, so its row is its batch row
  stream,     // onceq's streaming consume (no max_messages); others: not run
  // Workflow steps (onceq only): each delivery of the run's topic is acked
  // and produces one message to run_setup::next_topic.
  step_ack_produce,  // one POST /v1/ack with "produce" (one command on the server)
  step_separate,     // POST /v1/produce of the next message, then POST /v1/ack
};

inline bool is_step(consume_mode m) {
  return m == consume_mode::step_ack_produce || m == consume_mode::step_separate;
}

// The per-run names and settings every driver needs. Each run uses a fresh
// server, so names only have to be unique within it.
struct run_setup {
  std::string topic = "bench";  // topic / stream / stream key
  std::string group = "g";      // consumer group / durable consumer
  int lease_ms = 30000;         // lease / AckWait / claim idle time
  int partitions = 1;
  int topics = 1;  // onceq, produce only: producer i writes topic_of(i)
  int consumers = 1;
  std::size_t batch = 100;
  int wait_ms = 100;
  consume_mode mode = consume_mode::batch;
  // Workflow steps (is_step(mode)): the topic each step produces to,
  // created by prepare() with the same settings as `topic`.
  std::string next_topic;
  // onceq: the topic's "ordering" setting ("key" / "none"); "" = not sent.
  std::string ordering;
  // > 0: message i gets the ordering key "o<i mod order_keys>" (onceq's
  // message `key`; the idempotency key stays unique per message).
  std::size_t order_keys = 0;
  // Cluster failover probe: producers ride out a dead node. A write attempt
  // that fails (connection lost or refused, no answer within attempt_ms, no
  // leader) is sent again, the same message id, after retry_ms, through
  // another node when the one used is gone, until it is acknowledged.
  bool failover = false;
  int attempt_ms = 250;
  int retry_ms = 10;
};

// One producer connection. Used by one thread at a time.
// produce() with one message uses the system's one-message call (onceq
// single produce, JetStream sync publish, one XADD); with several, its
// batched form (onceq batch produce, JetStream async publish + wait for all
// acks, pipelined XADDs). Returns how many the server reported as
// duplicates. Throws std::runtime_error on any failure.
class producer {
 public:
  virtual ~producer() = default;
  virtual std::size_t produce(std::span<const bench_message> batch) = 0;
  // When the attempt that got the last produce() acknowledged was sent
  // (steady_now_ns()); 0 if the producer does not track it. A failover
  // producer may have sent several.
  virtual std::uint64_t last_attempt_ns() const { return 0; }
  // The node that the last acknowledged produce() went through ("" if not
  // known).
  virtual std::string last_node() const { return {}; }
};

// One consumer connection in the run's group. Used by one thread at a time.
class consumer {
 public:
  virtual ~consumer() = default;
  // Receives up to `max` messages, waiting up to `wait` for the first.
  // Returns their payloads; the views stay valid until the next fetch().
  virtual const std::vector<std::string_view>& fetch(std::size_t max,
                                                     std::chrono::milliseconds wait) = 0;
  // Acks the messages at `which` (indices into the last fetch) and returns,
  // per index, whether the server accepted the ack (a stale or superseded
  // delivery may be refused). Returns after the server has answered, except
  // in consume_mode::piggyback: there the acks go out with the next fetch
  // (or flush()), this returns all accepted, and a refusal found then
  // throws.
  virtual std::vector<char> ack(std::span<const std::size_t> which) = 0;
  // Sends acks still held (piggyback), waiting for the answer.
  virtual void flush() {}
  // What one workflow step got.
  struct step_outcome {
    bool acked = false;
    // ack-produce to another shard's topic: the answer said "pending" (in
    // the outbox; the relay had not placed it when the answer went out).
    bool pending = false;
  };
  // Workflow step (is_step(run_setup::mode)): acks delivery i of the last
  // fetch and produces its next message (same payload, the same key with
  // its own msg id) to run_setup::next_topic, as the mode says. Throws on
  // any failure but a refused ack.
  virtual step_outcome step(std::size_t /*i*/) { throw std::runtime_error("no workflow steps"); }
};

// Outcome of reading back committed keys (onceq only: GET /v1/keys).
struct key_check {
  std::size_t sampled = 0;
  std::size_t committed = 0;
  std::string first_problem;
};

// A system running as a cluster (--cluster N): what the failover probe
// needs. Nodes are numbered 0..size()-1. Throws std::runtime_error on
// failures.
class cluster_control {
 public:
  virtual ~cluster_control() = default;
  virtual std::size_t size() const = 0;
  virtual std::string node_name(std::size_t i) const = 0;
  // The node leading the topic of `s` now (onceq: the leader of its shard;
  // JetStream: the stream leader). Clients made after this call connect as
  // --cluster-clients says, relative to this leader.
  virtual std::size_t leader_of(const run_setup& s) = 0;
  // kill -9 of node i. Returns how it ended.
  virtual std::string kill(std::size_t i) = 0;
  // Starts node i again (same data dir and ports) and waits until it has
  // rejoined: it serves, the topic of `s` has a leader, and node i has
  // caught up with the leader's log as it was when i started.
  virtual void restart(std::size_t i, const run_setup& s, std::chrono::milliseconds timeout) = 0;
  // Which nodes the clients use, for the report.
  virtual std::string client_placement(const run_setup& s) const = 0;
};

// One system under test: starts its server, sets up a run, opens
// connections. Drivers throw std::runtime_error on setup failures.
class system_driver {
 public:
  virtual ~system_driver() = default;

  virtual std::string_view name() const = 0;
  // The exact server setting used at `d`, for the report.
  virtual std::string setting(durability d) const = 0;
  // False (with the reason) when this server cannot run at `d`.
  virtual bool supports(durability d, std::string& why) = 0;
  // False (with the reason) when it has no such consume mode.
  virtual bool supports(consume_mode m, std::string& why) {
    if (m == consume_mode::stream) {
      why = "no streaming consume";
      return false;
    }
    if (is_step(m)) {
      why = "no ack that produces (onceq's workflow steps)";
      return false;
    }
    return true;
  }
  // Server version, for the report.
  virtual std::string version() = 0;

  // Starts a fresh server with its data in `dir` and waits until it serves.
  virtual void start(durability d, const std::filesystem::path& dir) = 0;
  // Creates the topic / stream / group for `s`.
  virtual void prepare(const run_setup& s) = 0;
  virtual std::unique_ptr<producer> make_producer(const run_setup& s, int index) = 0;
  virtual std::unique_ptr<consumer> make_consumer(const run_setup& s, int index) = 0;
  virtual key_check check_keys(const run_setup&, std::span<const std::uint64_t>) { return {}; }
  virtual server_process& process() = 0;
  // CPU and peak RSS of the server: the sum over a cluster's nodes.
  virtual process_usage usage() { return process().usage(); }
  // Non-null when this system runs as a cluster.
  virtual cluster_control* cluster() { return nullptr; }
  // Stops the server; returns how it ended.
  virtual std::string stop() = 0;
};

// Fills in what every result (run_result, failover_result) says about the
// system it ran on; false, with r.skipped saying why, when drv cannot run d.
template <class Result>
bool describe_system(Result& r, system_driver& drv, durability d) {
  r.system = std::string(drv.name());
  r.durability = std::string(to_string(d));
  r.setting = drv.setting(d);
  if (std::string why; !drv.supports(d, why)) {
    r.skipped = why;
    return false;
  }
  r.version = drv.version();
  return true;
}

}  // namespace onceq::bench
