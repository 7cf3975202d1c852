#pragma once

// raft_node: every Raft group of one node, on one libuv loop thread.
//
// A group is one Raft instance of canonical raft 0.15 (raft_uv for the log,
// the snapshots and TCP), one per shard (docs/REPLICATION.md). Every node
// of the cluster file has the same groups 0..groups-1; each group runs on
// the nodes its configuration names (options' group_spec: bootstrapped on a
// node's first start, or joined later when its leader adds the node), and
// is dormant on the others until open_group().
//
// Threads. The node owns one thread ("onceq-raft") running a libuv loop
// that owns every raft instance; nothing else touches them. The public
// members may be called from any thread (except stop() and the destructor,
// which must not be called from the loop thread, i.e. from a callback).
// Everything a caller asks crosses once: it is queued under a mutex and the
// loop is woken with uv_async_send. All callbacks (propose, barrier,
// transfer) and every state_machine call run on the loop thread: they must
// not block; a shard's loop posts the answer back to itself.
//
// Group commit. Every proposal queued for a group when the loop wakes goes
// to raft as one raft_apply with n buffers (up to max_batch_entries /
// max_batch_bytes per call): one append and one fsync per replica, one
// round trip, for the whole batch.
//
// On disk: <data_dir>/raft/<group>/ is raft_uv's directory of the group
// (metadata1/2, segments, snapshot-*), created when missing;
// <data_dir>/raft/identity records the node id and raft id the directory
// belongs to. raft_uv syncs every append before it is acknowledged, so a
// kill -9 leaves a directory that restarts with every acknowledged entry.
// Entries are stored padded to a multiple of 8 bytes (raft 0.15 needs it,
// see README.md); apply() sees them as proposed.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "cluster/config.hpp"

namespace onceq::cluster {

// The replicated state machine of one group, implemented by the user.
// Every member runs on the node's loop thread, one call at a time; only
// during raft_node::start (a snapshot of its own restored at once) does
// restore() run on start's caller.
//
// Limitation of raft 0.15: a snapshot travels as one memory buffer (taken
// on the loop, written by raft_uv, sent whole to a follower that is too far
// behind, handed whole to restore). A state kept in RocksDB will therefore
// snapshot a small manifest (applied index, checkpoint id, files) and move
// the checkpoint's files on a side channel (docs/REPLICATION.md, section 2).
class state_machine {
 public:
  virtual ~state_machine() = default;

  // Applies the committed entry at log index `index`, in log order, on every
  // replica; returns the reply the proposer receives. Indexes increase but
  // are not contiguous (raft's own barrier and configuration entries take
  // indexes too). After a restart raft applies again every entry after the
  // last snapshot it restored, so a state that outlives the process (RocksDB)
  // must skip indexes it already holds. Must be deterministic. An exception
  // stalls the group on this node (it keeps voting but applies nothing
  // more; group_status::failure says why; a leader hands its leadership to
  // another voter) until a snapshot from the leader or a restart.
  virtual std::string apply(std::uint64_t index, std::string_view entry) = 0;

  // The whole state as bytes (raft's snapshot threshold decides when).
  // An exception skips this snapshot; raft tries again later.
  virtual std::string snapshot() = 0;

