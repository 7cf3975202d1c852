#pragma once

// shard_group: one shard's Raft group as the shard's log (shard/shard_log.hpp).
// Proposals go to raft_node as encoded entries (broker/log_entry.hpp); the
// replica applies them on the raft thread and keeps the typed result, which
// the proposal's callback takes right after (replica::take_reply). Reads run
// on the raft thread through raft_node::read. raft_node's outcomes become
// the shard's errors: not_leader is errc::unavailable with error::leader
// (nothing was done; the request may go to the leader), every other failure
// errc::unavailable with no leader.
//
// Thread safety: as shard_log. attach() before the first proposal; until
// then proposals and reads answer errc::unavailable.

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/leader_grace.hpp"
#include "cluster/raft_node.hpp"
#include "cluster/replica.hpp"
#include "shard/shard_log.hpp"
#include "storage/store.hpp"

namespace onceq::cluster {

class shard_group final : public shard_log {
 public:
  // group: the shard's id and its Raft group's; r: its replica; config:
  // the cluster (both outlive this). A new leader stamps its entries
  // grace_ms behind its clock for max_lease_ms after its term began
  // (docs/REPLICATION.md section 4): leases granted by an earlier leader
  // whose clock was behind are not ended early by a clock ahead.
  shard_group(unsigned group, replica& r, const cluster_config& config, millis grace_ms,
              millis max_lease_ms);

  // The node that runs the group, once started (outlives this).
  void attach(raft_node& node) { node_.store(&node, std::memory_order_release); }
  // Where to send a request when this node knows no leader of the shard
  // (it holds no replica of it): a raft id from the placement, 0 for none.
  // Set before the first request.
  void set_leader_hint(std::function<std::uint64_t()> hint) { hint_ = std::move(hint); }

  void propose(log_entry e, reply_fn done) override;
  void read(bool fresh, std::function<void(broker&)> fn, std::function<void(error)> fail) override;
  bool leads() const override;
  // The broker's next deadline, moved by the grace while it applies (a tick
  // stamped grace_ms behind the clock fires nothing before that).
  millis next_deadline() const override;
  void on_applied(std::function<void(log_tag, std::string_view)> fn) override;

  // This node's copy of the shard's log: not writable once the group
  // stopped here (group_status::failure: its raft log refused an append,
  // or its replica could not apply an entry), with why; the shard reports
  // it in GET /v1/healthz. Any thread; never waits for the raft loop (it
  // reads the status the loop last published).
  storage::store_health log_health() const override;
  bool holds() const override;

  // The shard's topics as of the last create, delete or snapshot applied
  // here (GET /v1/cluster). Any thread.
  std::vector<std::string> topics() const;

  // The error a shard answers for a raft_node outcome that is not ok.
  error error_of(const op_result& r) const;
  std::function<std::uint64_t()> hint_;

 private:
  raft_node* node() const { return node_.load(std::memory_order_acquire); }

  unsigned group_;
  replica& replica_;
  const cluster_config& config_;
  std::string self_;
  std::atomic<raft_node*> node_{nullptr};

  leader_grace grace_;  // the stamps of proposals and the ticks' times (the grace above)

  mutable std::mutex topics_mu_;
  std::vector<std::string> topics_;  // topics_mu_
  std::uint64_t restores_seen_ = 0;  // raft thread
};

}  // namespace onceq::cluster
