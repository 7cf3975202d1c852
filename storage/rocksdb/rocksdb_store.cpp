#include "storage/rocksdb/rocksdb_store.hpp"

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_manager.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/log.hpp"
#include "storage/rocksdb/wal_prezero.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {
namespace {

constexpr millis k_max_interval_ms = 60'000;

// The retry hint on errors while the store is not writable: the runner asks
// resume() about every 500 ms, and RocksDB's SstFileManager re-checks free
// space every 5 s, so a client retrying after a second sees the store back
// soon after the fault cleared without hammering it before.
constexpr millis k_fault_retry_after_ms = 1'000;

// Written, synced and removed by resume() before reopening the database, so
// that a fault that has not cleared (read-only, still full, EIO) does not
// cost the open database that still serves reads.
constexpr const char* k_probe_name = ".onceq-write-probe";
constexpr std::size_t k_probe_bytes = 4096;

// Column family names, indexed by storage::column. RocksDB also requires
// "default"; it stays empty (an empty memtable pins no WAL file).
constexpr std::array<const char*, k_column_count> k_cf_names = {"meta", "messages", "deliveries",
                                                                "keys", "dedup"};

rocksdb::Slice to_slice(std::string_view s) {
  return {s.data(), s.size()};
}
std::string_view to_view(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

error io_error(std::string_view what, const rocksdb::Status& s) {
  return make_error(errc::unavailable, std::string(what) + ": " + s.ToString());
}

const char* reason_name(rocksdb::BackgroundErrorReason r) {
  using R = rocksdb::BackgroundErrorReason;
  switch (r) {
    case R::kFlush:
    case R::kFlushNoWAL:
      return "flush";
    case R::kCompaction:
      return "compaction";
    case R::kWriteCallback:
      return "write";
    case R::kMemTable:
      return "memtable insert";
    case R::kManifestWrite:
    case R::kManifestWriteNoWAL:
      return "manifest write";
  }
  return "background work";
}

// RocksDB's view of its own errors, forwarded to the store: a hard (or
// worse) background error stops every write until recovery, so the store
// stops taking writes at once instead of when the next one fails. Soft
// errors (a compaction out of space) leave writes working and are only
// logged; RocksDB retries them itself. Called on RocksDB's threads, with
// its DB mutex released; the callbacks only take the store's fault lock.
class fault_listener final : public rocksdb::EventListener {
 public:
  using report = std::function<void(std::string)>;
  fault_listener(report on_fault, report on_note)
      : on_fault_(std::move(on_fault)), on_note_(std::move(on_note)) {}

  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* e) override {
    if (e == nullptr || e->ok()) return;
    const std::string what = fmt::format("{} failed: {}", reason_name(reason), e->ToString());
    if (e->severity() >= rocksdb::Status::Severity::kHardError) {
      on_fault_(what);
    } else {
      on_note_(what + " (writes go on; RocksDB retries)");
    }
  }

  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override {
    if (info.old_bg_error.ok()) return;  // nothing was wrong (RocksDB reports those too)
    if (info.new_bg_error.ok()) {
      on_note_("RocksDB recovered by itself from: " + info.old_bg_error.ToString());
    } else {
      on_note_("RocksDB's own recovery failed: " + info.new_bg_error.ToString());
    }
  }

 private:
  report on_fault_;
  report on_note_;
};

// RocksDB's info log (data_dir/LOG) through stdio. RocksDB's own file
// logger shares the WAL's file writer, which refuses every call after one
// failed append and, in a build with assertions (Debian's librocksdb),
// aborts the process on the next log line once the disk was full. Here a
// failed write only loses that line. The previous LOG is kept as LOG.old.
class stdio_info_log final : public rocksdb::Logger {
 public:
  explicit stdio_info_log(const std::string& dir) {
    const std::string path = dir + "/LOG";
    std::error_code ec;
    std::filesystem::rename(path, path + ".old", ec);  // swallowed: there may be none
    f_ = std::fopen(path.c_str(), "we");
  }
  ~stdio_info_log() override {
    if (f_ != nullptr) std::fclose(f_);
  }
  stdio_info_log(const stdio_info_log&) = delete;
  stdio_info_log& operator=(const stdio_info_log&) = delete;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (f_ == nullptr) return;
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1'000'000;
    std::tm tm{};
    ::localtime_r(&secs, &tm);
    std::lock_guard lk(mu_);
    std::fprintf(f_, "%04d/%02d/%02d-%02d:%02d:%02d.%06lld ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(micros));
    std::vfprintf(f_, format, ap);
    std::fputc('\n', f_);
    std::fflush(f_);  // swallowed on a full disk: the line is lost, nothing else
  }

