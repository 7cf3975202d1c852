#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/commands.hpp"
#include "storage/base/clock.hpp"
#include "storage/base/result.hpp"
#include "storage/store.hpp"

namespace onceq {

struct broker_options {
  std::uint32_t max_partitions = 1024;         // Default: 1024 per topic
  std::size_t max_batch = 1000;                // Default: 1000 messages / acks per request
  std::int64_t max_lease_ms = 3'600'000;       // Default: 1 hour
  std::int64_t max_delay_ms = 31'536'000'000;  // Default: 365 days (delay_ms, nack delay_ms)
  // Recently produced messages kept in memory so that consumers near the
  // tail do not read them back from the store. Default: 32 MiB.
  std::size_t message_cache_bytes = 32ull << 20;
};

// The core: topics, partitions, groups, deliveries and leases, idempotency
// keys, retries and the DLQ, produce dedup. Synchronous and I/O-free apart
// from the injected store; time comes from the injected clock.
//
// Thread safety: none. One thread (broker/runner's core thread, or a test)
// calls everything. Every mutating call writes its changes to the store in
// one atomic batch before it returns; the caller answers the client only
// after store::when_durable confirms them.
//
// Errors: errc::invalid_argument for bad input (nothing changes),
// errc::not_found, errc::failed_precondition for fencing (nothing changes),
// errc::unavailable when the store refuses writes.
class broker {
 public:
  broker(storage::store& store, const clock& time, broker_options opts = {});
  ~broker();
  broker(const broker&) = delete;
  broker& operator=(const broker&) = delete;

  // Rebuilds in-memory state (topics, cursors, deliveries, leases, held
  // keys) from the store. Call once, before anything else.
  result<void> recover();

  result<topic_created> create_topic(const create_topic_cmd& cmd);
  std::vector<std::string> list_topics() const;  // sorted
  result<topic_info> get_topic(std::string_view name) const;
  result<void> delete_topic(std::string_view name);

  // Stores the messages atomically (all or none), or answers the original
  // partition/offset for a dedup id seen inside the topic's window.
  result<produce_reply> produce(const produce_cmd& cmd);

  // Leases up to max_messages to owner. An empty vector: nothing available.
  result<std::vector<delivery>> consume(const consume_cmd& cmd);

  result<void> ack(const ack_cmd& cmd);
  result<std::vector<ack_outcome>> ack_batch(const ack_batch_cmd& cmd);
  result<void> nack(const nack_cmd& cmd);
  result<millis> extend(const extend_cmd& cmd);  // the new lease deadline
  result<key_info> get_key(const key_query& q);
  result<std::int64_t> redrive(const redrive_cmd& cmd);  // messages moved

  // Processes everything due at clock.now(): lease expiries, delayed and
  // backed-off messages becoming ready, retention. Cheap when nothing is due.
  void tick();
  // The earliest time tick() has work to do, if any.
  std::optional<millis> next_deadline() const;

  // Topics that got messages ready for delivery since the last call (wakes
  // long-polling consumers). Clears the set.
  std::vector<std::string> take_ready_topics();
  // Committed keys since the last call, as (topic, group, tenant, key) keys
  // of storage::keys::idem_key (wakes GET /v1/keys?wait_ms). Clears the set.
  std::vector<std::string> take_committed_keys();

  std::vector<topic_info> metrics() const;

  struct state;

 private:
  std::unique_ptr<state> s_;
};

}  // namespace onceq
