#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "storage/rocksdb/db_open.hpp"
#include "storage/rocksdb/fault_state.hpp"
#include "storage/rocksdb/fsync_policy.hpp"
#include "storage/sync_stats.hpp"

namespace onceq::storage {

// The group commit. Writes go to the WAL's buffer in memory
// (manual_wal_flush); this writes the buffer to its file once per round of
// answers and, under fsync=always, syncs it once for every when_durable()
// callback that queued up while the previous sync ran, then runs them in
// order: on a syncer thread (pipelined), or on the caller's thread in
// sync_pending() (sync_on_caller). Under interval the thread also syncs
// every interval; under none there is no thread.
//
// A failed write or sync of the WAL faults the store (fault_state) and
// nothing is promised again until resume() calls forget_failures().
//
// Thread safety: count_write/flush/when_durable/sync_pending from the
// store's writer thread; callbacks run on the syncer thread (inline under
// interval/none). The syncer holds db_mutex() around its use of the
// database; resume() holds it while it may reopen the database.
class wal_syncer {
 public:
  using callback = std::function<void(result<void>)>;

  wal_syncer(const storage_options& opts, db_handle& db, fault_state& faults)
      : opts_(opts), db_(db), faults_(faults) {}
  wal_syncer(const wal_syncer&) = delete;
  wal_syncer& operator=(const wal_syncer&) = delete;

  // Starts the syncer thread when the policy needs one.
  void start();
  // Stops the thread, then one final sync covers the callbacks registered
  // after its last round (and, under interval/none, whatever is still
  // unsynced); without a database they fail. Before the database closes.
  void stop();

  // A write was applied to the database (after db->Write returned).
  void count_write() { writes_.fetch_add(1, std::memory_order_release); }
  // Writes the WAL's buffer to its file (no sync): every write that
  // returned before this call then survives a kill -9 (the OS page cache
  // keeps it). A failure faults the store like a failed write.
  result<void> flush();
  void when_durable(callback done);
  // With sync_on_caller: one sync for every callback registered so far,
  // then runs them, on the caller's thread. Otherwise nothing.
  void sync_pending();
  // With a syncer thread that is idle (fsync always): one sync on the
  // caller for done, then done; the thread stays asleep. Otherwise
  // when_durable(done), then sync_pending(). From the writer thread.
  void sync_here(callback done);
  // Whether the syncer thread waits for work (fsync always on its own
  // thread): no callback queued, no sync running. Any thread.
  bool idle() const noexcept { return !busy_.load(std::memory_order_acquire); }

  // The lock the syncer holds around its use of the database.
  std::mutex& db_mutex() { return db_mu_; }
  // With db_mutex() held, after resume() made every write durable another
  // way: everything written so far counts as synced, and failed syncs and
  // WAL writes are forgotten.
  void forget_failures();
  sync_stats stats() const { return stats_.snapshot(); }

 private:
  result<void> sync();
  void release(std::vector<callback>& ready, const result<void>& r);
  void run();

  const storage_options& opts_;
  db_handle& db_;
  fault_state& faults_;

  // Writes applied so far, so that a sync that would cover nothing new is
  // skipped. Incremented after db_->Write returns.
  std::atomic<std::uint64_t> writes_{0};
  // Every SyncWAL call (its duration) and every callback the syncer released.
  sync_stats_recorder stats_;

  // pending_ holds when_durable callbacks (fsync always only) in
  // registration order; the syncer takes them all, syncs once, runs them.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<callback> pending_;
  // Not idle(): set when a callback is queued and while there is no syncer
  // thread waiting (before start, after stop, under interval); cleared by
  // the thread (fsync always) when it waits with nothing queued.
  std::atomic<bool> busy_{true};
  bool stop_ = false;
  std::thread thread_;

  // Held around every use of the database by sync() and by resume(), which
  // may close and reopen it. Guards synced_writes_ and sync_failed_.
  std::mutex db_mu_;
  std::uint64_t synced_writes_ = 0;
  bool sync_failed_ = false;  // a SyncWAL failed; cleared by forget_failures()
  // The WAL is buffered in memory (manual_wal_flush) and written to its
  // file once per round of callbacks, not once per write: the writes of a
  // shard's loop iteration reach the file with one write(2). flushed_writes_
  // is writes_ as of the last flush of the writer's side (flush_mu_).
  std::mutex flush_mu_;
  std::uint64_t flushed_writes_ = 0;
  // A write of the WAL buffer failed: nothing is promised again until
  // resume() (as after a failed sync).
  std::atomic<bool> wal_write_failed_{false};
};

}  // namespace onceq::storage