 private:
  std::mutex mu_;
  std::FILE* f_ = nullptr;
};

// Creates, writes, fsyncs and removes a small file in dir: whether the
// filesystem takes a durable write right now.
result<void> probe_write(const std::string& dir) {
  const std::string path = dir + "/" + k_probe_name;
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error(errc::unavailable,
                      fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  const std::array<char, k_probe_bytes> zeros{};
  std::size_t done = 0;
  int failed = 0;
  while (done < zeros.size() && failed == 0) {
    const ssize_t w = ::write(fd, zeros.data() + done, zeros.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      failed = w < 0 ? errno : ENOSPC;
    } else {
      done += static_cast<std::size_t>(w);
    }
  }
  if (failed == 0 && ::fsync(fd) != 0) failed = errno;
  ::close(fd);
  (void)::unlink(path.c_str());  // swallowed: a leftover probe is harmless and rewritten next time
  if (failed != 0) {
    return make_error(errc::unavailable,
                      fmt::format("cannot write {}: {}", path, std::strerror(failed)));
  }
  return {};
}

// Drops key_record / dedup_record values whose expires_at_ms has passed, so
// that expired idempotency keys and dedup ids cost no disk after the next
// compaction. RocksDB turns a removal into a tombstone, so an older version
// of the key in a lower level cannot resurface. One instance is shared by
// all compaction threads: it only reads an immutable pointer and a
// thread-safe clock.
class expiry_filter final : public rocksdb::CompactionFilter {
 public:
  explicit expiry_filter(const clock& time) : time_(time) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    const millis exp = expires_at_of(to_view(value));
    return exp != 0 && exp < time_.now_ms();
  }
  const char* Name() const override { return "onceq.expiry_filter"; }

 private:
  const clock& time_;
};

// The order in which b's ops go into the WriteBatch. A batch is applied
// atomically and only the last op on a key counts, so ops may be reordered
// as long as ops on the same key keep their order: sorted by (family, key),
// stably, each memtable's inserts come in key order, and RocksDB's skiplist
// then inserts next to the previous key (its cached splice) instead of
// searching from the top. A produce of 100 messages over 4 partitions
// otherwise jumps between 4 regions of the messages family at every insert.
// A range delete overlaps keys it does not name: batches with one keep their
// order.
std::vector<const batch::op*> apply_order(const batch& b) {
  std::vector<const batch::op*> order;
  order.reserve(b.size());
  bool sortable = true;
  for (const auto& op : b.ops()) {
    order.push_back(&op);
    sortable = sortable && op.k != batch::kind::del_range;
  }
  if (sortable && order.size() > 2) {
    std::stable_sort(order.begin(), order.end(), [](const batch::op* x, const batch::op* y) {
      if (x->col != y->col) return x->col < y->col;
      return x->key < y->key;
    });
  }
  return order;
}

}  // namespace

// ---- fsync_policy -------------------------------------------------------

result<fsync_policy> fsync_policy::parse(std::string_view text) {
  if (text == "always") return fsync_policy{mode::always, 0};
  if (text == "none") return fsync_policy{mode::none, 0};
  constexpr std::string_view k_prefix = "interval:";
  if (text.starts_with(k_prefix)) {
    const std::string_view num = text.substr(k_prefix.size());
    millis ms = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), ms);
    if (!num.empty() && ec == std::errc{} && end == num.data() + num.size() && ms >= 1 &&
        ms <= k_max_interval_ms) {
      return fsync_policy{mode::interval, ms};
    }
  }
  return make_error(errc::invalid_argument,
                    "invalid fsync policy \"" + std::string(text) +
                        "\": expected always, none or interval:<ms> with ms in 1..60000");
}

std::string fsync_policy::to_string() const {
  switch (kind) {
    case mode::always:
      return "always";
    case mode::none:
      return "none";
    case mode::interval:
      return "interval:" + std::to_string(interval_ms);
  }
  return "always";
}

// ---- impl ---------------------------------------------------------------

struct rocksdb_store::impl {
  using callback = std::function<void(result<void>)>;

  storage_options opts_;
  system_clock own_clock_;
  // Declared before db_ so that they outlive it (members die in reverse order);
  // the destructor also closes the db_ explicitly first.
  std::unique_ptr<expiry_filter> filter_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::Env> env_;  // outlives sfm_ and db_; null: the default Env
  // Watches free space after a no-space error and resumes RocksDB by itself
  // (every 5 s, once a write buffer's worth is free). Kept across reopens.
  std::shared_ptr<rocksdb::SstFileManager> sfm_;
  std::shared_ptr<fault_listener> listener_;
  std::shared_ptr<stdio_info_log> info_log_;
  rocksdb::CompressionType compression_ = rocksdb::kNoCompression;
  // Null only after a reopen whose open failed, until resume() opens it.
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, k_column_count> cfs_{};
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;

  // Whether writes are accepted. Cleared by the first failed write or sync
  // (or a hard background error), set again only by resume(): until then
  // RocksDB (and the kernel, after a failed fsync) may have lost what it
  // acknowledged, so nothing new is promised. Read by any thread; changed
  // under fault_mu_ together with fault_reason_.
  std::atomic<bool> writable_{true};
  mutable std::mutex fault_mu_;
  std::string fault_reason_;
  std::chrono::steady_clock::time_point fault_since_;

