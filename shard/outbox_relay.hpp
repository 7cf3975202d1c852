#pragma once

// Carries each shard's outbox to the shards of its target topics
// (docs/DESIGN.md, "Workflow steps"). An ack that produces into a topic on
// another shard writes an outbox record in its own transaction; the relay
// then, for that source shard:
//   1. reads the outbox (broker::outbox_pending, in sequence order),
//   2. sends each target shard its entries in one outbox_append command
//      (every target at once, one batch in flight per source and target;
//      the target drops any sequence at or below the source's high-water
//      mark it keeps, so a resend after a crash stores nothing twice),
//   3. writes outbox_done on the source with what the targets took, which
//      removes those records and notes where they went on the step's key.
// Entries a target did not take (no leader, its disk refusing writes, its
// backlog full) stay and are sent again by the next pass: every
// k_retry_ms, and after every ack that adds to the outbox. Passes of one
// source never overlap (a pass ends when its targets answered; its
// outbox_done may still be on its way, and the next pass skips the
// entries it names), so a target sees each source's sequences in order.
//
// An ack's answer waits for one pass (flush): each of its entries is then
// stored (with its place) or still pending.
//
// Thread safety: every member may be called from any thread; the shards'
// answers arrive on their own threads and the relay's state is under a
// mutex, never held while calling out.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <atomic>
#include <condition_variable>
#include <thread>

#include "broker/commands.hpp"
#include "shard/shard_set.hpp"

namespace onceq {

class outbox_relay {
 public:
  // How an outbox_append reaches target shard id (default: submit it to
  // this node's shard; a cluster's node forwards it to the shard's leader
  // when it is not). done may run on any thread.
  using deliver_fn =
      std::function<void(std::uint32_t target, outbox_append_cmd cmd,
                         std::function<void(result<std::vector<outbox_appended>>)> done)>;
  // An entry's outcome for a flush: its place, or pending.
  using flushed_fn = std::function<void(std::map<std::uint64_t, step_produced>)>;

  static constexpr std::chrono::milliseconds k_retry_ms{500};

  explicit outbox_relay(shard_set& shards, deliver_fn deliver = {});
  ~outbox_relay();
  outbox_relay(const outbox_relay&) = delete;
  outbox_relay& operator=(const outbox_relay&) = delete;

  // Starts the retry thread ("onceq-outbox"), which kicks every shard's
  // pass every k_retry_ms. stop() (idempotent, also the destructor's) ends
  // it and waits (up to 5 s) for the answers of the calls in flight; call
  // it from a thread that is not a shard's loop.
  void start();
  void stop();

  // Runs a pass of source's outbox now (or right after the one running).
  void kick(std::uint32_t source);
  // Runs a pass that starts after this call, then calls done with what
  // became of each of seqs (entries of source's outbox): stored (with
  // partition/offset) or pending. Never fails: anything that went wrong
  // leaves the entries pending, for the next pass.
  void flush(std::uint32_t source, std::vector<std::uint64_t> seqs, flushed_fn done);

 private:
  struct waiter {
    std::vector<std::uint64_t> seqs;
    flushed_fn done;
    std::uint64_t from_pass = 0;  // answered by the first pass numbered this or above
  };
  struct source_state {
    std::mutex mu;
    bool running = false;
    bool again = false;
    std::uint64_t pass = 0;  // passes started
    std::vector<waiter> waiters;
    // What the targets took lately, by seq: a pass that started before a
    // flush may take that flush's entries (the ack was written before its
    // flush was asked for), so a waiter also looks here. Bounded.
    std::map<std::uint64_t, step_produced> recent;
    // Taken by their targets, their outbox_done not written yet: the next
    // pass, which may start meanwhile, does not send them again.
    std::set<std::uint64_t> finishing;
    // Every seq up to this one is durable on the source: a flush names
    // entries of an ack whose answer waited for durability, and the store
    // makes writes durable in order. A pass reads the outbox as it is (no
    // wait) and sends only these; the retry timer's pass reads durably.
    std::uint64_t durable_upto = 0;
    bool fresh_next = false;  // the next pass reads durably
  };
  static constexpr std::size_t k_recent_max = 1 << 16;
  struct pass_state;

  void run_pass(std::uint32_t source, std::uint64_t pass, bool fresh);
  // kick(), the pass reading the outbox durably.
  void kick_fresh(std::uint32_t source);
  // The targets of a pass answered: what they took, by seq. Answers the
  // waiters the pass serves (the targets stored their entries durably).
  void took(std::uint32_t source, std::uint64_t pass, std::map<std::uint64_t, step_produced> taken);
  // A pass ended (its targets answered); more: the outbox may hold more
  // than the pass read.
  void end_pass(std::uint32_t source, bool more);

  shard_set& shards_;
  deliver_fn deliver_;
  std::vector<std::unique_ptr<source_state>> sources_;
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;  // run_mu_
  std::thread thread_;
  // Calls to the shards whose answers have not come back (each holds
  // `this`): stop() waits for them. Once stopped_, no pass starts.
  std::atomic<bool> stopped_{false};
  std::atomic<int> calls_{0};
  class call_guard;
};

}  // namespace onceq
