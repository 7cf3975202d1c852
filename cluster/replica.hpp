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

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "broker/apply.hpp"
#include "broker/broker.hpp"
#include "cluster/raft_node.hpp"
#include "storage/applied_index_store.hpp"
#include "storage/store.hpp"

namespace onceq::cluster {

class replica final : public state_machine {
 public:
  // What the proposer receives for an entry's result (e.g. the HTTP
  // answer's body, or text in tests). Must be deterministic.
  using render_fn = std::function<std::string(const result<log_reply>&)>;

  // store: the shard's store, which must outlive the replica. inspector: as
  // broker's (may be null).
  replica(storage::store& store, const message_inspector* inspector, broker_options opts,
          render_fn render);

  // Reads the applied position, rebuilds the broker from the store and
  // resumes the clock there. Call once, before raft_node::start.
  result<void> open();

  std::string apply(std::uint64_t index, std::string_view entry) override;
  std::string snapshot() override;
  void restore(std::string_view snapshot) override;

  broker& core() noexcept { return broker_; }
  storage::applied_position applied() const noexcept { return applied_.applied(); }

 private:
  storage::store& store_;
  storage::applied_index_store applied_;
  log_clock clock_;
  broker broker_;
  render_fn render_;
};

}  // namespace onceq::cluster
