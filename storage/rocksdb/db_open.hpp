#pragma once

#include <array>
#include <memory>
#include <shared_mutex>

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/sst_file_manager.h>

#include "base/clock.hpp"
#include "base/result.hpp"
#include "storage/rocksdb/rocksdb_store.hpp"
#include "storage/schema.hpp"

namespace onceq::storage {

// What every open of the database shares, kept across resume()'s reopens:
// the compaction filter, the block cache, the Env (with the WAL pre-zeroing
// file system), the SstFileManager, the fault listener and the info log.
// Must outlive every db_handle opened with it.
struct db_shared {
  std::unique_ptr<rocksdb::CompactionFilter> filter;
  std::shared_ptr<rocksdb::Cache> cache;
  std::unique_ptr<rocksdb::Env> env;  // outlives sfm and the database; null: the default Env
  // Watches free space after a no-space error and resumes RocksDB by itself
  // (every 5 s, once a write buffer's worth is free).
  std::shared_ptr<rocksdb::SstFileManager> sfm;
  std::shared_ptr<rocksdb::EventListener> listener;
  std::shared_ptr<rocksdb::Logger> info_log;
  rocksdb::CompressionType compression = rocksdb::kNoCompression;

  // time drives the expiry filter (it must outlive the result); listener
  // receives RocksDB's background errors.
  static db_shared make(const storage_options& opts, const clock& time,
                        std::shared_ptr<rocksdb::EventListener> listener);
};

// The open database and its column family handles, one per storage::column
// (RocksDB's "default" is opened too, and stays empty).
//
// Thread safety: open() and close() from one thread, which holds reopen_mu
// exclusively around them once others may read (resume()).
class db_handle {
 public:
  db_handle() = default;
  db_handle(const db_handle&) = delete;
  db_handle& operator=(const db_handle&) = delete;

  // Opens the database in opts.data_dir (this handle must be closed).
  result<void> open(const storage_options& opts, const db_shared& shared);
  // Closes it, after writing what is still in the WAL's buffer to its file.
  // Nothing if not open.
  void close();

  // Null only before open and after a reopen whose open failed.
  rocksdb::DB* get() const { return db_.get(); }
  rocksdb::DB* operator->() const { return db_.get(); }
  explicit operator bool() const { return db_ != nullptr; }
  rocksdb::ColumnFamilyHandle* cf(column c) const { return cfs_[static_cast<int>(c)]; }
  const std::array<rocksdb::ColumnFamilyHandle*, k_column_count>& cfs() const { return cfs_; }
  // Flushes every column family's memtable, waiting, even into a stall.
  rocksdb::Status flush_all();

  // Held shared by readers outside the owner's thread (warm()) and
  // exclusively around a reopen.
  std::shared_mutex reopen_mu;

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, k_column_count> cfs_{};
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
};

rocksdb::Slice to_slice(std::string_view s);
std::string_view to_view(const rocksdb::Slice& s);
// An I/O failure as errc::unavailable: "<what>: <status>".
error io_error(std::string_view what, const rocksdb::Status& s);

}  // namespace onceq::storage
