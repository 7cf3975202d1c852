#include "storage/rocksdb/wal_syncer.hpp"

#include <pthread.h>

#include <chrono>

namespace onceq::storage {

void wal_syncer::start() {
  const bool caller_syncs = opts_.sync_on_caller && opts_.fsync.kind == fsync_policy::mode::always;
  if (opts_.fsync.kind != fsync_policy::mode::none && !caller_syncs) {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "onceq-sync");
      run();
    });
  }
}

void wal_syncer::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    busy_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<callback> rest;
  {
    std::lock_guard lk(mu_);
    rest.swap(pending_);
  }
  release(rest, sync());
}

result<void> wal_syncer::flush() {
  std::lock_guard lk(flush_mu_);
  const std::uint64_t seen = writes_.load(std::memory_order_acquire);
  if (seen == flushed_writes_) return {};
  if (!db_ || wal_write_failed_.load(std::memory_order_acquire)) return faults_.error_now();
  const rocksdb::Status s = db_->FlushWAL(false);
  if (!s.ok()) {
    wal_write_failed_.store(true, std::memory_order_release);
    faults_.set("wal write failed: " + s.ToString());
    return faults_.error_now();
  }
  flushed_writes_ = seen;
  return {};
}

// Makes every write that returned before this call durable. It syncs even
// while the store refuses writes: a fault from a flush or compaction (disk
// full) leaves the WAL working, and writes that reached it before the fault
// are then answered as what they are, durable; only a failed sync itself
// fails them. With every write synced it succeeds at once, so reads
// (GET /v1/keys, /metrics) keep being answered during a fault without ever
// showing a state that is not durable.
result<void> wal_syncer::sync() {
  std::lock_guard lk(db_mu_);
  const std::uint64_t seen = writes_.load(std::memory_order_acquire);
  if (seen == synced_writes_) return {};
  if (!db_) return faults_.error_now();  // a reopen failed: nothing can be synced
  // After a failed fsync a later one may "succeed" over pages the kernel
  // already dropped (PostgreSQL's fsyncgate): nothing is promised again
  // until resume() has made the data durable another way.
  if (sync_failed_ || wal_write_failed_.load(std::memory_order_acquire)) {
    return faults_.error_now();
  }
  const auto started = std::chrono::steady_clock::now();
  // The buffered WAL (manual_wal_flush) is written, then synced.
  const rocksdb::Status s = db_->FlushWAL(true);
  stats_.observe(std::chrono::steady_clock::now() - started);
  if (!s.ok()) {
    sync_failed_ = true;
    faults_.set("wal sync failed: " + s.ToString());
    return faults_.error_now();
  }
  synced_writes_ = seen;
  return {};
}

void wal_syncer::forget_failures() {
  synced_writes_ = writes_.load(std::memory_order_acquire);
  sync_failed_ = false;
  wal_write_failed_.store(false, std::memory_order_release);
}

void wal_syncer::when_durable(callback done) {
  if (opts_.fsync.kind != fsync_policy::mode::always) {
    // The policy does not wait for the disk, but what is answered reaches
    // the WAL's file first (one write for the round), so that it survives
    // a kill -9. It promises nothing more during a fault: writes are
    // refused then, reads are answered.
    done(flush());
    return;
  }
  {
    std::lock_guard lk(mu_);
    pending_.push_back(std::move(done));
    busy_.store(true, std::memory_order_release);
  }
  if (!opts_.sync_on_caller) cv_.notify_one();
}

void wal_syncer::sync_pending() {
  if (!opts_.sync_on_caller || opts_.fsync.kind != fsync_policy::mode::always) return;
  std::vector<callback> ready;
  {
    std::lock_guard lk(mu_);
    if (pending_.empty()) return;
    ready.swap(pending_);
  }
  release(ready, sync());
}

void wal_syncer::sync_here(callback done) {
  if (!thread_.joinable() || opts_.fsync.kind != fsync_policy::mode::always) {
    when_durable(std::move(done));
    return sync_pending();
  }
  {
    std::lock_guard lk(mu_);
    if (busy_.load(std::memory_order_relaxed) || stop_) {
      // A sync runs (or callbacks wait for one): done joins the next round
      // there, after the rounds before it.
      pending_.push_back(std::move(done));
      busy_.store(true, std::memory_order_release);
      cv_.notify_one();
      return;
    }
    // Idle, and only this thread registers callbacks: nothing can queue
    // behind done until it has run. Busy meanwhile, for idle().
    busy_.store(true, std::memory_order_release);
  }
  std::vector<callback> ready;
  ready.push_back(std::move(done));
  release(ready, sync());
  std::lock_guard lk(mu_);
  if (pending_.empty()) busy_.store(false, std::memory_order_release);
}

// Runs callbacks that waited for the syncer, with the sync's outcome.
void wal_syncer::release(std::vector<callback>& ready, const result<void>& r) {
  stats_.add_waiters(ready.size());
  for (auto& done : ready) done(r);
}

void wal_syncer::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (opts_.fsync.kind == fsync_policy::mode::always) {
      if (pending_.empty()) busy_.store(false, std::memory_order_release);
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) continue;  // stopping; stop() drains
      // Everything registered while the previous sync ran shares this one.
      std::vector<callback> ready;
      ready.swap(pending_);
      lk.unlock();
      release(ready, sync());
      lk.lock();
    } else {  // interval
      cv_.wait_for(lk, opts_.fsync.interval, [&] { return stop_; });
      if (stop_) break;
      lk.unlock();
      (void)sync();  // swallowed: a failure marks the store not writable, which later calls see
      lk.lock();
    }
  }
}

}  // namespace onceq::storage
