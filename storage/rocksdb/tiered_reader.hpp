#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "storage/rocksdb/db_open.hpp"
#include "storage/rocksdb/fault_state.hpp"
#include "storage/store.hpp"

namespace onceq::storage {

// The store's reads, in two tiers. Normally every read may go to the disk.
// With memory_reads(true) a read is answered from the memtables and the
// block cache only: one that needs the disk answers errc::would_block and is
// remembered (take_misses()), so that another thread can warm() the cache
// and the command can run again without blocking its loop.
//
// Thread safety: get/multi_get/scan/last_key/memory_reads/take_misses from
// the store's owner thread; warm() from any one other thread, under the
// database's reopen lock held shared. Without a database (a reopen failed)
// reads answer the fault's error.
class tiered_reader {
 public:
  tiered_reader(db_handle& db, const fault_state& faults) : db_(db), faults_(faults) {}

  result<std::string> get(column c, std::string_view key);
  std::vector<result<std::string>> multi_get(column c, const std::vector<std::string>& keys);
  result<void> scan(column c, std::string_view begin, std::string_view end,
                    const store::visitor& fn);
  result<std::string> last_key(column c, std::string_view begin, std::string_view end);

  void memory_reads(bool on);
  read_misses take_misses();
  // Kept with the misses (while memory_reads is on): warm() scans it too.
  void read_soon(column c, std::string_view begin, std::string_view end, std::size_t max_bytes);
  // Each missed key read with a Get, each missed range scanned (up to 4096
  // keys or 8 MiB, or the range's own max_bytes), through the block cache.
  void warm(const read_misses& m);

 private:
  // A read's options: from memory only while memory_reads_ is on.
  rocksdb::ReadOptions read_options() const;
  // A read from memory only that needed the disk: kept for warm().
  error would_block() const;

  db_handle& db_;
  const fault_state& faults_;
  bool memory_reads_ = false;
  read_misses misses_;
};

}  // namespace onceq::storage
