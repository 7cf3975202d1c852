#pragma once

// What a shard of a cluster asks of its replicated log (docs/REPLICATION.md,
// section 1): cluster/ implements it over the shard's Raft group. With a
// shard_log the shard's broker is not the loop's: it is the replica's, and
// lives on the thread that applies the log (the node's raft thread). The
// shard's loop then proposes commands as log entries, reads through read(),
// and never touches the broker or its store itself.
//
// Errors given to the callbacks: errc::unavailable with error::leader set
// when this node does not lead the group (nothing was done: the request may
// go to the leader), errc::unavailable with no leader when none is known or
// the outcome of a write is unknown (leadership lost after the append:
// retry only what is idempotent), errc::resource_exhausted when the group's
// queue is full.
//
// Thread safety: every member may be called from any thread; callbacks run
// on the applying thread and must not block.

#include <functional>

#include "broker/apply.hpp"
#include "broker/log_entry.hpp"
#include "storage/store.hpp"

namespace onceq {

class shard_log {
 public:
  virtual ~shard_log() = default;

  using reply_fn = std::function<void(result<log_reply>)>;
  // Appends e; done gets what applying it answered, once a majority holds
  // it and this node applied it.
  virtual void propose(log_entry e, reply_fn done) = 0;

  // Runs fn(broker) where the broker lives. fresh: only on the leader, once
  // its term's first barrier is applied (the state holds everything
  // committed before the call); else as this replica last applied it.
  virtual void read(bool fresh, std::function<void(broker&)> fn,
                    std::function<void(error)> fail) = 0;

  // Whether this node leads the group, as of the raft loop's last
  // iteration (a hint: it may change at once).
  virtual bool leads() const = 0;

  // When the leader should propose a tick: the broker's next deadline as
  // of the last apply, -1 for none.
  virtual millis next_deadline() const = 0;

  // fn runs on the applying thread after each applied entry, with its tag
  // and, for a command on one topic, that topic ("" for a tick or several
  // topics). Set once, before the group starts applying.
  virtual void on_applied(std::function<void(log_tag, std::string_view topic)> fn) = 0;

  // Whether this node can append to the group's log (its Raft log on
  // disk): not writable, with a reason naming the log, when an append or
  // its sync failed. The shard reports it with its store's health
  // (shard::storage_health, /v1/healthz). Any thread; never touches the
  // disk. Default: writable.
  virtual storage::store_health log_health() const { return {}; }

  // Whether this node holds a replica of the group (its group runs here);
  // a cluster node may hold none of a shard placed elsewhere. Any thread.
  // Default: yes.
  virtual bool holds() const { return true; }
};

}  // namespace onceq
