#include "storage/rocksdb/rocksdb_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include <fmt/format.h>

#include "storage/rocksdb/db_open.hpp"
#include "storage/rocksdb/fault_state.hpp"
#include "storage/rocksdb/tiered_reader.hpp"
#include "storage/rocksdb/wal_syncer.hpp"
#include "storage/rocksdb/write_batch_rep.hpp"

// The store puts its parts together: the database and what its opens share
// (db_open.hpp), the fault state (fault_state.hpp), the group commit
// (wal_syncer.hpp) and the reads (tiered_reader.hpp). Writing a batch and
// resuming after a fault, which use all of them, are here.

namespace onceq::storage {

struct rocksdb_store::impl {
  explicit impl(const storage_options& opts)
      : opts_(opts),
        shared_(db_shared::make(opts_, opts_.time != nullptr ? *opts_.time : own_clock_,
                                make_fault_listener(faults_))) {}

  ~impl() {
    // The syncer's last round runs before the database closes. Without a
    // database (a reopen failed) the store is not writable and it fails.
    syncer_.stop();
    db_.close();
  }

  // resume() with the syncer's db_mutex() held (so the syncer is out of the
  // database) and the reopen lock (so warm() is).
  result<resume_outcome> resume_locked() {
    if (faults_.writable()) return resume_outcome::resumed;
    rocksdb::Status s;
    if (db_) {
      s = db_->Resume();
      if (s.IsBusy()) {
        // The SstFileManager is waiting for free space and will resume by
        // itself; a manual Resume is refused meanwhile.
        return faults_.error_now();
      }
      if (s.ok()) {
        // Resume flushes only when RocksDB had stopped writes; after a
        // failed WAL sync alone it has nothing to do. Flushing every family
        // here makes the writes whose sync failed durable in SST files and
        // switches to a new WAL; the sync then proves the WAL works.
        s = db_.flush_all();
        if (s.ok()) s = db_->FlushWAL(true);
        if (s.ok()) {
          syncer_.forget_failures();
          faults_.clear("resumed in place");
          return resume_outcome::resumed;
        }
      }
      if (s.IsNoSpace()) {
        faults_.update_reason("still out of space: " + s.ToString());
        return faults_.error_now();
      }
    }
    // RocksDB cannot go on in place (a fatal error such as EIO or EROFS, or
    // a WAL that stays broken): reopen, but only once the filesystem takes a
    // write again, so that a fault that persists keeps the old database for
    // reads.
    if (auto probe = probe_write(opts_.data_dir); !probe.ok()) {
      faults_.update_reason(fmt::format("{}{}{}", s.ok() ? "" : s.ToString(), s.ok() ? "" : "; ",
                                        probe.err().message));
      return faults_.error_now();
    }
    db_.close();
    if (auto r = db_.open(opts_, shared_); !r.ok()) {
      faults_.update_reason("reopen failed: " + r.err().message);
      return faults_.error_now();
    }
    syncer_.forget_failures();
    faults_.clear("reopened");
    return resume_outcome::reopened;
  }

  storage_options opts_;
  system_clock own_clock_;
  fault_state faults_;
  // Declared before db_ so that it outlives it (members die in reverse
  // order); the destructor also closes db_ explicitly first.
  db_shared shared_;
  db_handle db_;
  wal_syncer syncer_{opts_, db_, faults_};
  tiered_reader reader_{db_, faults_};
  std::atomic<bool> watch_stalls_{false};       // watch_write_stalls()
  std::atomic<std::uint64_t> write_stalls_{0};  // writes that stalled
};

rocksdb_store::rocksdb_store(std::unique_ptr<impl> p) : p_(std::move(p)) {}

rocksdb_store::~rocksdb_store() = default;

result<std::unique_ptr<rocksdb_store>> rocksdb_store::open(const storage_options& opts) {
  if (opts.data_dir.empty()) return make_error(errc::invalid_argument, "data_dir is required");
  if (opts.fsync.kind == fsync_policy::mode::interval &&
      (opts.fsync.interval < std::chrono::milliseconds{1} ||
       opts.fsync.interval > fsync_policy::k_max_interval)) {
    return make_error(errc::invalid_argument, "fsync interval must be in 1..60000 ms");
  }
  try {
    std::error_code ec;
    std::filesystem::create_directories(opts.data_dir, ec);
    if (ec) {
      return make_error(errc::unavailable,
                        "cannot create data dir " + opts.data_dir + ": " + ec.message());
    }
    auto p = std::make_unique<impl>(opts);
    if (auto r = p->db_.open(p->opts_, p->shared_); !r.ok()) return std::move(r).err();
    p->syncer_.start();
    return std::unique_ptr<rocksdb_store>(new rocksdb_store(std::move(p)));
  } catch (const std::exception& e) {
    return make_error(errc::internal, std::string("opening storage: ") + e.what());
  }
}

result<void> rocksdb_store::write(const batch& b) {
  if (!p_->faults_.writable()) return p_->faults_.error_now();
  if (b.empty()) return {};
  try {
    // The batch's bytes made in one pass (write_batch_rep.hpp); nothing was
    // applied yet if that fails: a bad op does not poison the store.
    column_family_ids ids{};
    for (int c = 0; c < k_column_count; ++c)
      ids[static_cast<std::size_t>(c)] = p_->db_.cf(static_cast<column>(c))->GetID();
    auto rep = write_batch_rep(b, ids);
    if (!rep.ok()) return std::move(rep).err();
    rocksdb::WriteBatch wb(std::move(*rep));
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
      p_->faults_.set("write failed: " + s.ToString());
      return p_->faults_.error_now();
    }
    p_->syncer_.count_write();
    return {};
  } catch (const std::exception& e) {
    return make_error(errc::internal, std::string("write: ") + e.what());
  }
}

