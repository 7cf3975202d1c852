#pragma once

// A single node's apply path (apply_path.hpp): the broker is the loop's
// own. A request runs at once on the loop: reads from memory only
// (store::memory_reads); one that misses runs again after the reader
// thread (disk_reader.hpp) has read the disk into the block cache. Writes
// go into the store unsynced; at the end of the iteration one when_durable
// covers everything it wrote (with --wal-sync loop the loop syncs the WAL
// itself, store::sync_pending) and releases the answers. A long iteration
// may hand its first answers to an idle syncer sooner (flush_if_disk_idle);
// when every connection of the loop waits for an answer (or has been
// quiet a while), the loop makes the sync itself instead of waking an idle
// syncer (store::sync_here, shard/loop_clients.hpp).
// The end of an iteration also fires the broker's timers and wakes the
// consumers and key waiters its writes concern. While the store refuses writes, it asks
// the store to resume every 500 ms and rebuilds the broker after a reopen.
//
// Thread safety: write, read, the first consume and key check from any
// thread (they cross through the shard's mailbox); the rest on the loop.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shard/apply_path.hpp"
#include "shard/disk_reader.hpp"

namespace onceq {

class shard;

class local_path final : public apply_path {
 public:
  // s, b, store and time outlive the path; b and store are s's.
  local_path(shard& s, broker& b, storage::store& store, const clock& time);

  void start() override;
  void stop() override;
  void write(log_command cmd, reply_fn done) override;
  void read(bool fresh, std::unique_ptr<broker_job> job) override;
  void consume(std::shared_ptr<consume_waiter> w, bool first) override;
  void check_key(std::shared_ptr<key_waiter> w, bool first, bool last) override;
  void after_durable(durable_fn fn) override;
  void end_iteration() override;
  void flush() override;
  void flush_if_disk_idle() override;
  std::chrono::steady_clock::time_point wake_by(
      std::chrono::steady_clock::time_point now) const override;
  storage::store_health health() const override { return store_.health(); }
  std::uint64_t disk_reads() const override { return reader_.reads(); }
  std::uint64_t loop_disk_reads() const override {
    return loop_disk_reads_.load(std::memory_order_relaxed);
  }

 private:
  struct command_step;
  struct read_step;
  struct consume_step;
  struct key_step;

  // The steps: run on the loop, false when a read would have waited for the
  // disk (the step changed nothing; run_reading runs it again).
  bool apply(const log_command& cmd, reply_fn& done);
  bool try_consume(const std::shared_ptr<consume_waiter>& w);
  bool try_key(const std::shared_ptr<key_waiter>& w, bool last);
  // After a create or delete: the shard's topic-change listener.
  void report_topics(const log_command& cmd);

  // Loop: runs step (a callable returning bool, as above) with the store
  // reading from memory only. On false the reader thread reads what it
  // missed into memory and the step runs again on the loop; its
  // k_memory_tries-th run reads from the disk on the loop, so a step that
  // keeps missing memory still ends. Without a running reader (before
  // start, stopping) step just runs.
  template <class Step>
  void run_reading(Step step) {
    if (!reading_from_memory_) {
      step();
      return;
    }
    bool done = false;
    {
      memory_reads_scope scope(store_);
      done = step();
    }
    if (!done) {
      auto held = std::make_shared<Step>(std::move(step));
      read_then_retry([held] { return (*held)(); }, 1);
    }
  }
  struct memory_reads_scope {
    explicit memory_reads_scope(storage::store& s) : store(s) { store.memory_reads(true); }
    ~memory_reads_scope() { store.memory_reads(false); }
    memory_reads_scope(const memory_reads_scope&) = delete;
    memory_reads_scope& operator=(const memory_reads_scope&) = delete;
    storage::store& store;
  };
  void read_then_retry(std::function<bool()> step, int tries);
  void retry_reading(std::function<bool()> step, int tries);

  // The round's answers as one callback for the store; the round is empty
  // after.
  std::function<void(result<void>)> take_round();

  // While the store refuses writes: store::resume() every k_resume_every,
  // and a rebuild of the broker's memory when the store had to reopen.
  void try_resume();

  shard& shard_;
  broker& broker_;
  storage::store& store_;
  const clock& clock_;
  // Reads that need the disk (run_reading); started with the loop.
  disk_reader reader_;
  bool reading_from_memory_ = false;  // loop only; set before the loop starts
  std::atomic<std::uint64_t> loop_disk_reads_{0};

  // Loop only.
  // Answers waiting for the iteration's writes to be durable: one
  // when_durable (and so one sync) for all of them, consumes woken by the
  // iteration's produces included, unless flush_if_disk_idle hands the
  // first of them over before the iteration ends.
  std::vector<durable_fn> round_;
  // When the round's first answer joined it (flush_if_disk_idle).
  std::chrono::steady_clock::time_point round_began_{};
  std::chrono::steady_clock::time_point next_resume_{};
  bool needs_recover_ = false;
};

}  // namespace onceq