  // Writes applied so far, so that the syncer can skip a sync that would
  // cover nothing new. Incremented after db_->Write returns.
  std::atomic<std::uint64_t> writes_{0};
  // Every SyncWAL call (its duration) and every callback the syncer released.
  sync_stats_recorder stats_;

  // Syncer state. pending_ holds when_durable callbacks (fsync always only)
  // in registration order; the syncer takes them all, syncs once, runs them.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<callback> pending_;
  bool stop_ = false;
  std::thread syncer_;

  // Held by the syncer around its use of db_ and by resume(), which may
  // close and reopen db_. Guards synced_writes_.
  std::mutex db_mu_;
  std::uint64_t synced_writes_ = 0;
  // Held shared by warm() (the shard's reader thread) and exclusively by
  // resume() around closing and reopening db_. (The shard stops its reader
  // before the store is destroyed.)
  std::shared_mutex open_mu_;
  // memory_reads(): reads from the block cache only, and the misses (loop).
  bool memory_reads_ = false;
  read_misses misses_;
  std::atomic<bool> watch_stalls_{false};       // watch_write_stalls()
  std::atomic<std::uint64_t> write_stalls_{0};  // writes that stalled
  bool sync_failed_ = false;                    // a SyncWAL failed; cleared by resume() (db_mu_)
  // The WAL is buffered in memory (manual_wal_flush) and written to its
  // file once per round of callbacks, not once per write: the writes of a
  // shard's loop iteration reach the file with one write(2). flushed_writes_
  // is writes_ as of the last flush of the writer's side (flush_mu_).
  std::mutex flush_mu_;
  std::uint64_t flushed_writes_ = 0;
  // A write of the WAL buffer failed: nothing is promised again until
  // resume() (as after a failed sync).
  std::atomic<bool> wal_write_failed_{false};

  rocksdb::ColumnFamilyHandle* cf(column c) const { return cfs_[static_cast<int>(c)]; }

  // ---- fault state ------------------------------------------------------

  void set_fault(std::string reason) {
    {
      std::lock_guard lk(fault_mu_);
      if (!writable_.load(std::memory_order_relaxed)) return;  // the first reason stays
      fault_reason_ = reason;
      fault_since_ = std::chrono::steady_clock::now();
      writable_.store(false, std::memory_order_release);
    }
    log(log_level::error, "storage", fmt::format("not writable: {}", reason));
  }

  void clear_fault(std::string_view how) {
    std::chrono::steady_clock::duration down{};
    {
      std::lock_guard lk(fault_mu_);
      down = std::chrono::steady_clock::now() - fault_since_;
      fault_reason_.clear();
      writable_.store(true, std::memory_order_release);
    }
    log(log_level::warn, "storage",
        fmt::format("writable again after {} ms ({})",
                    std::chrono::duration_cast<std::chrono::milliseconds>(down).count(), how));
  }

  // Replaces the reason while still not writable (resume learnt more).
  void update_reason(std::string reason) {
    std::lock_guard lk(fault_mu_);
    if (!writable_.load(std::memory_order_relaxed)) fault_reason_ = std::move(reason);
  }

  store_health health() const {
    // Healthy: no lock (GET /v1/healthz asks every shard's store).
    if (writable_.load(std::memory_order_acquire)) return {true, {}};
    std::lock_guard lk(fault_mu_);
    return {writable_.load(std::memory_order_relaxed), fault_reason_};
  }

  // A read's options: from memory only while memory_reads_ is on.
  rocksdb::ReadOptions read_options() const {
    rocksdb::ReadOptions ro;
    if (memory_reads_) ro.read_tier = rocksdb::kBlockCacheTier;
    return ro;
  }

  // A read from memory only that needed the disk: kept for warm().
  error would_block() const { return make_error(errc::would_block, "the read needs the disk"); }

  // What every refused write, failed callback and read without a database
  // answers while not writable.
  error fault_error() const {
    error e = make_error(errc::unavailable, "storage is not writable: " + health().reason);
    e.retry_after_ms = k_fault_retry_after_ms;
    return e;
  }

  // ---- syncer -----------------------------------------------------------