  // Replaces the whole state with a snapshot() of another replica, or of
  // this one at start. An exception refuses the snapshot.
  virtual void restore(std::string_view snapshot) = 0;
};

enum class raft_errc : int {
  ok = 0,
  // This node does not lead the group; op_result::leader names the leader
  // when it is known. Nothing was appended: safe to send to the leader.
  not_leader = 1,
  // Leadership was lost after the entry was appended: it may still be
  // committed and applied by the next leader, or dropped. Retry only what
  // is idempotent.
  leadership_lost = 2,
  // The node is stopping; entries in flight have an unknown outcome.
  shutting_down = 3,
  // Anything else raft refused (message says what), e.g. a transfer to a
  // node that is not a voter, or a transfer that timed out; or this
  // replica's state machine failed (group_status::failure), in which case
  // entries in flight may still be applied by the other replicas.
  failed = 4,
};

inline std::string_view to_string(raft_errc code) noexcept {
  switch (code) {
    case raft_errc::ok:
      return "ok";
    case raft_errc::not_leader:
      return "not_leader";
    case raft_errc::leadership_lost:
      return "leadership_lost";
    case raft_errc::shutting_down:
      return "shutting_down";
    case raft_errc::failed:
      return "failed";
  }
  return "failed";
}

struct op_result {
  raft_errc code = raft_errc::ok;
  std::string reply;    // ok, propose: what state_machine::apply returned for the entry
  std::string leader;   // not_leader: the leader's node id, "" when unknown;
                        // transfer, ok: the new leader
  std::string message;  // not ok: for logs
  bool ok() const noexcept { return code == raft_errc::ok; }
};

// Called once, on the node's loop thread; must not block, and an exception
// it throws is logged and dropped.
using op_cb = std::function<void(op_result)>;

// A member of a group's configuration and its role: a voter counts for
// elections and commits; a standby gets the log but does not vote; a spare
// gets nothing (raft's roles).
enum class member_role : int { voter = 0, standby = 1, spare = 2 };
std::string_view to_string(member_role r) noexcept;
struct member {
  std::uint64_t id = 0;  // raft id
  member_role role = member_role::voter;
  // status() on the group's leader: the last log index the leader knows
  // this member holds (raft's match index); 0 elsewhere.
  std::uint64_t match_index = 0;
  bool operator==(const member&) const = default;
};

// How raft_node::start treats one group.
struct group_spec {
  // Opened by start(); false: dormant (answers not_leader with no leader)
  // until open_group().
  bool open = true;
  // The configuration a pristine directory is bootstrapped with; empty:
  // none (the node waits for a leader to add it). Ignored when the
  // directory already holds a log.
  std::vector<member> bootstrap;
  // Size of this group's open segments; 0: raft_node_options::segment_bytes.
  // Raft reads every open segment whole at start (three per group), so a
  // group that carries little (the meta group) wants small ones.
  std::size_t segment_bytes = 0;
};

struct raft_node_options {
  std::string data_dir;  // Required: the node's data dir (Raft goes in <data_dir>/raft/)
  unsigned groups = 1;   // Default: 1 group (shard); group g listens on raft port + g
  // Raft's timers. The election timeout is randomised by raft between 1x
  // and 2x; heartbeats must be well under it.
  unsigned election_timeout_ms = 1000;  // Default: raft's 1000 ms
  unsigned heartbeat_timeout_ms = 100;  // Default: raft's 100 ms
  // A snapshot every snapshot_threshold applied entries, keeping the last
  // snapshot_trailing entries in the log so that a follower a little
  // behind catches up from the log, not from a snapshot.
  unsigned snapshot_threshold = 1024;  // Default: raft's 1024
  unsigned snapshot_trailing = 128;    // Default: raft's 128
  // Pre-vote (Raft thesis 9.6): a node back from a partition does not
  // depose a healthy leader. Raft's default is off.
  bool pre_vote = true;                    // Default: on
  unsigned connect_retry_delay_ms = 1000;  // Default: raft_uv's 1000 ms between dials of a peer
  // Size of the log's open segments (raft_uv_set_segment_size), at least
  // max_batch_bytes. Closing a full segment and opening the next stalls
  // appends for tens of ms: with raft's 8 MiB and 40 KB entries (a produce
  // of 100 messages) that was a p99 of 38 ms; 64 MiB makes it 6 ms. But raft
  // keeps three open segments per group and reads them whole at every
  // start: 192 MiB per group (docs/BENCHMARKS.md, "Replication", and
  // "A node's restart"). A group_spec may set its own.
  std::size_t segment_bytes = 64u << 20;  // Default: 64 MiB
  // Group commit limits: a queue longer than this goes out as several
  // raft_apply calls in one loop iteration.
  std::size_t max_batch_entries = 1024;    // Default: 1024 entries per raft_apply
  std::size_t max_batch_bytes = 4u << 20;  // Default: 4 MiB per raft_apply
  std::size_t max_entry_bytes = 1u << 20;  // Default: 1 MiB; larger proposals are refused
  std::size_t max_queued = 100'000;        // Default: queued proposals per group before
                                           // propose() answers resource_exhausted
  // Per group (size == groups); empty: every group opened at start and
  // bootstrapped with every node of the file as a voter.
  std::vector<group_spec> specs;
  // Promotion to voter: raft catches the server up first, in rounds of at
  // most this long, giving up after max_catch_up_rounds.
  unsigned max_catch_up_rounds = 10;       // Default: raft's 10
  unsigned max_catch_up_round_ms = 5'000;  // Default: raft's 5 s
};

// A change of a group's configuration, made by its leader (one at a time:
// raft refuses a second while one is uncommitted).
struct member_change {
  enum class kind { add, standby, promote, remove } op = kind::add;
  std::uint64_t id = 0;  // raft id of the node (the cluster file's)
};

struct group_status {
  std::string leader;      // node id of the leader this node knows, "" when none
  bool is_leader = false;  // this node leads the group
  // is_leader, and the barrier this node appended when its term began is
  // applied here: every entry committed before the term is applied (the
  // moment a leader may answer reads of committed state).
  bool leader_ready = false;
  std::uint64_t term = 0;  // raft's current term on this node
  std::uint64_t commit_index = 0;
  std::uint64_t last_applied = 0;             // last index applied to the state machine here
  std::uint64_t last_index = 0;               // last index in this node's log
  std::uint64_t proposals = 0;                // proposals handed to raft_apply by this node
  std::uint64_t apply_calls = 0;              // raft_apply calls carrying them (batching: fewer)
  std::uint64_t snapshots_restored = 0;       // state_machine::restore calls that succeeded
  std::uint64_t snapshot_bytes_restored = 0;  // their bytes (how a moved replica arrives)
  std::uint64_t terms_seen = 0;               // terms this node was in since it started (elections)
  // Leader: the voters it heard from within an election timeout (itself
  // included), by node id; empty on a follower.
  std::vector<std::string> heard;
  std::string failure;  // why the group stopped applying here; "" when healthy
  bool open = false;    // the group runs on this node (not dormant)
  // The configuration this node knows (the latest it appended), in raft's
  // order; empty when dormant or before the first.
  std::vector<member> members;
};

class raft_node {
 public:
  // Starts every group: creates <data_dir>/raft/<g>/, bootstraps a group
  // with every node of cfg as a voter on its first start, starts raft and
  // the loop thread. machines[g] is group g's state machine; each must
  // outlive the node. Raft may call restore() on this thread before start
  // returns (a snapshot of the node's own is restored at once).
  // Errors: errc::invalid_argument (options, machines.size() != groups,
  // ports that do not fit, a data dir of another node), errc::unavailable
  // (a directory or raft could not be set up: the message has raft's
  // reason, e.g. a port in use).
  static result<std::unique_ptr<raft_node>> start(cluster_config cfg, raft_node_options opts,
                                                  std::vector<state_machine*> machines);