result<std::string> rocksdb_store::get(column c, std::string_view key) {
  return p_->reader_.get(c, key);
}

std::vector<result<std::string>> rocksdb_store::multi_get(column c,
                                                          const std::vector<std::string>& keys) {
  return p_->reader_.multi_get(c, keys);
}

result<void> rocksdb_store::scan(column c, std::string_view begin, std::string_view end,
                                 const visitor& fn) {
  return p_->reader_.scan(c, begin, end, fn);
}

result<std::string> rocksdb_store::last_key(column c, std::string_view begin,
                                            std::string_view end) {
  return p_->reader_.last_key(c, begin, end);
}

void rocksdb_store::when_durable(std::function<void(result<void>)> done) {
  p_->syncer_.when_durable(std::move(done));
}

void rocksdb_store::sync_pending() {
  p_->syncer_.sync_pending();
}

bool rocksdb_store::sync_idle() const {
  return p_->syncer_.idle();
}

void rocksdb_store::sync_here(std::function<void(result<void>)> done) {
  p_->syncer_.sync_here(std::move(done));
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
  return p_->syncer_.stats();
}

void rocksdb_store::watch_write_stalls() {
  p_->watch_stalls_.store(true, std::memory_order_relaxed);
}

std::uint64_t rocksdb_store::write_stalls() const {
  return p_->write_stalls_.load(std::memory_order_relaxed);
}

void rocksdb_store::memory_reads(bool on) {
  p_->reader_.memory_reads(on);
}

read_misses rocksdb_store::take_read_misses() {
  return p_->reader_.take_misses();
}

void rocksdb_store::read_soon(column c, std::string_view begin, std::string_view end,
                              std::size_t max_bytes) {
  p_->reader_.read_soon(c, begin, end, max_bytes);
}

void rocksdb_store::warm(const read_misses& m) {
  p_->reader_.warm(m);
}

void rocksdb_store::pause_background_work_for_test() {
  if (p_->db_) p_->db_->PauseBackgroundWork();
}

void rocksdb_store::continue_background_work_for_test() {
  if (p_->db_) p_->db_->ContinueBackgroundWork();
}

std::uint64_t rocksdb_store::syncs() const {
  return p_->syncer_.stats().count;
}

store_health rocksdb_store::health() const {
  return p_->faults_.health();
}

result<resume_outcome> rocksdb_store::resume() {
  if (p_->faults_.writable()) return resume_outcome::resumed;
  try {
    std::lock_guard lk(p_->syncer_.db_mutex());
    std::unique_lock open(p_->db_.reopen_mu);  // warm() is out of db_ while it may reopen
    return p_->resume_locked();
  } catch (const std::exception& e) {
    return make_error(errc::unavailable, std::string("resume: ") + e.what());
  }
}

result<void> rocksdb_store::compact_all() {
  if (!p_->db_) return p_->faults_.error_now();
  rocksdb::CompactRangeOptions o;
  // Rewrite the bottommost level too, so that the expiry filter sees every key.
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (auto* h : p_->db_.cfs()) {
    const rocksdb::Status s = p_->db_->CompactRange(o, h, nullptr, nullptr);
    if (!s.ok()) return io_error("compaction failed", s);
  }
  return {};
}

}  // namespace onceq::storage
