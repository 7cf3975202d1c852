#include "storage/rocksdb/rocksdb_store.hpp"

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "storage/rocksdb/wal_prezero.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {
namespace {

constexpr millis k_max_interval_ms = 60'000;

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
  std::unique_ptr<rocksdb::Env> env_;  // outlives db_; null: the default Env
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, k_column_count> cfs_{};
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;

  // Set by the first failed write or sync; every later write is refused,
  // because RocksDB (and the kernel, after a failed fsync) may have lost
  // what it acknowledged.
  std::atomic<bool> failed_{false};
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

  // Touched by the syncer thread only (and by the destructor after join).
  std::uint64_t synced_writes_ = 0;
  std::optional<error> sync_error_;  // sticky: a failed fsync is never retried

  rocksdb::ColumnFamilyHandle* cf(column c) const { return cfs_[static_cast<int>(c)]; }

  // Makes every write that returned before this call durable.
  result<void> sync_wal() {
    if (sync_error_) return *sync_error_;
    const std::uint64_t seen = writes_.load(std::memory_order_acquire);
    if (seen == synced_writes_) return {};
    const auto started = std::chrono::steady_clock::now();
    const rocksdb::Status s = db_->SyncWAL();
    stats_.observe(std::chrono::steady_clock::now() - started);
    if (!s.ok()) {
      sync_error_ = io_error("wal sync failed", s);
      failed_.store(true, std::memory_order_release);
      return *sync_error_;
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
        (void)sync_wal();  // swallowed: the error is sticky and fails later writes
        lk.lock();
      }
    }
  }

  rocksdb::Options make_db_options() const {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    // Two cores' worth of flushes and compactions; the broker thread and the
    // syncer need the rest.
    o.max_background_jobs = 2;
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
    if (!db_) return;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (syncer_.joinable()) syncer_.join();
    // Callbacks registered after the syncer's last batch; one final sync
    // covers them (and, under interval/none, whatever is still unsynced).
    std::vector<callback> rest;
    {
      std::lock_guard lk(mu_);
      rest.swap(pending_);
    }
    release(rest, sync_wal());

    for (auto* h : cfs_) {
      if (h != nullptr) (void)db_->DestroyColumnFamilyHandle(h);  // swallowed: closing anyway
    }
    if (default_cf_ != nullptr) (void)db_->DestroyColumnFamilyHandle(default_cf_);
    (void)db_->Close();  // swallowed: nothing left to tell; the WAL was synced above
    db_.reset();
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

    // LZ4 is cheap enough to pay for itself on JSON payloads and records;
    // fall back to none if this librocksdb was built without it.
    const auto supported = rocksdb::GetSupportedCompressions();
    const rocksdb::CompressionType compression =
        std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) != supported.end()
            ? rocksdb::kLZ4Compression
            : rocksdb::kNoCompression;

    const rocksdb::Options db_opts = p->make_db_options();
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    // Unused, but given meta's options so that it shares the block cache.
    descs.emplace_back(rocksdb::kDefaultColumnFamilyName,
                       p->make_cf_options(column::meta, compression));
    for (int i = 0; i < k_column_count; ++i) {
      descs.emplace_back(k_cf_names[i], p->make_cf_options(static_cast<column>(i), compression));
    }

    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    const rocksdb::Status s =
        rocksdb::DB::Open(rocksdb::DBOptions(db_opts), opts.data_dir, descs, &handles, &raw);
    if (!s.ok()) return io_error("cannot open " + opts.data_dir, s);
    p->db_.reset(raw);
    p->default_cf_ = handles[0];
    for (int i = 0; i < k_column_count; ++i) p->cfs_[i] = handles[i + 1];

    if (opts.fsync.kind != fsync_policy::mode::none) {
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
  if (p_->failed_.load(std::memory_order_acquire)) {
    return make_error(errc::unavailable, "storage is not writable after an earlier failure");
  }
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
    const rocksdb::Status s = p_->db_->Write(wo, &wb);
    if (!s.ok()) {
      p_->failed_.store(true, std::memory_order_release);
      return io_error("write failed", s);
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
  rocksdb::PinnableSlice value;
  const rocksdb::Status s = p_->db_->Get(rocksdb::ReadOptions(), p_->cf(c), to_slice(key), &value);
  return lookup_result(s, to_view(value));
}

std::vector<result<std::string>> rocksdb_store::multi_get(column c,
                                                          const std::vector<std::string>& keys) {
  std::vector<result<std::string>> out;
  out.reserve(keys.size());
  if (keys.empty()) return out;
  std::vector<rocksdb::Slice> slices;
  slices.reserve(keys.size());
  for (const auto& k : keys) slices.emplace_back(k);
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  p_->db_->MultiGet(rocksdb::ReadOptions(), p_->cf(c), keys.size(), slices.data(), values.data(),
                    statuses.data());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.push_back(lookup_result(statuses[i], to_view(values[i])));
  return out;
}

result<void> rocksdb_store::scan(column c, std::string_view begin, std::string_view end,
                                 const visitor& fn) {
  if (begin >= end) return {};
  const rocksdb::Slice upper = to_slice(end);  // must outlive the iterator
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(p_->db_->NewIterator(ro, p_->cf(c)));
  for (it->Seek(to_slice(begin)); it->Valid(); it->Next()) {
    if (!fn(to_view(it->key()), to_view(it->value()))) return {};
  }
  if (!it->status().ok()) return io_error("scan failed", it->status());
  return {};
}

result<std::string> rocksdb_store::last_key(column c, std::string_view begin,
                                            std::string_view end) {
  if (begin >= end) return make_error(errc::not_found, "empty range");
  const rocksdb::Slice lower = to_slice(begin);  // must outlive the iterator
  rocksdb::ReadOptions ro;
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(p_->db_->NewIterator(ro, p_->cf(c)));
  // SeekForPrev lands on the last key <= end; end itself is excluded.
  it->SeekForPrev(to_slice(end));
  if (it->Valid() && to_view(it->key()) >= end) it->Prev();
  if (!it->status().ok()) return io_error("scan failed", it->status());
  if (!it->Valid() || to_view(it->key()) < begin) return make_error(errc::not_found, "empty range");
  return std::string(to_view(it->key()));
}

void rocksdb_store::when_durable(std::function<void(result<void>)> done) {
  if (p_->opts_.fsync.kind != fsync_policy::mode::always) {
    // The policy does not wait for the disk; a failed earlier sync still
    // means nothing can be promised.
    if (p_->failed_.load(std::memory_order_acquire)) {
      done(make_error(errc::unavailable, "storage failed; writes are not durable"));
    } else {
      done({});
    }
    return;
  }
  {
    std::lock_guard lk(p_->mu_);
    p_->pending_.push_back(std::move(done));
  }
  p_->cv_.notify_one();
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

std::uint64_t rocksdb_store::syncs() const {
  return p_->stats_.snapshot().count;
}

result<void> rocksdb_store::compact_all() {
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