  // Writes the WAL's buffer to its file (no sync): every write that
  // returned before this call then survives a kill -9 (the OS page cache
  // keeps it). A failure faults the store like a failed write.
  result<void> flush_wal() {
    std::lock_guard lk(flush_mu_);
    const std::uint64_t seen = writes_.load(std::memory_order_acquire);
    if (seen == flushed_writes_) return {};
    if (!db_ || wal_write_failed_.load(std::memory_order_acquire)) return fault_error();
    const rocksdb::Status s = db_->FlushWAL(false);
    if (!s.ok()) {
      wal_write_failed_.store(true, std::memory_order_release);
      set_fault("wal write failed: " + s.ToString());
      return fault_error();
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
  result<void> sync_wal() {
    std::lock_guard lk(db_mu_);
    const std::uint64_t seen = writes_.load(std::memory_order_acquire);
    if (seen == synced_writes_) return {};
    if (!db_) return fault_error();  // a reopen failed: nothing can be synced
    // After a failed fsync a later one may "succeed" over pages the kernel
    // already dropped (PostgreSQL's fsyncgate): nothing is promised again
    // until resume() has made the data durable another way.
    if (sync_failed_ || wal_write_failed_.load(std::memory_order_acquire)) return fault_error();
    const auto started = std::chrono::steady_clock::now();
    // The buffered WAL (manual_wal_flush) is written, then synced.
    const rocksdb::Status s = db_->FlushWAL(true);
    stats_.observe(std::chrono::steady_clock::now() - started);
    if (!s.ok()) {
      sync_failed_ = true;
      set_fault("wal sync failed: " + s.ToString());
      return fault_error();
    }
    synced_writes_ = seen;
    return {};
  }

  // Runs callbacks that waited for the syncer, with the sync's outcome.
  void release(std::vector<callback>& ready, const result<void>& r) {
    stats_.add_waiters(ready.size());
    for (auto& done : ready) done(r);
  }

  void run_syncer() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      if (opts_.fsync.kind == fsync_policy::mode::always) {
        cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) continue;  // stopping; the destructor drains
        // Everything registered while the previous sync ran shares this one.
        std::vector<callback> ready;
        ready.swap(pending_);
        lk.unlock();
        release(ready, sync_wal());
        lk.lock();
      } else {  // interval
        cv_.wait_for(lk, std::chrono::milliseconds(opts_.fsync.interval_ms), [&] { return stop_; });
        if (stop_) break;
        lk.unlock();
        (void)
            sync_wal();  // swallowed: a failure marks the store not writable, which later calls see
        lk.lock();
      }
    }
  }

  // ---- opening, closing, resuming ---------------------------------------

  // Opens db_ and the column family handles (db_ must be null).
  result<void> open_db() {
    const rocksdb::Options db_opts = make_db_options();
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    // Unused, but given meta's options so that it shares the block cache.
    descs.emplace_back(rocksdb::kDefaultColumnFamilyName,
                       make_cf_options(column::meta, compression_));
    for (int i = 0; i < k_column_count; ++i) {
      descs.emplace_back(k_cf_names[i], make_cf_options(static_cast<column>(i), compression_));
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status s =
        rocksdb::DB::Open(rocksdb::DBOptions(db_opts), opts_.data_dir, descs, &handles, &raw);
    if (!s.ok()) return io_error("cannot open " + opts_.data_dir, s);
    db_.reset(raw);
    default_cf_ = handles[0];
    for (int i = 0; i < k_column_count; ++i) cfs_[i] = handles[i + 1];
    return {};
  }

  void close_db() {
    if (!db_) return;
    for (auto*& h : cfs_) {
      if (h != nullptr) (void)db_->DestroyColumnFamilyHandle(h);  // swallowed: closing anyway
      h = nullptr;
    }
    if (default_cf_ != nullptr) (void)db_->DestroyColumnFamilyHandle(default_cf_);
    default_cf_ = nullptr;
    // Swallowed: after a fault Close reports it again; on a clean close the
    // WAL was synced before. What is still in the WAL's buffer (writes not
    // answered yet) goes to the file first.
    (void)db_->FlushWAL(false);
    (void)db_->Close();
    db_.reset();
  }

  // resume() with db_mu_ held (so the syncer is out of the database).
  result<resume_outcome> resume_locked() {
    if (writable_.load(std::memory_order_acquire)) return resume_outcome::resumed;
    rocksdb::Status s;
    if (db_) {
      s = db_->Resume();
      if (s.IsBusy()) {
        // The SstFileManager is waiting for free space and will resume by
        // itself; a manual Resume is refused meanwhile.
        return fault_error();
      }
      if (s.ok()) {
        // Resume flushes only when RocksDB had stopped writes; after a
        // failed WAL sync alone it has nothing to do. Flushing every family
        // here makes the writes whose sync failed durable in SST files and
        // switches to a new WAL; the sync then proves the WAL works.
        s = flush_all();
        if (s.ok()) s = db_->FlushWAL(true);
        if (s.ok()) {
          synced_writes_ = writes_.load(std::memory_order_acquire);
          sync_failed_ = false;
          wal_write_failed_.store(false, std::memory_order_release);
          clear_fault("resumed in place");
          return resume_outcome::resumed;
        }
      }
      if (s.IsNoSpace()) {
        update_reason("still out of space: " + s.ToString());
        return fault_error();
      }
    }
    // RocksDB cannot go on in place (a fatal error such as EIO or EROFS, or
    // a WAL that stays broken): reopen, but only once the filesystem takes a
    // write again, so that a fault that persists keeps the old database for
    // reads.
    if (auto probe = probe_write(opts_.data_dir); !probe.ok()) {
      update_reason(fmt::format("{}{}{}", s.ok() ? "" : s.ToString(), s.ok() ? "" : "; ",
                                probe.err().message));
      return fault_error();
    }
    close_db();
    if (auto r = open_db(); !r.ok()) {
      update_reason("reopen failed: " + r.err().message);
      return fault_error();
    }
    synced_writes_ = writes_.load(std::memory_order_acquire);
    sync_failed_ = false;
    wal_write_failed_.store(false, std::memory_order_release);
    clear_fault("reopened");
    return resume_outcome::reopened;
  }

  rocksdb::Status flush_all() {
    rocksdb::FlushOptions fo;
    fo.wait = true;
    fo.allow_write_stall = true;
    std::vector<rocksdb::ColumnFamilyHandle*> all(cfs_.begin(), cfs_.end());
    return db_->Flush(fo, all);
  }

  rocksdb::Options make_db_options() const {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    // Two cores' worth of flushes and compactions; the broker thread and the
    // syncer need the rest.
    o.max_background_jobs = 2;
    // The WAL is written to its file by flush_wal() / FlushWAL(true) once
    // per round of answers, not by every Write (one write(2) per loop
    // iteration instead of one per command; docs/BENCHMARKS.md, "One WAL
    // write per iteration"). Nothing is answered before its flush.
    o.manual_wal_flush = true;
    o.keep_log_file_num = 5;
    // A WAL file is deleted only when every column family with data in it
    // has flushed. meta (cursors) sees a steady trickle of small writes and
    // would otherwise never fill its memtable, pinning every WAL forever and
    // growing the disk without bound under a steady load. Past this total
    // RocksDB flushes the families that hold the oldest WAL.
    o.max_total_wal_size = 2 * opts_.write_buffer_bytes;
    // All memtables together stay within this: five families each allowed
    // two write buffers would otherwise reach 10x write_buffer_bytes (320 MiB
    // at the default) under a produce-heavy load. The largest memtable is
    // flushed first when the total is reached.
    o.db_write_buffer_size = 3 * opts_.write_buffer_bytes;
    if (env_) o.env = env_.get();
    o.sst_file_manager = sfm_;
    o.info_log = info_log_;
    o.listeners.push_back(listener_);
    return o;
  }

  // point_lookups: the broker does Get on these families (keys, dedup) or
  // seeks to exact keys (messages, deliveries), so a bloom filter saves a
  // disk read per miss. meta is tiny and always hot.
  rocksdb::ColumnFamilyOptions make_cf_options(column c,
                                               rocksdb::CompressionType compression) const {
    rocksdb::ColumnFamilyOptions o;
    o.write_buffer_size = opts_.write_buffer_bytes;
    o.compression = compression;
    // Flushes write L0 uncompressed: L0 files are short-lived (compaction
    // soon rewrites them, compressed, into the base level), so compressing
    // them costs CPU on every flush on the hot path for little disk. With
    // dynamic level bytes, entry 1 is the base level, whatever its number.
    o.compression_per_level = {rocksdb::kNoCompression,
                               compression,
                               compression,
                               compression,
                               compression,
                               compression,
                               compression};
    // Sizes levels from the bottom up: bounded space amplification and most
    // data in the last level, where the expiry filter is forced to run.
    o.level_compaction_dynamic_level_bytes = true;

    rocksdb::BlockBasedTableOptions t;
    t.block_cache = cache_;  // one LRU cache shared by every family
    // Index and filter blocks are charged to the block cache so that memory
    // stays bounded even with hundreds of millions of keys; L0's stay pinned
    // because every lookup touches them.
    t.cache_index_and_filter_blocks = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
    // Partitioned index and filters: a lookup or seek loads one 4 KiB
    // partition instead of a file's whole index (hundreds of KB for a
    // 64 MB file of messages, LZ4-compressed) and whole filter. With a small
    // block cache under a large backlog the whole blocks were evicted and
    // re-read (and decompressed) for every read-ahead and key lookup: a 1M
    // drain spent 28% of the core thread in LZ4_decompress_safe. The small
    // top-level indexes stay pinned.
    t.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
    t.partition_filters = c != column::meta;
    t.pin_top_level_index_and_filter = true;
    t.cache_index_and_filter_blocks_with_high_priority = true;
    if (c != column::meta) {
      t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
      t.optimize_filters_for_memory = true;
    }
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));

    if (c == column::keys || c == column::dedup) {
      o.compaction_filter = filter_.get();
      // Most lookups here miss (a new idempotency key, a new msg_id): a
      // whole-key bloom filter on the memtable answers those without walking
      // the skiplist.
      o.memtable_prefix_bloom_size_ratio = 0.05;
      o.memtable_whole_key_filtering = true;
    }
    return o;
  }

  ~impl() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (syncer_.joinable()) syncer_.join();
    // Callbacks registered after the syncer's last batch; one final sync
    // covers them (and, under interval/none, whatever is still unsynced).
    // Without a database (a reopen failed) the store is not writable and
    // they fail.
    std::vector<callback> rest;
    {
      std::lock_guard lk(mu_);
      rest.swap(pending_);
    }
    release(rest, sync_wal());
    close_db();
  }
};

