#pragma once

// How a shard's requests reach its broker and when their answers go out:
// the one thing a single node's shard and a cluster's shard do differently.
// The shard (shard.hpp) owns the loop, the mailbox, the parked waiters,
// their deadlines, drain and stop; it picks its path once, at construction,
// and asks it:
//
//   local_path (shard/local_path.hpp): the broker is the loop's own.
//     Apply at once on the loop (reads from memory, the disk on the reader
//     thread), answer after the loop's one sync per iteration (or two,
//     when a long iteration hands its first commands to an idle syncer).
//   replicated_path (shard/replicated_path.hpp): the broker is a replica's,
//     on the thread that applies the shard's Raft log (shard_log.hpp).
//     Propose, apply on commit, answer with what the apply returned.
//
// Both run every command through the same row of the command table
// (broker/dispatch.hpp): the local path calls run_command, the replicated
// path's replicas call apply_entry, which calls it.
//
// Calls marked "loop" come from the shard's loop thread only; the others
// from any thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "broker/dispatch.hpp"
#include "shard/waiters.hpp"
#include "storage/store.hpp"

namespace onceq {

// A read (or, on a single node, any function of the broker) with its
// answer, erased: the shard's typed execute/query build it, the path runs
// it where the broker lives.
class broker_job {
 public:
  virtual ~broker_job() = default;
  // Runs on the broker. false: a read would have waited for the disk
  // (errc::would_block: it changed nothing); run it again once it can.
  virtual bool run(broker& b) = 0;
  // It will not run (stopping, backpressure, not the leader): answers e.
  virtual void refuse(error e) = 0;
};

class apply_path {
 public:
  using reply_fn = std::function<void(result<log_reply>)>;
  using durable_fn = std::function<void(result<void>)>;

  virtual ~apply_path() = default;

  // Before the loop's thread starts; after the loop was drained, before it
  // ends (stop answers what the path still holds).
  virtual void start() = 0;
  virtual void stop() = 0;

  // A command that changes state (writes<Cmd>): done gets what its row
  // answered, once it is durable (errors at once).
  virtual void write(log_command cmd, reply_fn done) = 0;
  // Runs job where the broker lives. fresh: as shard::query.
  virtual void read(bool fresh, std::unique_ptr<broker_job> job) = 0;
  // One try of w: with its acks first if it has any (its first try), then
  // the consume; shard::consumed gets what it got, on the loop. first: from
  // any thread; later tries (a wake-up) from the loop.
  virtual void consume(std::shared_ptr<consume_waiter> w, bool first) = 0;
  // One check of w's key; shard::key_checked gets its state, on the loop.
  // first: from any thread; later checks from the loop. last: the wait
  // ran out, the state as it is is the answer.
  virtual void check_key(std::shared_ptr<key_waiter> w, bool first, bool last) = 0;

  // fn runs once what was written so far (and so what a read showed) is
  // durable. Called on the loop, or (replicated: durable already, fn runs
  // at once) on the log's thread by a read's answer.
  virtual void after_durable(durable_fn fn) = 0;
  // Loop, at the end of each iteration, before the waiters' deadlines: the
  // path's own timers and wake-ups.
  virtual void end_iteration() = 0;
  // Loop, the iteration's last step (and drain's): the durability of what
  // the iteration wrote.
  virtual void flush() = 0;
  // Loop, between the iteration's handlers: flush() now if the disk waits
  // for work, so that the sync of what the iteration wrote so far overlaps
  // the rest of it. Default: nothing (the iteration's end flushes).
  virtual void flush_if_disk_idle() {}
  // Loop: the latest time the loop may sleep to (the path's deadlines).
  virtual std::chrono::steady_clock::time_point wake_by(
      std::chrono::steady_clock::time_point now) const = 0;

  // Whether the shard can write: its store, and its log in a cluster.
  virtual storage::store_health health() const = 0;
  // Whether this node holds the shard's state (a cluster node may hold no
  // replica of a shard the placement put elsewhere). Default: yes.
  virtual bool held() const { return true; }
  // Requests whose reads needed the disk: handed to the reader thread, and
  // run on the loop with reads that may wait (metrics; 0 in a cluster).
  virtual std::uint64_t disk_reads() const = 0;
  virtual std::uint64_t loop_disk_reads() const = 0;
};

}  // namespace onceq