  ~raft_node();  // stop()
  raft_node(const raft_node&) = delete;
  raft_node& operator=(const raft_node&) = delete;

  // Queues entry for group g. On the leader it is appended (with whatever
  // else was queued) and cb gets state_machine::apply's reply for it once a
  // majority has it and this node applied it; otherwise cb gets not_leader
  // (with the leader), leadership_lost, shutting_down or failed.
  // Errors (cb is then never called): errc::invalid_argument (no group g,
  // an empty or too large entry), errc::resource_exhausted (max_queued),
  // errc::unavailable (stopped).
  result<void> propose(unsigned g, std::string entry, op_cb cb);

  // raft_barrier: cb gets ok once every entry appended before it is applied
  // on this node (the leader's way to serve reads of committed state after
  // an election; a new leader also does it by itself, see leader_ready).
  // Errors: errc::invalid_argument (no group g), errc::unavailable (stopped).
  result<void> barrier(unsigned g, op_cb cb);

  // Runs cb on the loop thread, where the state machines live, to read
  // group g's applied state. fresh: only while this node leads g and its
  // term's opening barrier is applied (group_status::leader_ready), so the
  // state holds every entry committed before the read (else cb gets
  // not_leader with the leader, or failed when this replica stopped
  // applying); not fresh: at once, as of this replica's last apply.
  // Errors: errc::invalid_argument (no group g), errc::unavailable (stopped).
  result<void> read(unsigned g, bool fresh, op_cb cb);

  // raft_transfer: hands the leadership of group g to to_node ("" lets raft
  // pick the most up-to-date voter). cb: ok with the new leader, or an
  // error (not_leader when this node does not lead g; failed when the
  // target is not a voter or did not win within an election timeout).
  // Proposals during a transfer answer not_leader.
  result<void> transfer(unsigned g, std::string_view to_node, op_cb cb);

  // For every group this node leads whose preferred leader
  // (cluster_config::preferred_leader) is another node: transfer to it.
  // Spreads leaderships over the nodes; call it on every node after start.
  // Errors: errc::unavailable (stopped).
  result<void> rebalance();

  // What this node knows of group g, as of the loop's last iteration.
  // Never waits for the loop. Errors: errc::invalid_argument (no group g).
  result<group_status> status(unsigned g) const;
  // Opens dormant group g (group_spec::open false, or closed): bootstraps a
  // pristine directory with `bootstrap` (empty: none) and starts it. cb: ok
  // once it runs (at once when it already did), failed with raft's reason.
  // Errors: errc::invalid_argument (no group g), errc::unavailable (stopped).
  result<void> open_group(unsigned g, std::vector<member> bootstrap, op_cb cb);
  // Closes group g here (raft_close: entries in flight answer
  // shutting_down) and, with wipe, deletes its directory: the node left the
  // group. cb: ok once closed. The group is dormant afterwards.
  // Errors: errc::invalid_argument (no group g), errc::unavailable (stopped).
  result<void> close_group(unsigned g, bool wipe, op_cb cb);
  // A configuration change of group g on its leader: add (raft_add, as a
  // spare), standby (raft_assign to standby: the node gets the log but
  // does not vote, so it catches up before it counts), promote
  // (raft_assign to voter: raft catches the node up first,
  // options' catch-up rounds), remove (raft_remove). cb: ok once the new
  // configuration is committed; not_leader; failed with raft's reason (a
  // change already running, an unknown node, a catch-up that gave up).
  // Errors: errc::invalid_argument (no group g, an id not in the file),
  // errc::unavailable (stopped).
  result<void> change(unsigned g, member_change c, op_cb cb);
  // status(g).open, without copying the rest; false for no group g.
  bool opened(unsigned g) const;
  // status(g).is_leader, without copying the rest; false for no group g.
  bool leads(unsigned g) const;
  // The term this node leads group g in, 0 when it does not lead it.
  std::uint64_t leader_term(unsigned g) const;

  // Closes every group (raft_close: entries in flight answer
  // shutting_down), ends the loop and joins its thread. Idempotent; safe
  // after a failed start. Must not be called from the loop thread.
  void stop();

  const cluster_config& config() const noexcept;
  unsigned groups() const noexcept;

  class impl;

 private:
  explicit raft_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace onceq::cluster
