#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "broker/commands.hpp"
#include "broker/key_table.hpp"
#include "broker/order_table.hpp"
#include "broker/timers.hpp"
#include "storage/schema.hpp"

namespace onceq {

// An open delivery of one message to one group: below the group's cursor
// and not acked. Caches what ack, nack and expiry need from the message so
// that they do not read it again.
struct open_delivery {
  storage::delivery_state state = storage::delivery_state::pending;
  std::string owner;
  std::int64_t attempts = 0;
  millis lease_deadline_ms = 0;
  millis not_before_ms = 0;
  std::string last_error;
  std::uint64_t fencing_token = 0;  // of the current (or last) lease
  bool parked = false;              // waiting for its key to be released
  bool order_parked = false;        // waiting for its ordering key (order_table)
  bool known = false;               // the fields below were filled from the message
  std::string scope;                // storage key of its idempotency key; "" if none
  std::string okey;                 // its ordering key (order_key_of); "" if none
  std::int64_t key_ttl_ms = -1;
  std::int64_t max_attempts = -1;
  std::int64_t backoff_ms = -1;
  std::int64_t max_backoff_ms = -1;
  millis produced_at_ms = 0;
  // The offset of the lease run that holds this message's first lease
  // (storage::lease_run_record), k_no_run if none. Until the delivery has a
  // record of its own, the run's is what a restart reads, so retention
  // writes it one before it deletes the run (broker/retention.cpp).
  static constexpr std::uint64_t k_no_run = ~std::uint64_t{0};
  std::uint64_t run_first = k_no_run;

  storage::delivery_record record() const {
    return storage::delivery_record{state,         owner,      attempts,     lease_deadline_ms,
                                    not_before_ms, last_error, fencing_token};
  }
  void fill_from(const storage::message_record& m, std::string key_scope);
};

// One group's view of one partition.
struct group_partition {
  std::uint64_t cursor = 0;                     // next offset this group has never seen
  std::map<std::uint64_t, open_delivery> open;  // offsets < cursor not acked
  std::set<std::uint64_t> ready;                // open, pending, due and not parked
  // The lease runs with an open member whose keys retention has not
  // deleted yet, by the offset of each one's first member (its key).
  struct run_span {
    std::uint64_t last = 0;  // its last member's offset
    std::size_t open = 0;    // its members still open with run_first set
  };
  std::map<std::uint64_t, run_span> runs;
  // An open delivery that run first spoke for no longer needs it (it has a
  // record of its own, or it closed); k_no_run: none.
  void leave_run(std::uint64_t first) {
    if (first == open_delivery::k_no_run) return;
    if (auto r = runs.find(first); r != runs.end() && --r->second.open == 0) runs.erase(r);
  }

  // The lowest offset this group still needs (retention keeps it).
  std::uint64_t low_water() const {
    return open.empty() ? cursor : std::min(cursor, open.begin()->first);
  }
};

// A consumer group of one topic: its cursors, open deliveries, ready sets,
// keys and counters. Only memory: every change here mirrors a record a txn
// wrote (deliveries, cursors) or is rebuilt from them on recovery.
struct group_state {
  storage::group_id id = 0;
  std::string name;
  std::vector<group_partition> parts;
  key_table keys;
  order_table order;  // ordering keys (topics with ordering = key)
  group_stats stats;
  // The last fencing token handed out (stored as keys::fence, in the batch
  // of the deliveries that use it): the next lease gets fence + 1.
  std::uint64_t fence = 0;

  open_delivery* find(position p);
  // Ends the open delivery at p (acked, auto-acked, dead-lettered, gone).
  void close(position p);
  // Makes the pending delivery at p deliverable at its not_before_ms: into
  // the ready set if due now, else a due timer. Returns whether it is ready.
  bool schedule(storage::topic_id topic, position p, open_delivery& d, millis now,
                timer_queue& timers);
  // Frees the key p held and schedules the deliveries parked on it.
  // Returns whether any became ready.
  bool release_key(storage::topic_id topic, const std::string& scope, position p, millis now,
                   timer_queue& timers);

  // p, which ended or is ending, no longer holds or waits for the ordering
  // key okey; the next delivery of the key (if p held it) holds it now and
  // is scheduled. Returns whether it became ready.
  bool release_order(storage::topic_id topic, const std::string& okey, position p, millis now,
                     timer_queue& timers);

  // Waiting messages (not leased), and the oldest unacked one's produce time.
  group_stats snapshot(const std::vector<std::uint64_t>& partition_next) const;
  std::string describe() const;
};

}  // namespace onceq
