#pragma once
// Placement: which nodes hold each shard, and the moves that change it
// (docs/REPLICATION.md, "Placement"). The state below is what the meta
// Raft group replicates (cluster/meta.hpp applies commands to it); plan()
// is the controller the meta group's leader runs: a pure function of that
// state, of when the leader last heard from each node, and of the time,
// so that every decision is tested on an injected clock
// (tests/unit/cluster/placement_test.cpp).
//
// Nodes are named by raft id (position in the cluster file + 1). A shard's
// replicas are an ordered list: the first is its preferred leader.
//
// Thread safety: values; plan() is pure.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "cluster/config.hpp"

namespace onceq::cluster {

// active: may hold replicas. draining: its replicas and leaderships are
// being moved off (operator's drain). drained: holds nothing and gets
// nothing; may be stopped. down: not heard from for down_after_ms (or
// never); keeps its replicas until dead_after_ms, then they are placed on
// other nodes.
enum class node_state : std::uint8_t { active = 0, draining = 1, drained = 2, down = 3 };
std::string_view to_string(node_state s) noexcept;
std::optional<node_state> node_state_from(std::string_view s) noexcept;

struct node_entry {
  node_state state = node_state::down;
  bool seen = false;             // heard from at least once since the cluster began
  bool drain_requested = false;  // stays set across down/back: a drained node stays drained
  std::uint64_t since_ms = 0;    // when `state` was last set (the proposer's clock)
  // The nonce of the node's last `sync`: its placement agent's read barrier
  // (a node acts on the placement only once it has applied a sync of its
  // own, proposed after it started: so never on the states a restart
  // replays from its log).
  std::uint64_t synced = 0;
  bool operator==(const node_entry&) const = default;
};

// adding: `to` joins the group (raft_add, then raft_assign to voter, which
// catches it up first); a move may still be cancelled. removing: `to` is a
// voter (committed here before anything is removed), `from` leaves the
// group (its leadership first handed over); it can no longer be cancelled.
enum class move_state : std::uint8_t { adding = 0, removing = 1 };
std::string_view to_string(move_state s) noexcept;

struct shard_move {
  raft_id from = 0;  // 0: nothing leaves (a shard with fewer than `replicas` copies)
  raft_id to = 0;
  move_state state = move_state::adding;
  std::uint64_t started_ms = 0;  // the proposer's clock
  std::string reason;            // "drain", "rebalance", "dead", "repair"
  bool operator==(const shard_move&) const = default;
};

struct shard_entry {
  std::vector<raft_id> replicas;  // first = preferred leader; empty until placed
  std::uint64_t version = 0;      // 1 when placed, + 1 per finished move
  std::optional<shard_move> moving;
  raft_id leader = 0;             // last leader reported (a hint for forwarding), 0 = unknown
  std::uint64_t leader_term = 0;  // the term it reported
  bool operator==(const shard_entry&) const = default;
};

struct meta_state {
  std::vector<node_entry> nodes;    // index = raft id - 1, every node of the file
  std::vector<shard_entry> shards;  // index = shard
  bool placed = false;              // the initial placement is committed
  bool rebalance = false;           // an operator's rebalance is pending
  std::uint64_t moves_started = 0, moves_finished = 0, moves_cancelled = 0;
  // The time finished moves took (move_done's at_ms - the move's
  // started_ms, proposers' clocks): in all, and the last one.
  std::uint64_t move_ms_total = 0, last_move_ms = 0;
  bool operator==(const meta_state&) const = default;