// ---- rocksdb_store ------------------------------------------------------

rocksdb_store::rocksdb_store(std::unique_ptr<impl> p) : p_(std::move(p)) {}

rocksdb_store::~rocksdb_store() = default;

result<std::unique_ptr<rocksdb_store>> rocksdb_store::open(const storage_options& opts) {
  if (opts.data_dir.empty()) return make_error(errc::invalid_argument, "data_dir is required");
  if (opts.fsync.kind == fsync_policy::mode::interval &&
      (opts.fsync.interval_ms < 1 || opts.fsync.interval_ms > k_max_interval_ms)) {
    return make_error(errc::invalid_argument, "fsync interval must be in 1..60000 ms");
  }
  try {
    std::error_code ec;
    std::filesystem::create_directories(opts.data_dir, ec);
    if (ec) {
      return make_error(errc::unavailable,
                        "cannot create data dir " + opts.data_dir + ": " + ec.message());
    }

    auto p = std::make_unique<impl>();
    p->opts_ = opts;
    p->filter_ = std::make_unique<expiry_filter>(opts.time != nullptr ? *opts.time : p->own_clock_);
    p->cache_ = rocksdb::NewLRUCache(opts.block_cache_bytes);
    if (opts.wal_prezero_bytes > 0) {
      p->env_ = rocksdb::NewCompositeEnv(std::make_shared<prezeroed_wal_file_system>(
          rocksdb::FileSystem::Default(), opts.wal_prezero_bytes));
    }

    p->info_log_ = std::make_shared<stdio_info_log>(opts.data_dir);
    p->sfm_.reset(rocksdb::NewSstFileManager(p->env_ ? p->env_.get() : rocksdb::Env::Default()));
    p->listener_ = std::make_shared<fault_listener>(
        [raw_p = p.get()](std::string why) { raw_p->set_fault(std::move(why)); },
        [](std::string note) { log(log_level::warn, "storage", note); });

    // LZ4 is cheap enough to pay for itself on JSON payloads and records;
    // fall back to none if this librocksdb was built without it.
    const auto supported = rocksdb::GetSupportedCompressions();
    p->compression_ =
        std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end()
            ? rocksdb::kLZ4Compression
            : rocksdb::kNoCompression;
    if (auto r = p->open_db(); !r.ok()) return std::move(r).err();

    const bool caller_syncs = opts.sync_on_caller && opts.fsync.kind == fsync_policy::mode::always;
    if (opts.fsync.kind != fsync_policy::mode::none && !caller_syncs) {
      p->syncer_ = std::thread([raw_p = p.get()] {
        pthread_setname_np(pthread_self(), "onceq-sync");
        raw_p->run_syncer();
      });
    }
    return std::unique_ptr<rocksdb_store>(new rocksdb_store(std::move(p)));
  } catch (const std::exception& e) {
    return make_error(errc::internal, std::string("opening storage: ") + e.what());
  }
}

