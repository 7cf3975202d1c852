#pragma once
// placement_agent: what every node of a cluster does about placement
// (docs/REPLICATION.md, "Placement"), on one thread, once per tick:
//  - as the meta group's leader: runs the controller (cluster::plan) over
//    the meta state and the nodes it heard from, and proposes its commands;
//  - for each shard: opens the shard's group here when the placement puts
//    a replica (or a move's target) on this node, and closes and wipes it
//    once the placement has moved it away;
//  - as a shard's leader: drives the shard's running move one step at a
//    time (raft_add, raft_assign to voter, which catches the node up,
//    leadership handed over, raft_remove), recording the steps in the meta
//    group; removes a member the placement does not list (a cancelled
//    move's target); reports its leadership (the forwarding hint of nodes
//    without a replica); and hands the leadership to the shard's preferred
//    leader.
// Every step is decided from the raft configuration the shard's leader
// sees and the meta state this node has applied, so a step interrupted by
// a crash or a lost leadership is taken again by whoever leads next.
//
// Thread safety: start and stop from one thread; submit from any thread.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.hpp"
#include "base/result.hpp"
#include "cluster/config.hpp"
#include "cluster/meta.hpp"
#include "cluster/placement.hpp"
#include "cluster/raft_node.hpp"

namespace onceq::cmd {

class placement_agent {
 public:
  struct options {
    cluster::placement_options placement;
    std::chrono::milliseconds tick{200};
    // How long a shard's leader waits after a handover before another one.
    std::chrono::milliseconds transfer_every{5'000};
    // After a failed step, how long before it is tried again.
    std::chrono::milliseconds retry_after{1'000};
  };
  // Sends a meta entry to node `leader` (the meta group's leader) and
  // returns its outcome: ok when applied, failed_precondition when refused,
  // unavailable when it could not be reached. Blocking, bounded.
  using send_fn = std::function<result<void>(const std::string& leader, const std::string& entry)>;

  // meta_group: the meta group's index in raft. Every reference outlives
  // the agent.
  placement_agent(const cluster::cluster_config& cfg, cluster::raft_node& raft,
                  cluster::meta_machine& meta, unsigned meta_group, options opts, const clock& time,
                  send_fn send);
  ~placement_agent();  // stop()
  placement_agent(const placement_agent&) = delete;
  placement_agent& operator=(const placement_agent&) = delete;

  void start();
  void stop();

  // Proposes c to the meta group: here when this node leads it (waits for
  // it to be applied), else to its leader through send. Errors:
  // unavailable (no meta leader known, or not reached in time; error::leader
  // names it when known), failed_precondition (refused: the reason).
  result<void> submit(const cluster::meta_command& c);
  // The same for an entry already encoded (POST /v1/internal/meta).
  result<void> submit_local(const std::string& entry);

  // The preferred node to forward a request for shard g to when this node
  // does not know its leader: the leader the meta state records, else its
  // first replica; 0 when none (or this node).
  std::uint64_t leader_hint(unsigned g) const;
  // Whether the placement lists this node among shard g's replicas.
  bool holds_replica(unsigned g) const;

 private:
  void run();
  void tick();
  void control(const cluster::meta_state& s, const cluster::group_status& ms, std::uint64_t now);
  void reconcile(unsigned g, const cluster::meta_state& s, std::uint64_t now);
  // A read barrier on the meta group: proposes a `sync` of this node with a
  // fresh nonce and waits until this node has applied it. Once it answers
  // ok, meta_.state() holds every placement change committed before the
  // call (and only later ones from then on). unavailable when the meta
  // group did not take or apply it in time.
  result<void> barrier();
  // Shard g's group, closed here, was left by this node: wipes its raft
  // directory if a barrier confirms that the placement neither lists this
  // node nor moves the shard to it.
  void wipe_if_left(unsigned g, std::uint64_t now);
  void set_wipe_pending(unsigned g, bool pending);
  // As the meta leader: a node of the file the meta group lacks is added
  // (raft_add, then raft_assign standby), one change at a time.
  void grow_meta_group(const cluster::group_status& ms, std::uint64_t now);
  void drive(unsigned g, const cluster::shard_entry& e, const cluster::group_status& st,
             std::uint64_t now);
  // Starts a raft operation on shard g; the shard is busy until it answers.
  void begin(unsigned g, std::uint64_t now);
  void end(unsigned g, const cluster::op_result& r, std::string_view what);
  cluster::op_cb done_cb(unsigned g, std::string what);

  struct shard_work {
    bool busy = false;
    std::uint64_t next_try_ms = 0;
    std::uint64_t reported_term = 0;
    std::uint64_t last_transfer_ms = 0;
    // Closed because the placement moved the shard away; its raft
    // directory waits for a barrier before it is wiped.
    bool wipe_pending = false;
  };

  const cluster::cluster_config& cfg_;
  cluster::raft_node& raft_;
  cluster::meta_machine& meta_;
  const unsigned meta_group_;
  const options opts_;
  const clock& clock_;
  const send_fn send_;
  const cluster::raft_id self_;

  mutable std::mutex work_mu_;
  std::vector<shard_work> work_;  // work_mu_; per shard, then the meta group

  // Agent thread only: whether a barrier has passed since this node
  // started. Until then the meta state may be one that a restart is
  // replaying from the log (a placement long gone), and the agent opens,
  // closes and changes nothing.
  bool caught_up_ = false;
  std::mt19937_64 nonce_rng_{std::random_device{}()};

  // The controller's view (agent thread only).
  std::uint64_t meta_term_ = 0;
  cluster::liveness live_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // mu_
  bool kick_ = false;      // mu_: tick again without waiting
  std::thread thread_;
};

}  // namespace onceq::cmd
