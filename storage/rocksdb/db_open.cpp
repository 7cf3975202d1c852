#include "storage/rocksdb/db_open.hpp"

#include <rocksdb/convenience.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "storage/rocksdb/insert_hint.hpp"
#include "storage/rocksdb/wal_prezero.hpp"

namespace onceq::storage {
namespace {

// Column family names, indexed by storage::column. RocksDB also requires
// "default"; it stays empty (an empty memtable pins no WAL file).
constexpr std::array<const char*, k_column_count> k_cf_names = {"meta", "messages", "deliveries",
                                                                "keys", "dedup"};

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

rocksdb::Options make_db_options(const storage_options& opts, const db_shared& shared) {
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
  // Flushes and compactions start the writeback of their files 1 MiB at a
  // time and wait for the previous MiB before the next (strict), instead of
  // leaving a whole SST dirty until its final fsync. Otherwise that fsync
  // puts tens of MB in the disk's queue at once and a WAL sync waits
  // behind it: at worst 15 ms while a 32 MB file is written on this
  // project's machine, 8-12 ms with plain bytes_per_sync, about 1 ms with
  // the wait (bench/neighbour_probe.cpp; docs/BENCHMARKS.md, "Fifteenth
  // round").
  o.bytes_per_sync = 1 << 20;
  o.strict_bytes_per_sync = true;
  // A WAL file is deleted only when every column family with data in it
  // has flushed. meta (cursors) sees a steady trickle of small writes and
  // would otherwise never fill its memtable, pinning every WAL forever and
  // growing the disk without bound under a steady load. Past this total
  // RocksDB flushes the families that hold the oldest WAL.
  o.max_total_wal_size = 2 * opts.write_buffer_bytes;
  // All memtables together stay within this: five families each allowed
  // two write buffers would otherwise reach 10x write_buffer_bytes (320 MiB
  // at the default) under a produce-heavy load. The largest memtable is
  // flushed first when the total is reached.
  o.db_write_buffer_size = 3 * opts.write_buffer_bytes;
  if (shared.env) o.env = shared.env.get();
  o.sst_file_manager = shared.sfm;
  o.info_log = shared.info_log;
  o.listeners.push_back(shared.listener);
  return o;
}

// point_lookups: the broker does Get on these families (keys, dedup) or
// seeks to exact keys (messages, deliveries), so a bloom filter saves a
// disk read per miss. meta is tiny and always hot.
rocksdb::ColumnFamilyOptions make_cf_options(const storage_options& opts, const db_shared& shared,
                                             column c, bool insert_hints) {
  const rocksdb::CompressionType compression = shared.compression;
  rocksdb::ColumnFamilyOptions o;
  o.write_buffer_size = opts.write_buffer_bytes;
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
  t.block_cache = shared.cache;  // one LRU cache shared by every family
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

  // Messages and deliveries arrive in key order within a partition: the
  // memtable starts each insert where the partition's last one went
  // (storage/rocksdb/insert_hint.hpp). One writer, so no concurrent
  // inserts, which would ignore the hint.
  if (insert_hints) o.memtable_insert_with_hint_prefix_extractor = insert_hint_extractor(c);
  if (c == column::keys || c == column::dedup) {
    o.compaction_filter = shared.filter.get();
    // Most lookups here miss (a new idempotency key, a new msg_id): a
    // whole-key bloom filter on the memtable answers those without walking
    // the skiplist.
    o.memtable_prefix_bloom_size_ratio = 0.05;
    o.memtable_whole_key_filtering = true;
  }
  return o;
}

}  // namespace

rocksdb::Slice to_slice(std::string_view s) {
  return {s.data(), s.size()};
}
std::string_view to_view(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

error io_error(std::string_view what, const rocksdb::Status& s) {
  return make_error(errc::unavailable, std::string(what) + ": " + s.ToString());
}

db_shared db_shared::make(const storage_options& opts, const clock& time,
                          std::shared_ptr<rocksdb::EventListener> listener) {
  db_shared s;
  s.filter = std::make_unique<expiry_filter>(time);
  s.cache = rocksdb::NewLRUCache(opts.block_cache_bytes);
  if (opts.wal_prezero_bytes > 0) {
    s.env = rocksdb::NewCompositeEnv(std::make_shared<prezeroed_wal_file_system>(
        rocksdb::FileSystem::Default(), opts.wal_prezero_bytes));
  }

  s.info_log = std::make_shared<stdio_info_log>(opts.data_dir);
  s.sfm.reset(rocksdb::NewSstFileManager(s.env ? s.env.get() : rocksdb::Env::Default()));
  s.listener = std::move(listener);

  // LZ4 is cheap enough to pay for itself on JSON payloads and records;
  // fall back to none if this librocksdb was built without it.
  const auto supported = rocksdb::GetSupportedCompressions();
  s.compression =
      std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end()
          ? rocksdb::kLZ4Compression
          : rocksdb::kNoCompression;
  return s;
}

namespace {

// Whether dir holds a WAL file (NNNNNN.log) that an open would replay.
bool has_wal(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".log") return true;
  }
  return false;
}

}  // namespace

result<void> db_handle::open(const storage_options& opts, const db_shared& shared) {
  const rocksdb::Options db_opts = make_db_options(opts, shared);
  auto open_db = [&](bool insert_hints, std::vector<rocksdb::ColumnFamilyHandle*>& handles,
                     rocksdb::DB*& raw) {
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    // Unused, but given meta's options so that it shares the block cache.
    descs.emplace_back(rocksdb::kDefaultColumnFamilyName,
                       make_cf_options(opts, shared, column::meta, insert_hints));
    for (int i = 0; i < k_column_count; ++i) {
      descs.emplace_back(k_cf_names[i],
                         make_cf_options(opts, shared, static_cast<column>(i), insert_hints));
    }
    return rocksdb::DB::Open(rocksdb::DBOptions(db_opts), opts.data_dir, descs, &handles, &raw);
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  // A WAL from before the insert hint may hold range deletes whose begin
  // keys are hinted keys, which RocksDB cannot replay with the hint on
  // (insert_hint.hpp). So a WAL is replayed first without it: recovery
  // flushes what it replayed, and the open with hints that follows starts
  // from a fresh WAL.
  if (has_wal(opts.data_dir)) {
    const rocksdb::Status s = open_db(false, handles, raw);
    if (!s.ok()) return io_error("cannot open " + opts.data_dir, s);
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    handles.clear();
    const rocksdb::Status c = raw->Close();
    delete raw;
    raw = nullptr;
    if (!c.ok()) return io_error("cannot close " + opts.data_dir + " after its recovery", c);
  }
  const rocksdb::Status s = open_db(true, handles, raw);
  if (!s.ok()) return io_error("cannot open " + opts.data_dir, s);
  db_.reset(raw);
  default_cf_ = handles[0];
  for (int i = 0; i < k_column_count; ++i) cfs_[i] = handles[i + 1];
  return {};
}

void db_handle::close() {
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

rocksdb::Status db_handle::flush_all() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  fo.allow_write_stall = true;
  std::vector<rocksdb::ColumnFamilyHandle*> all(cfs_.begin(), cfs_.end());
  return db_->Flush(fo, all);
}

}  // namespace onceq::storage