result<void> rocksdb_store::write(const batch& b) {
  if (!p_->writable_.load(std::memory_order_acquire)) return p_->fault_error();
  if (b.empty()) return {};
  try {
    rocksdb::WriteBatch wb(b.bytes() + b.size() * 16);
    for (const batch::op* opp : apply_order(b)) {
      const auto& op = *opp;
      rocksdb::Status s;
      auto* h = p_->cf(op.col);
      switch (op.k) {
        case batch::kind::put:
          s = wb.Put(h, op.key, op.value);
          break;
        case batch::kind::del:
          s = wb.Delete(h, op.key);
          break;
        case batch::kind::del_range:
          // An empty range deletes nothing (as in memory_store); RocksDB
          // would reject it and fail the whole batch.
          if (op.key < op.value) s = wb.DeleteRange(h, op.key, op.value);
          break;
      }
      // Nothing was applied yet: a bad op does not poison the store.
      if (!s.ok()) return make_error(errc::internal, "building write batch: " + s.ToString());
    }
    rocksdb::WriteOptions wo;
    wo.sync = false;  // durability comes from the syncer's SyncWAL (group commit)
    wo.disableWAL = false;
    wo.no_slowdown = p_->watch_stalls_.load(std::memory_order_relaxed);
    rocksdb::Status s = p_->db_->Write(wo, &wb);
    if (wo.no_slowdown && s.IsIncomplete()) {
      // A write stall: RocksDB applied nothing. Counted, then written the
      // way RocksDB paces it (refusing it instead turned RocksDB's routine
      // slowdowns into client errors under a bulk load: docs/BENCHMARKS.md,
      // "Write stalls").
      p_->write_stalls_.fetch_add(1, std::memory_order_relaxed);
      wo.no_slowdown = false;
      s = p_->db_->Write(wo, &wb);
    }
    if (!s.ok()) {
      // RocksDB applied nothing of this batch; writes before it stay.
      p_->set_fault("write failed: " + s.ToString());
      return p_->fault_error();
    }
    p_->writes_.fetch_add(1, std::memory_order_release);
    return {};
  } catch (const std::exception& e) {
    return make_error(errc::internal, std::string("write: ") + e.what());
  }
}

