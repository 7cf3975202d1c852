#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "base/clock.hpp"
#include "storage/rocksdb/fsync_policy.hpp"
#include "storage/store.hpp"

namespace onceq::storage {

struct storage_options {
  std::string data_dir;                          // required
  fsync_policy fsync;                            // Default: always
  std::size_t block_cache_bytes = 32ull << 20;   // Default: 32 MiB
  std::size_t write_buffer_bytes = 16ull << 20;  // Default: 16 MiB per column family memtable
  // Zeros kept written ahead of the WAL's end, so that synced appends
  // overwrite blocks instead of growing the file (see wal_prezero.hpp).
  // 0 turns it off; less than 64 KiB counts as 64 KiB. Default: 256 KiB
  // (larger chunks make the sync after each refill a visible p99 outlier).
  std::size_t wal_prezero_bytes = 256ull << 10;
  // Under fsync always: who runs the group commit's SyncWAL. false: a
  // syncer thread, while the writer goes on (pipelined group commit). true:
  // the writer itself, in sync_pending() (a shard's loop at the end of its
  // iteration, Redis's beforeSleep); no syncer thread. Default: false
  // (docs/BENCHMARKS.md, "Sync on the loop or on a syncer").
  bool sync_on_caller = false;
  // Used by the compaction filter to drop expired keys and dedup entries.
  // Must outlive the store. Default: a system clock owned by the store.
  const clock* time = nullptr;
};

// storage::store on RocksDB: one column family per storage::column, bloom
// filters on point-lookup families, a compaction filter that drops expired
// key_record / dedup_record values (expires_at_of), and group commit:
// write() appends to the WAL's buffer in memory (manual_wal_flush) without
// writing its file; a syncer thread calls FlushWAL(true) (one write of the
// buffer, one sync) once for all when_durable() callbacks that queued up
// while the previous sync ran, then runs them in order. Under
// fsync=interval and none, when_durable writes the buffer (FlushWAL(false))
// and answers at once; interval also syncs every interval. What
// when_durable answered survives kill -9 (the OS page cache) under every
// policy.
//
// Faults: a failed Write or SyncWAL, or a background flush that RocksDB
// reports as a hard error (an EventListener), makes health() not writable
// with the reason; pending when_durable callbacks then fail and later writes
// fail fast, both with errc::unavailable, until resume() succeeds. resume()
// uses RocksDB's own recovery first (DB::Resume; an SstFileManager retries a
// no-space error by itself every 5 s once space is back) and reopens the
// database only when RocksDB cannot resume in place (a fatal error, e.g. EIO
// or a read-only filesystem) and a probe write into data_dir succeeds.
//
// Thread safety: as storage::store. Callbacks run on the syncer thread.
class rocksdb_store final : public store {
 public:
  static result<std::unique_ptr<rocksdb_store>> open(const storage_options& opts);
  ~rocksdb_store() override;  // runs pending callbacks after a final sync, then closes

  result<void> write(const batch& b) override;
  result<std::string> get(column c, std::string_view key) override;
  std::vector<result<std::string>> multi_get(column c,
                                             const std::vector<std::string>& keys) override;
  result<void> scan(column c, std::string_view begin, std::string_view end,
                    const visitor& fn) override;
  result<std::string> last_key(column c, std::string_view begin, std::string_view end) override;
  void when_durable(std::function<void(result<void>)> done) override;
  // With sync_on_caller: one SyncWAL for every callback registered so far,
  // then runs them, on the caller's thread. Otherwise nothing.
  void sync_pending() override;
  bool sync_idle() const override;
  void sync_here(std::function<void(result<void>)> done) override;
  store_health health() const override;
  // In place: Resume, then a flush of every column family (so that writes
  // whose sync failed are durable in SST files) and a WAL sync to prove the
  // WAL takes writes again. reopened: closed and opened again; while an open
  // fails, get/scan/... answer errc::unavailable too.
  result<resume_outcome> resume() override;
  // Every SyncWAL call, timed, and the callbacks the syncer released (under
  // fsync=always; inline answers under interval/none are not counted).
  // Present under every policy (all zeros under none).
  std::optional<sync_stats> wal_sync_stats() const override;
  void watch_write_stalls() override;
  std::uint64_t write_stalls() const override;
  void memory_reads(bool on) override;
  read_misses take_read_misses() override;
  void read_soon(column c, std::string_view begin, std::string_view end,
                 std::size_t max_bytes) override;
  // Each missed key read with a Get, each missed range scanned (up to 4096
  // keys or 8 MiB), through the block cache; under a lock that resume()'s
  // reopen takes too, never the syncer's.
  void warm(const read_misses& m) override;
  // For tests: stops (and starts again) RocksDB's flushes and compactions,
  // so that full memtables make writes stall.
  void pause_background_work_for_test();
  void continue_background_work_for_test();

  // Total bytes of SST and WAL files (for metrics and the soak benchmark).
  std::uint64_t disk_bytes() const;
  // Number of SyncWAL calls so far (wal_sync_stats()->count).
  std::uint64_t syncs() const;
  // Forces a compaction of the whole database (tests of the compaction filter).
  result<void> compact_all();

  struct impl;

 private:
  explicit rocksdb_store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace onceq::storage