  // A state for n nodes and `shards` shards: every node down and unseen,
  // nothing placed.
  static meta_state empty(std::size_t n, std::size_t shards);
  // How many replicas node id holds (moves' targets included).
  std::size_t load(raft_id id) const;
  // How many shards prefer node id as leader.
  std::size_t leads(raft_id id) const;
};

struct placement_options {
  std::size_t replicas = 3;               // copies per shard (capped at the node count)
  std::uint64_t down_after_ms = 5'000;    // not heard for this long: down
  std::uint64_t dead_after_ms = 600'000;  // down this long: its replicas go elsewhere; 0: never
  // The first placement waits for every node of the file, or for this long
  // after enough nodes (`replicas`) are active.
  std::uint64_t settle_ms = 3'000;
};

// What the leader of the meta group knows of each node, on its own clock:
// last_heard_ms[id - 1] is when it last heard from node id (0 = never
// since this node became the meta leader; a node past the vector's end
// counts as never heard), and leader_since_ms is when it became
// the meta leader (a node is only declared down once the leader has
// listened to it for down_after_ms itself).
struct liveness {
  std::vector<std::uint64_t> last_heard_ms;
  std::uint64_t leader_since_ms = 0;
};

// One change to the meta state: what the controller proposes, and what
// meta_machine applies (with the checks in meta.hpp).
struct meta_command {
  enum class kind : std::uint8_t {
    node = 0,         // nodes[node - 1].state = state (since_ms = at_ms); seen = true unless
                      // down; active stored as draining once drain_requested
    place = 1,        // the initial placement: shards[g].replicas = placement[g], version 1
    move = 2,         // start a move of `shard` (from, to), at version `version`
    move_step = 3,    // the move of `shard` at `version` reached `step` (removing: the only
                      // step; adding -> removing)
    move_done = 4,    // the move of `shard` at `version` finished: replicas = `replicas`
    move_cancel = 5,  // the move of `shard` at `version` is dropped (only while adding)
    leader = 6,       // node `node` leads `shard` in term `term`
    order = 7,        // shards[g].replicas reordered (same set): a new preferred leader;
                      // `version` is the shard's when proposed, not checked
    drain = 8,        // an operator drains node `node`
    rebalance = 9,    // an operator asks for a rebalance (rebalance = true)
    rebalanced = 10,  // the controller found the spread within one (rebalance = false)
    grow = 11,        // the registry grows to `node` nodes (the cluster file grew)
    sync = 12,        // nodes[node - 1].synced = nonce (a read barrier; changes nothing else)
  };
  kind op = kind::node;
  raft_id node = 0;
  node_state state = node_state::active;
  std::uint32_t shard = 0;
  std::uint64_t version = 0;
  raft_id from = 0, to = 0;
  move_state step = move_state::adding;
  std::vector<raft_id> replicas;                // move_done, order
  std::vector<std::vector<raft_id>> placement;  // place
  std::uint64_t term = 0;                       // leader
  std::uint64_t at_ms = 0;                      // node, move: the proposer's clock
  std::string reason;                           // move, move_cancel
  std::uint64_t nonce = 0;                      // sync
  bool operator==(const meta_command&) const = default;
};

// The controller: the changes the meta leader should propose now, in
// order, given the state it has applied. Empty when nothing is to be done.
// Rules, in order:
//  1. Node states: a node heard within down_after_ms that is down (or never
//     seen) becomes active, or drained if drain_requested and it holds
//     nothing, or draining if drain_requested; an active or draining node
//     not heard for down_after_ms (and the leader has listened that long)
//     becomes down.
//  2. Before the first placement: once every node is active (or drained:
//     no node is down), or once `replicas` nodes are active and settle_ms
//     has passed since live.leader_since_ms, one `place` spreading every
//     shard over the active nodes, min(replicas, active nodes) copies each
//     (per-node counts within one; the preferred leaders too).
//  3. A draining node holding nothing, with no move to or from it, becomes
//     drained.
//  4. Moves, at most one per shard and at most one per node as a target at a
//     time:
//     - cancel a move whose target is no longer active;
//     - a shard with a replica on a node down for dead_after_ms (and
//       dead_after_ms != 0): move it to the least loaded active node not
//       holding the shard ("dead");
//     - a shard with fewer replicas than min(replicas, active nodes): add
//       one ("repair", from = 0);
//     - a shard with a replica on a draining node ("drain");
//     - while rebalance is pending: from the most loaded active node to the
//       least loaded, while they differ by more than one ("rebalance"),
//       counting each node's load as it will be once the running moves
//       finish; once no such move is left and no move of any kind is
//       running, `rebalanced`.
//     A shard whose move is cancelled gets no other move in the same plan.
//     Targets (every kind): the least loaded active node not holding the
//     shard and not the target of a running move, lowest raft id on ties;
//     with none (3 nodes, 3 replicas, one draining or dead) the shard
//     waits. `from` is the dead or draining node (the lowest id if two).
//  5. Preferred leaders, for shards with no move running: an `order` for a
//     shard whose first replica is not active (an active replica with the
//     fewest preferred leaderships goes first); then, while the preferred
//     leaderships of the active nodes differ by more than one, an `order`
//     moving one from the node with the most to a replica of that shard with
//     the fewest (or, when the two share no shard, the shortest chain of
//     such orders through other nodes, whose counts stay the same).
// Ties go to the lowest raft id, then the lowest shard. Before the first
// placement plan proposes node changes and `place` only. Every command
// applies (apply_command) in order to s, and planning again on the result
// proposes nothing until the clock, liveness or a move's progress changes.
std::vector<meta_command> plan(const meta_state& s, const liveness& live, std::uint64_t now_ms,
                               const placement_options& opts);

// Applies one command to s, or refuses it and changes nothing. Every
// replica of the meta group applies the same commands in the same order,
// so this is deterministic. Refusals (errc::failed_precondition, with the
// reason): an unknown node or shard; node `drained` for a node that holds
// replicas or is a move's target; place when already placed, or a
// placement of the wrong shape (not one list per shard, an empty list, a
// list with duplicates or unknown nodes: the options' replica count is not
// part of the state, so any non-empty list of known, distinct nodes is
// accepted); move, move_step, move_done, move_cancel and order before the
// first placement; move when the shard has a move running, `version` is
// not the shard's, `from` is not a replica (unless 0), `to` is a replica
// or 0, or from == to; move_step / move_done / move_cancel when no move of
// that version is running (move_done's replicas must be the old ones less
// `from` plus `to`, in any order, and a move with a `from` must be
// removing first; move_step only from adding to removing; move_cancel only
// while adding); leader with a term older than the one recorded; order
// whose list is not a permutation of the replicas; drain of a drained node
// (a draining one is accepted: nothing changes). move_done bumps version
// and moves_finished; move bumps moves_started; move_cancel
// moves_cancelled. A drain sets drain_requested and, for an active node,
// draining.
result<void> apply_command(meta_state& s, const meta_command& c);

// The meta group's entries and snapshots: JSON text (cold: a few entries
// per move). A command is {"op": "move", "shard": 0, "version": 1, "from":
// 2, "to": 4, "at_ms": ..., "reason": "drain"}: "op" and the fields its
// kind uses (node: node, state, at_ms; place: placement; move: shard,
// version, from, to, at_ms, reason; move_step: shard, version, step;
// move_done and order: shard, version, replicas; move_cancel: shard,
// version, reason; leader: shard, node, term; drain: node); states by name.
// decode refuses anything malformed with errc::invalid_argument (not JSON,
// an unknown op or state, a missing, ill-typed or unknown field, a number
// out of range; a snapshot whose replicas or move name unknown or repeated
// nodes) and never throws.
std::string encode(const meta_command& c);
result<meta_command> decode_command(std::string_view text);
std::string encode(const meta_state& s);
result<meta_state> decode_state(std::string_view text);

}  // namespace onceq::cluster
