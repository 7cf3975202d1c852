#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include <rocksdb/listener.h>

#include "base/errc.hpp"
#include "base/result.hpp"
#include "storage/store.hpp"

namespace onceq::storage {

// Whether the store takes writes, and why not. Cleared by the first failed
// write or sync (or a hard background error), set again only by a
// successful resume(): until then RocksDB (and the kernel, after a failed
// fsync) may have lost what it acknowledged, so nothing new is promised.
//
// Thread safety: any thread. writable() is one atomic load; the reason is
// changed and read under a small lock of its own.
class fault_state {
 public:
  bool writable() const { return writable_.load(std::memory_order_acquire); }

  // Not writable from now on; the first reason stays. Logs once.
  void set(std::string reason);
  // Writable again; logs how long it was not and how it came back.
  void clear(std::string_view how);
  // Replaces the reason while still not writable (resume learnt more).
  void update_reason(std::string reason);
  store_health health() const;
  // What every refused write, failed callback and read without a database
  // answers while not writable: errc::unavailable with a retry hint.
  error error_now() const;

 private:
  std::atomic<bool> writable_{true};
  mutable std::mutex mu_;
  std::string reason_;
  std::chrono::steady_clock::time_point since_;
};

// RocksDB's view of its own errors, forwarded to faults: a hard (or worse)
// background error stops every write until recovery, so the store stops
// taking writes at once instead of when the next one fails. Soft errors (a
// compaction out of space) leave writes working and are only logged;
// RocksDB retries them itself. faults must outlive the listener.
std::shared_ptr<rocksdb::EventListener> make_fault_listener(fault_state& faults);

// Creates, writes, fsyncs and removes a small file in dir: whether the
// filesystem takes a durable write right now. resume() asks it before
// reopening the database, so that a fault that has not cleared (read-only,
// still full, EIO) does not cost the open database that still serves reads.
result<void> probe_write(const std::string& dir);

}  // namespace onceq::storage