namespace {
// One point lookup's outcome: the value, errc::not_found, or an I/O error.
result<std::string> lookup_result(const rocksdb::Status& s, std::string_view value) {
  if (s.IsNotFound()) return make_error(errc::not_found, "no such key");
  if (!s.ok()) return io_error("read failed", s);
  return std::string(value);
}
}  // namespace

result<std::string> rocksdb_store::get(column c, std::string_view key) {
  if (!p_->db_) return p_->fault_error();
  rocksdb::PinnableSlice value;
  const rocksdb::Status s = p_->db_->Get(p_->read_options(), p_->cf(c), to_slice(key), &value);
  if (s.IsIncomplete() && p_->memory_reads_) {
    p_->misses_.keys.emplace_back(c, std::string(key));
    return p_->would_block();
  }
  return lookup_result(s, to_view(value));
}

std::vector<result<std::string>> rocksdb_store::multi_get(column c,
                                                          const std::vector<std::string>& keys) {
  std::vector<result<std::string>> out;
  out.reserve(keys.size());
  if (keys.empty()) return out;
  if (!p_->db_) {
    for (std::size_t i = 0; i < keys.size(); ++i) out.push_back(p_->fault_error());
    return out;
  }
  if (p_->memory_reads_) {
    // RocksDB 7.8's batched MultiGet reads from the disk whatever the read
    // tier says; one Get per key honours it (a produce looks up one or a
    // few dedup keys).
    for (const auto& k : keys) out.push_back(get(c, k));
    return out;
  }
  std::vector<rocksdb::Slice> slices;
  slices.reserve(keys.size());
  for (const auto& k : keys) slices.emplace_back(k);
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  p_->db_->MultiGet(p_->read_options(), p_->cf(c), keys.size(), slices.data(), values.data(),
                    statuses.data());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.push_back(lookup_result(statuses[i], to_view(values[i])));
  return out;
}

result<void> rocksdb_store::scan(column c, std::string_view begin, std::string_view end,
                                 const visitor& fn) {
  if (begin >= end) return {};
  if (!p_->db_) return p_->fault_error();
  const rocksdb::Slice upper = to_slice(end);  // must outlive the iterator
  rocksdb::ReadOptions ro = p_->read_options();
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(p_->db_->NewIterator(ro, p_->cf(c)));
  for (it->Seek(to_slice(begin)); it->Valid(); it->Next()) {
    if (!fn(to_view(it->key()), to_view(it->value()))) return {};
  }
  if (it->status().IsIncomplete() && p_->memory_reads_) {
    p_->misses_.ranges.push_back({c, std::string(begin), std::string(end), false});
    return p_->would_block();
  }
  if (!it->status().ok()) return io_error("scan failed", it->status());
  return {};
}

result<std::string> rocksdb_store::last_key(column c, std::string_view begin,
                                            std::string_view end) {
  if (begin >= end) return make_error(errc::not_found, "empty range");
  if (!p_->db_) return p_->fault_error();
  const rocksdb::Slice lower = to_slice(begin);  // must outlive the iterator
  rocksdb::ReadOptions ro = p_->read_options();
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(p_->db_->NewIterator(ro, p_->cf(c)));
  // SeekForPrev lands on the last key <= end; end itself is excluded.
  it->SeekForPrev(to_slice(end));
  if (it->Valid() && to_view(it->key()) >= end) it->Prev();
  if (it->status().IsIncomplete() && p_->memory_reads_) {
    p_->misses_.ranges.push_back({c, std::string(begin), std::string(end), true});
    return p_->would_block();
  }
  if (!it->status().ok()) return io_error("scan failed", it->status());
  if (!it->Valid() || to_view(it->key()) < begin) return make_error(errc::not_found, "empty range");
  return std::string(to_view(it->key()));
}

void rocksdb_store::when_durable(std::function<void(result<void>)> done) {
  if (p_->opts_.fsync.kind != fsync_policy::mode::always) {
    // The policy does not wait for the disk, but what is answered reaches
    // the WAL's file first (one write for the round), so that it survives
    // a kill -9. It promises nothing more during a fault: writes are
    // refused then, reads are answered.
    done(p_->flush_wal());
    return;
  }
  {
    std::lock_guard lk(p_->mu_);
    p_->pending_.push_back(std::move(done));
  }
  if (!p_->opts_.sync_on_caller) p_->cv_.notify_one();
}

