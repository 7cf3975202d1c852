#pragma once

// One shard's replicated state (docs/REPLICATION.md, sections 1 and 2): a
// broker over the shard's store, applying the entries of the shard's Raft
// group (broker/log_entry.hpp) in log order at their stamped time
// (broker/apply.hpp), with the applied position written in the batch of
// every entry that writes (storage/applied_index_store.hpp). It is the
// cluster::state_machine of that group.
//
// Faults. A command's own refusal (a bad field, a fenced ack, an unknown
// topic) is deterministic: every replica gives it, and it is the reply. A
// local fault is not: an entry this build cannot decode, or a store that
// refuses the write (errc::unavailable, errc::internal). apply() then
// throws, and raft_node stalls the group on this replica (the others go
// on) until a snapshot or a restart replaces its state.
//
// Snapshots carry every column of the store (with the applied position) in
// one buffer, which raft 0.15 moves whole: right for small states and for
// the tests; a RocksDB shard will ship a checkpoint on a side channel
// instead (docs/REPLICATION.md, open problem 2).
//
// Thread safety: none; raft_node calls it on its loop thread, one call at
// a time. Reads of the broker (status, tests) must not overlap apply().

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "broker/apply.hpp"
#include "broker/broker.hpp"
#include "cluster/raft_node.hpp"
#include "storage/applied_index_store.hpp"
#include "storage/store.hpp"

namespace onceq::cluster {

class replica final : public state_machine {
 public:
  // What the proposer receives for an entry's result as raft_node's reply
  // (text in tests). Must be deterministic. Null: the reply is "" and the
  // typed result waits in take_reply() instead.
  using render_fn = std::function<std::string(const result<log_reply>&)>;
  // Called on the loop thread after each entry applied (not after one
  // skipped), with its tag and the topic of a one-topic command ("" for a
  // tick, a restored snapshot, or a command that moves messages between
  // topics): e.g. to wake a shard's parked consumers.
  using applied_fn = std::function<void(log_tag, std::string_view topic)>;

  // store: the shard's store, which must outlive the replica. inspector: as
  // broker's (may be null).
  replica(storage::store& store, const message_inspector* inspector, broker_options opts,
          render_fn render = nullptr);

  void on_applied(applied_fn fn) { applied_hook_ = std::move(fn); }

  // Called on the loop thread after each entry applied (not after one
  // skipped), with its index, its tag and the digest of what it wrote
  // (applied_index_store::last_digest, 0 for nothing): onceqd's
  // --apply-trace, which the cluster crash loops compare across replicas.
  using trace_fn = std::function<void(std::uint64_t index, log_tag, std::uint64_t digest)>;
  void on_trace(trace_fn fn) {
    applied_.keep_digests(fn != nullptr);
    trace_ = std::move(fn);
  }

  // The typed result of the entry applied last, once (render_fn null). A
  // propose callback runs right after the apply of its entry, before the
  // next entry is applied (raft_node.hpp), so it takes its own entry's
  // result here. nullopt: taken already, or the entry was skipped.
  std::optional<result<log_reply>> take_reply() { return std::exchange(last_, std::nullopt); }

  // The earliest time the broker's timers have work (broker::next_deadline)
  // as of the last apply, or -1 for none: when the leader proposes a tick.
  // Any thread.
  millis next_deadline() const noexcept { return next_deadline_.load(std::memory_order_relaxed); }

  // Reads the applied position, rebuilds the broker from the store and
  // resumes the clock there. Call once, before raft_node::start.
  result<void> open();

  std::string apply(std::uint64_t index, std::string_view entry) override;
  std::string snapshot() override;
  void restore(std::string_view snapshot) override;

  broker& core() noexcept { return broker_; }
  // Snapshots restored into this replica since it was made (loop thread).
  std::uint64_t restores() const noexcept { return restores_; }
  storage::applied_position applied() const noexcept { return applied_.applied(); }

 private:
  storage::store& store_;
  storage::applied_index_store applied_;
  log_clock clock_;
  broker broker_;
  render_fn render_;
  applied_fn applied_hook_;
  trace_fn trace_;
  std::optional<result<log_reply>> last_;
  std::uint64_t restores_ = 0;
  // A run of entries skipped because the store held them (raft replaying
  // its log after a restart): first and last index, logged when it ends.
  std::uint64_t skipped_from_ = 0, skipped_to_ = 0;
  std::atomic<millis> next_deadline_{-1};
  void publish_deadline();
};

}  // namespace onceq::cluster
