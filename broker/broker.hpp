#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.hpp"
#include "base/result.hpp"
#include "broker/commands.hpp"
#include "broker/options.hpp"
#include "storage/store.hpp"

namespace onceq {

struct core;

// The core: topics, partitions, groups, deliveries and leases, idempotency
// keys, retries and the DLQ, produce dedup. Synchronous and I/O-free apart
// from the injected store; time comes from the injected clock.
//
// A facade over the modules (docs/DESIGN.md, "The core's modules"): each
// command builds one txn (broker/txn.hpp) holding its storage batch and its
// in-memory changes, and the memory side is applied only after the store
// accepted the batch. A command that fails, on bad input, fencing, a failed
// read or a refused write, leaves memory exactly as it was.
//
// Deterministic: the same commands at the same clock readings give the same
// state and the same answers (no other source of time or randomness), the
// ground for replicating the command log (docs/REPLICATION.md).
//
// Thread safety: none. One thread (broker/runner's core thread, or a test)
// calls everything. The caller answers the client only after
// store::when_durable confirms the writes.
//
// Errors: errc::invalid_argument for bad input, errc::not_found,
// errc::failed_precondition for fencing, errc::resource_exhausted at a
// topic's backlog cap, errc::unavailable (with a retry hint) while the store
// refuses writes or a read fails.
class broker {
 public:
  // inspector reads derived keys and content hashes of produced messages:
  // needed only by topics with idempotency_key_fields or dedup_by_content
  // (a produce to one answers errc::internal without it). Not owned: it
  // must outlive the broker; may be null.
  broker(storage::store& store, const clock& time, const message_inspector* inspector,
         broker_options opts = {});
  ~broker();
  broker(const broker&) = delete;
  broker& operator=(const broker&) = delete;

  // Rebuilds in-memory state (topics, cursors, deliveries, leases, held
  // keys) from the store, dropping whatever memory held. Call before
  // anything else, and again after the store was reopened
  // (storage::resume_outcome::reopened).
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

  // An ack, and with cmd.produce the workflow step's next messages in the
  // same command: topics on this broker are written in the ack's txn,
  // others go to the outbox (outbox_record) in it. The outcome's code is
  // ok (an acked delivery's refusal is the error); produced is set when the
  // ack carried produce, or repeats one whose key's commit holds the list.
  result<ack_outcome> ack(const ack_cmd& cmd);
  result<std::vector<ack_outcome>> ack_batch(const ack_batch_cmd& cmd);

  // The outbox (docs/DESIGN.md, "Workflow steps"). On a target: stores the
  // entries above source's high-water mark, in order, moving the mark in
  // the same txn; stops at an entry its topic's backlog cap refuses (that
  // entry answers resource_exhausted, the rest are not answered). Unknown
  // topics and bad messages are refused for good (their seq still passes).
  result<std::vector<outbox_appended>> outbox_append(const outbox_append_cmd& cmd);
  // On the source: the entries done leave the outbox; stored positions go
  // to the committing key's produced list and history.
  result<void> outbox_done(const outbox_done_cmd& cmd);
  // Whether produce would store cmd's messages now (errc::not_found for an
  // unknown topic; else as produce answers), changing nothing: an ack's
  // messages for this broker's topics, checked before the ack on another
  // shard writes them to its outbox.
  result<void> check_produce(const produce_cmd& cmd);
  // Up to max entries still in the outbox, in seq order. Read only.
  result<std::vector<outbox_entry>> outbox_pending(std::size_t max) const;
  outbox_stats outbox_metrics() const;
  result<void> nack(const nack_cmd& cmd);
  result<millis> extend(const extend_cmd& cmd);  // the new lease deadline
  result<key_info> get_key(const key_query& q);
  // The key's events in q.group, oldest first (topics with key_history;
  // errc::failed_precondition otherwise). Read only.
  result<key_history> get_key_history(const key_query& q);
  result<std::int64_t> redrive(const redrive_cmd& cmd);  // messages moved
  // A page of cmd's range as cmd.group sees it; unless cmd.dry_run, its
  // would_deliver messages become pending again for the group (attempts 0,
  // last_error "replay"), in one txn. errc::not_found for an unknown topic or
  // group, errc::invalid_argument for a bad range. A dry run only reads (it
  // works while the store refuses writes).
  result<replay_reply> replay(const replay_cmd& cmd);

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

  // The whole in-memory state as canonical text (sorted, no addresses):
  // for tests that compare two cores or a core before and after a failed
  // command.
  std::string describe_state() const;

 private:
  // errc::unavailable while the store refuses writes (store::health).
  result<void> writable() const;

  std::unique_ptr<core> c_;
};

}  // namespace onceq