void rocksdb_store::sync_pending() {
  if (!p_->opts_.sync_on_caller || p_->opts_.fsync.kind != fsync_policy::mode::always) return;
  std::vector<impl::callback> ready;
  {
    std::lock_guard lk(p_->mu_);
    if (p_->pending_.empty()) return;
    ready.swap(p_->pending_);
  }
  p_->release(ready, p_->sync_wal());
}

std::uint64_t rocksdb_store::disk_bytes() const {
  // SST files plus WAL files (*.log; RocksDB's info log is "LOG", no suffix).
  std::uint64_t total = 0;
  try {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(p_->opts_.data_dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      const auto ext = it->path().extension();
      if (ext != ".sst" && ext != ".log") continue;
      std::error_code size_ec;
      const auto n = it->file_size(size_ec);
      if (!size_ec) total += n;  // a file compacted away meanwhile counts as 0
    }
  } catch (const std::exception&) {
    // Swallowed: a metric, best effort; returns what was counted so far.
  }
  return total;
}

std::optional<sync_stats> rocksdb_store::wal_sync_stats() const {
  return p_->stats_.snapshot();
}

void rocksdb_store::watch_write_stalls() {
  p_->watch_stalls_.store(true, std::memory_order_relaxed);
}

std::uint64_t rocksdb_store::write_stalls() const {
  return p_->write_stalls_.load(std::memory_order_relaxed);
}

void rocksdb_store::memory_reads(bool on) {
  p_->memory_reads_ = on;
  // A command that recovered from a miss (a failed read-ahead read again
  // by point lookups) leaves misses nobody will warm: each command's
  // misses are its own.
  if (on) {
    p_->misses_.keys.clear();
    p_->misses_.ranges.clear();
  }
}

read_misses rocksdb_store::take_read_misses() {
  return std::exchange(p_->misses_, {});
}

void rocksdb_store::warm(const read_misses& m) {
  constexpr std::size_t k_max_keys = 4096;
  constexpr std::size_t k_max_bytes = 8u << 20;
  try {
    std::shared_lock open(p_->open_mu_);
    if (!p_->db_) return;
    const rocksdb::ReadOptions ro;  // through the block cache, filling it
    std::string value;
    for (const auto& [c, key] : m.keys) (void)p_->db_->Get(ro, p_->cf(c), to_slice(key), &value);
    for (const auto& r : m.ranges) {
      const rocksdb::Slice lower = to_slice(r.begin);
      const rocksdb::Slice upper = to_slice(r.end);
      rocksdb::ReadOptions bounded;
      bounded.iterate_lower_bound = &lower;
      bounded.iterate_upper_bound = &upper;
      std::unique_ptr<rocksdb::Iterator> it(p_->db_->NewIterator(bounded, p_->cf(r.col)));
      std::size_t keys = 0;
      std::size_t bytes = 0;
      if (r.from_end) {
        it->SeekForPrev(upper);
        for (; it->Valid() && keys < 2; it->Prev()) ++keys;
        continue;
      }
      for (it->Seek(lower); it->Valid() && keys < k_max_keys && bytes < k_max_bytes; it->Next()) {
        ++keys;
        bytes += it->value().size();
      }
    }
  } catch (const std::exception& e) {
    // Swallowed: the command reads again, and reads from the disk the last time.
    log(log_level::warn, "storage", std::string("warming the cache: ") + e.what());
  }
}

void rocksdb_store::pause_background_work_for_test() {
  if (p_->db_) p_->db_->PauseBackgroundWork();
}

void rocksdb_store::continue_background_work_for_test() {
  if (p_->db_) p_->db_->ContinueBackgroundWork();
}

std::uint64_t rocksdb_store::syncs() const {
  return p_->stats_.snapshot().count;
}

store_health rocksdb_store::health() const {
  return p_->health();
}

result<resume_outcome> rocksdb_store::resume() {
  if (p_->writable_.load(std::memory_order_acquire)) return resume_outcome::resumed;
  try {
    std::lock_guard lk(p_->db_mu_);
    std::unique_lock open(p_->open_mu_);  // warm() is out of db_ while it may reopen
    return p_->resume_locked();
  } catch (const std::exception& e) {
    return make_error(errc::unavailable, std::string("resume: ") + e.what());
  }
}

result<void> rocksdb_store::compact_all() {
  if (!p_->db_) return p_->fault_error();
  rocksdb::CompactRangeOptions o;
  // Rewrite the bottommost level too, so that the expiry filter sees every key.
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (auto* h : p_->cfs_) {
    const rocksdb::Status s = p_->db_->CompactRange(o, h, nullptr, nullptr);
    if (!s.ok()) return io_error("compaction failed", s);
  }
  return {};
}

}  // namespace onceq::storage
