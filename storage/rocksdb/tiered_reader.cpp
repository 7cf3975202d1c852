#include "storage/rocksdb/tiered_reader.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "base/log.hpp"

namespace onceq::storage {
namespace {

// One point lookup's outcome: the value, errc::not_found, or an I/O error.
result<std::string> lookup_result(const rocksdb::Status& s, std::string_view value) {
  if (s.IsNotFound()) return make_error(errc::not_found, "no such key");
  if (!s.ok()) return io_error("read failed", s);
  return std::string(value);
}

}  // namespace

rocksdb::ReadOptions tiered_reader::read_options() const {
  rocksdb::ReadOptions ro;
  if (memory_reads_) ro.read_tier = rocksdb::kBlockCacheTier;
  return ro;
}

error tiered_reader::would_block() const {
  return make_error(errc::would_block, "the read needs the disk");
}

result<std::string> tiered_reader::get(column c, std::string_view key) {
  if (!db_) return faults_.error_now();
  rocksdb::PinnableSlice value;
  const rocksdb::Status s = db_->Get(read_options(), db_.cf(c), to_slice(key), &value);
  if (s.IsIncomplete() && memory_reads_) {
    misses_.keys.emplace_back(c, std::string(key));
    return would_block();
  }
  return lookup_result(s, to_view(value));
}

std::vector<result<std::string>> tiered_reader::multi_get(column c,
                                                          const std::vector<std::string>& keys) {
  std::vector<result<std::string>> out;
  out.reserve(keys.size());
  if (keys.empty()) return out;
  if (!db_) {
    for (std::size_t i = 0; i < keys.size(); ++i) out.push_back(faults_.error_now());
    return out;
  }
  if (memory_reads_) {
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
  db_->MultiGet(read_options(), db_.cf(c), keys.size(), slices.data(), values.data(),
                statuses.data());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.push_back(lookup_result(statuses[i], to_view(values[i])));
  return out;
}

result<void> tiered_reader::scan(column c, std::string_view begin, std::string_view end,
                                 const store::visitor& fn) {
  if (begin >= end) return {};
  if (!db_) return faults_.error_now();
  const rocksdb::Slice upper = to_slice(end);  // must outlive the iterator
  rocksdb::ReadOptions ro = read_options();
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, db_.cf(c)));
  for (it->Seek(to_slice(begin)); it->Valid(); it->Next()) {
    if (!fn(to_view(it->key()), to_view(it->value()))) return {};
  }
  if (it->status().IsIncomplete() && memory_reads_) {
    misses_.ranges.push_back({c, std::string(begin), std::string(end), false});
    return would_block();
  }
  if (!it->status().ok()) return io_error("scan failed", it->status());
  return {};
}

result<std::string> tiered_reader::last_key(column c, std::string_view begin,
                                            std::string_view end) {
  if (begin >= end) return make_error(errc::not_found, "empty range");
  if (!db_) return faults_.error_now();
  const rocksdb::Slice lower = to_slice(begin);  // must outlive the iterator
  rocksdb::ReadOptions ro = read_options();
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, db_.cf(c)));
  // SeekForPrev lands on the last key <= end; end itself is excluded.
  it->SeekForPrev(to_slice(end));
  if (it->Valid() && to_view(it->key()) >= end) it->Prev();
  if (it->status().IsIncomplete() && memory_reads_) {
    misses_.ranges.push_back({c, std::string(begin), std::string(end), true});
    return would_block();
  }
  if (!it->status().ok()) return io_error("scan failed", it->status());
  if (!it->Valid() || to_view(it->key()) < begin) return make_error(errc::not_found, "empty range");
  return std::string(to_view(it->key()));
}

void tiered_reader::memory_reads(bool on) {
  memory_reads_ = on;
  // A command that recovered from a miss (a failed read-ahead read again
  // by point lookups) leaves misses nobody will warm: each command's
  // misses are its own.
  if (on) {
    misses_.keys.clear();
    misses_.ranges.clear();
  }
}

void tiered_reader::read_soon(column c, std::string_view begin, std::string_view end,
                              std::size_t max_bytes) {
  if (!memory_reads_ || begin >= end) return;
  misses_.ranges.push_back({c, std::string(begin), std::string(end), false, max_bytes});
}

read_misses tiered_reader::take_misses() {
  return std::exchange(misses_, {});
}

void tiered_reader::warm(const read_misses& m) {
  constexpr std::size_t k_max_keys = 4096;
  constexpr std::size_t k_max_bytes = 8u << 20;
  constexpr std::size_t k_max_readahead = 512u << 10;
  try {
    std::shared_lock open(db_.reopen_mu);
    if (!db_) return;
    const rocksdb::ReadOptions ro;  // through the block cache, filling it
    std::string value;
    for (const auto& [c, key] : m.keys) (void)db_->Get(ro, db_.cf(c), to_slice(key), &value);
    for (const auto& r : m.ranges) {
      const rocksdb::Slice lower = to_slice(r.begin);
      const rocksdb::Slice upper = to_slice(r.end);
      const std::size_t max_bytes =
          r.max_bytes > 0 ? std::min(r.max_bytes, k_max_bytes) : k_max_bytes;
      rocksdb::ReadOptions bounded;
      bounded.iterate_lower_bound = &lower;
      bounded.iterate_upper_bound = &upper;
      // An explicit read-ahead reads the file in pieces of this size into
      // RocksDB's own buffer. Its automatic one, on a buffered file, only
      // hints the kernel (readahead(2)) and still reads each 4 KiB block
      // with a pread of its own: 20 times the system calls for a drain
      // from the disk (docs/BENCHMARKS.md, "Twentieth round").
      if (!r.from_end) bounded.readahead_size = std::min(max_bytes, k_max_readahead);
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(bounded, db_.cf(r.col)));
      std::size_t keys = 0;
      std::size_t bytes = 0;
      if (r.from_end) {
        it->SeekForPrev(upper);
        for (; it->Valid() && keys < 2; it->Prev()) ++keys;
        continue;
      }
      for (it->Seek(lower); it->Valid() && keys < k_max_keys && bytes < max_bytes; it->Next()) {
        ++keys;
        bytes += it->value().size();
      }
    }
  } catch (const std::exception& e) {
    // Swallowed: the command reads again, and reads from the disk the last time.
    log(log_level::warn, "storage", std::string("warming the cache: ") + e.what());
  }
}

}  // namespace onceq::storage
