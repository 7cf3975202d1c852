#pragma once

// Deliveries: handing messages to consumers under a lease, fencing the
// acks, nacks and extensions that come back, and what happens when an
// attempt fails (retry after backoff, or the DLQ). Every function here only
// reads memory and the store and records its changes in a txn.

#include <optional>
#include <string>
#include <vector>

#include "broker/commands.hpp"
#include "broker/core.hpp"
#include "broker/txn.hpp"

namespace onceq {

// Leases up to cmd.max_messages of g's messages to cmd.owner: redeliveries
// first in each partition, then fresh offsets, round robin over partitions.
// Messages whose key is leased elsewhere are parked; messages whose key is
// committed are auto-acknowledged; messages gone by retention are dropped.
// Under ordering = key, a message whose ordering key is held by an earlier
// one is parked too (order_table), and a consume skips it for other keys.
// A failed read aborts the whole consume (the txn is not committed).
result<std::vector<delivery>> plan_consume(core& c, topic& t, group_state& g,
                                           const consume_cmd& cmd, millis lease_ms, millis now,
                                           txn& tx);

// The delivery an ack, nack or extend names, after the checks every one of
// them shares. A rejection is counted in the group's stale_acks_rejected
// when tx commits.
struct located {
  topic* t = nullptr;
  group_state* g = nullptr;
  position pos;
  const open_delivery* d = nullptr;  // nullptr: not open (acked, dead, gone)
};
result<located> locate(core& c, const delivery_ref& ref, txn& tx);
// The open delivery must be ref.owner's latest (attempts fence), not parked,
// and its key not leased by another delivery.
result<void> check_holder(const located& l, const delivery_ref& ref, txn& tx);
// errc::failed_precondition, counted as a rejected stale ack when tx commits.
error reject_stale(group_state& g, txn& tx, std::string message);

// A failed attempt (nack or lease expiry) of the delivery at pos, whose
// current state is d: retry after delay (default: backoff) or, when its
// attempts are used up, move the message to dlq.<topic>. The key becomes
// failed after a nack or the last attempt; a lease that merely ran out
// returns it to available.
result<void> fail_attempt(core& c, topic& t, group_state& g, position pos, open_delivery d,
                          std::optional<millis> delay, bool nacked, millis now, txn& tx);

// The storage key (keys::idem_key) of m's idempotency key in g; "" if m
// has none.
std::string scope_of(const topic& t, const group_state& g, const storage::message_record& m);

// The ordering key of m in its group when t orders by key: its tenant and
// message key; "" if t does not order or m has no key.
std::string order_key_of(const topic& t, const storage::message_record& m);

// Whether t's key_conflict is supersede.
bool supersedes(const topic& t);
// Under key_conflict supersede: whether a message newer than the one at pos
// was stored with the key at scope (keys::latest_of, not expired). One read.
result<bool> newer_with_key(core& c, const std::string& scope, position pos, millis now);

// Ends the open delivery at pos whose message is gone (retention, redrive):
// no longer in flight, its key free again. Memory only: call from an effect.
void drop_open(core& c, topic& t, group_state& g, position pos, millis now);

// The DLQ topic of t. If it does not exist yet, it is created as part of
// tx (topic_registry::create): it exists once tx commits, and not at all if
// tx fails, so a failed command leaves no DLQ topic behind.
topic& ensure_dlq_topic(core& c, const topic& t, txn& tx);

// Writes d's delivery record.
void put_delivery_record(txn& tx, const topic& t, const group_state& g, position pos,
                         const open_delivery& d);
// The same, for the open delivery d is the next state of: if a lease run
// described it, it has a record of its own from now on, so d leaves the
// run (run_first cleared here, the run's count when tx commits).
void put_delivery(txn& tx, const topic& t, group_state& g, position pos, open_delivery& d);
// Ends the open delivery at pos, whose state is d, without an owner's ack
// (its message gone, its key committed by another delivery, superseded,
// or auto-acked under replay_window_ms): an acked record that names no
// owner, so a repeated ack by its last owner is refused and retention sees
// when it ended. Never a delete: a lease run may list its first lease,
// which a restart would read again (storage::lease_run_record).
void put_ownerless_end(txn& tx, const topic& t, const group_state& g, position pos,
                       const open_delivery& d, millis now);
void put_cursor(txn& tx, const topic& t, const group_state& g, std::uint32_t p,
                std::uint64_t cursor);

// Appends ev to the history of the key at scope (an idem_key) when t keeps
// histories (key_history); nothing at all otherwise.
void note_history(txn& tx, const topic& t, const std::string& scope, millis key_ttl,
                  storage::history_event ev);

// An event in the history of the key of the message at pos, at time at.
// The rest of the event's nine fields is set by name (ev.reason = ...), so
// that no two of them can be swapped.
storage::history_event history_event_at(storage::history_kind kind, millis at, position pos);
// The same, about d's delivery: its owner, attempts and fencing token.
storage::history_event delivery_event(storage::history_kind kind, millis at, position pos,
                                      const open_delivery& d);

std::int64_t max_attempts_of(const topic& t, const open_delivery& d);

// The key record that d's delivery at pos leaves behind: committed by an ack
// or failed by a nack or its last attempt; it expires after the message's
// (or topic's) key TTL from now.
storage::key_record key_record_of(const topic& t, const open_delivery& d, position pos,
                                  storage::key_state state, millis now);
millis key_ttl_of(const topic& t, const open_delivery& d);

}  // namespace onceq
