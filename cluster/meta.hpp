#pragma once
// meta_machine: the meta Raft group's state machine (docs/REPLICATION.md,
// "Placement"). Every node of the cluster file is a member of the meta
// group (the first 3, or 5 of 5 or more, vote; the others are standbys
// that get the log), so every node holds the placement: the node registry
// and each shard's replicas, preferred leader, config version and running
// move (cluster/placement.hpp). Entries are meta_commands as JSON; a
// refused command changes nothing and its reply says why. The state lives
// in memory: raft restores the last snapshot and replays the log after it
// at every start.
//
// Thread safety: the state_machine members run on the raft loop thread;
// state() and applied() may be called from any thread.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "cluster/placement.hpp"
#include "cluster/raft_node.hpp"

namespace onceq::cluster {

// The reply of an applied meta entry: k_meta_ok, or "refused: <why>".
inline constexpr std::string_view k_meta_ok = "ok";

class meta_machine final : public state_machine {
 public:
  // The registry starts empty: the meta leader's first command grows it
  // to the cluster file's nodes (a `grow` command, replicated, so that
  // every node applies the same log to the same state whatever its file).
  explicit meta_machine(std::size_t shards);

  std::string apply(std::uint64_t index, std::string_view entry) override;
  std::string snapshot() override;
  void restore(std::string_view snapshot) override;

  // A copy of the state as of the last applied entry.
  meta_state state() const;
  // Log index of the last applied entry (0: none yet).
  std::uint64_t applied() const;
  // Waits until an entry past `after` is applied or timeout passes; returns
  // applied().
  std::uint64_t wait_past(std::uint64_t after, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  meta_state s_;
  std::uint64_t applied_ = 0;
};

// The meta group's voters among n nodes: the first 3 (5 when n >= 5),
// fewer when the file has fewer nodes; the rest are standbys.
std::vector<member> meta_members(std::size_t n);

}  // namespace onceq::cluster
