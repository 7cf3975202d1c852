#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "storage/batch.hpp"
#include "storage/sync_stats.hpp"

namespace onceq::storage {

// Whether the store accepts writes now (store::health). A store that hit a
// write, sync or space fault refuses writes until resume() clears it.
struct store_health {
  bool writable = true;
  std::string reason;  // why not writable; "" when writable
};

// Reads that answered errc::would_block while store::memory_reads was on:
// what store::warm must bring into memory for them to succeed.
struct read_misses {
  struct range {
    column col;
    std::string begin, end;  // [begin, end)
    bool from_end = false;   // last_key: the range's end is what is read
    // At most this many bytes of values are read (0: warm's own bound);
    // a range from read_soon has one.
    std::size_t max_bytes = 0;
  };
  std::vector<std::pair<column, std::string>> keys;  // get, multi_get
  std::vector<range> ranges;                         // scan, last_key
  bool empty() const noexcept { return keys.empty() && ranges.empty(); }
};

// What store::resume() had to do to clear a fault.
enum class resume_outcome : std::uint8_t {
  resumed,   // in place: everything get/scan showed before is still there
  reopened,  // the store was reopened: unsynced writes may be gone, so a
             // caller's in-memory view must be rebuilt from the store
};

// The broker's view of durable state: raw ordered key spaces plus a
// durability barrier. The domain encoding of keys and records lives in
// storage/schema.hpp, shared by every implementation.
//
// Threading: write, get and scan are called from one thread at a time (the
// broker's core thread). when_durable may be called from that same thread;
// its callback may run on another thread (the syncer). wal_sync_stats may
// be called from any thread.
class store {
 public:
  virtual ~store() = default;

  // Applies b atomically. The change is visible to get/scan as soon as this
  // returns, and durable (per the fsync policy) once a when_durable callback
  // registered after this call has run with success. An error means nothing
  // of b was applied and the store may refuse further writes (errc::unavailable).
  virtual result<void> write(const batch& b) = 0;

  // The value at key, or errc::not_found.
  virtual result<std::string> get(column c, std::string_view key) = 0;

  // get() of each key, in order, as one batch (RocksDB amortises its
  // per-lookup overhead and probes filters together). This default does
  // one get() per key.
  virtual std::vector<result<std::string>> multi_get(column c,
                                                     const std::vector<std::string>& keys) {
    std::vector<result<std::string>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(get(c, k));
    return out;
  }

  // Calls fn(key, value) for every key in [begin, end) in order, until fn
  // returns false.
  using visitor = std::function<bool(std::string_view key, std::string_view value)>;
  virtual result<void> scan(column c, std::string_view begin, std::string_view end,
                            const visitor& fn) = 0;

  // The last key in [begin, end), or errc::not_found.
  virtual result<std::string> last_key(column c, std::string_view begin, std::string_view end) = 0;

  // Calls done once every write that returned before this call is durable
  // under the fsync policy (at once when the policy does not wait). Callbacks
  // run in registration order. done must not block.
  virtual void when_durable(std::function<void(result<void>)> done) = 0;

  // With a store that syncs on its caller (rocksdb's sync_on_caller): syncs
  // once for every when_durable callback registered so far and runs them,
  // on this thread. Otherwise nothing: callbacks are run by the store
  // itself (a syncer thread, or at once). The caller is the thread that
  // writes (a shard's loop), at the end of its iteration.
  virtual void sync_pending() {}

  // Whether a when_durable callback registered now would start a sync at
  // once: the store syncs on its own thread and that thread has nothing to
  // do. A writer then hands over what it wrote so far instead of at the end
  // of its iteration, so that the sync overlaps the rest of its work. Any
  // thread; never blocks. Default: no (callbacks run at once, or on the
  // caller in sync_pending()).
  virtual bool sync_idle() const { return false; }

  // when_durable(done), with the sync it waits for made on this thread now
  // when sync_idle(): the store's syncer thread stays asleep, so neither
  // side wakes the other. For a writer with nothing else to do meanwhile
  // (a shard's loop whose every client waits for this round,
  // shard/loop_clients.hpp). Otherwise the same as when_durable(done),
  // then sync_pending(). The caller is the thread that writes.
  virtual void sync_here(std::function<void(result<void>)> done) {
    when_durable(std::move(done));
    sync_pending();
  }

  // Whether writes are accepted now, and why not. Any thread; never blocks
  // on the disk.
  virtual store_health health() const { return {}; }

  // Tries to clear a write fault (disk full, EIO, read-only filesystem) so
  // that writes are accepted again. Called from the core thread while
  // health() is not writable; cheap to call again when it fails (the fault
  // has not cleared: errc::unavailable). A store that never faults: resumed.
  virtual result<resume_outcome> resume() { return resume_outcome::resumed; }

  // What the WAL syncer has done so far (for metrics), or nullopt for a
  // store without a write-ahead log (this default). Never touches the disk.
  virtual std::optional<sync_stats> wal_sync_stats() const { return std::nullopt; }

  // From now on, count the writes that the store had to slow down or stop
  // for (RocksDB's write stall: flushes or compactions behind): each is
  // first tried without waiting, and only a stalled one waits, counted.
  // Called by the shard when its loop starts: the count is how often the
  // loop waited for the disk on a write. Default: nothing (a store that
  // never stalls).
  virtual void watch_write_stalls() {}
  // Writes that stalled so far (for metrics). Any thread.
  virtual std::uint64_t write_stalls() const { return 0; }

  // Reads from memory only (RocksDB's kBlockCacheTier: memtables and the
  // block cache). While on, get, multi_get, scan and last_key never wait
  // for the disk: a read that would answers errc::would_block and is kept
  // for take_read_misses(). The shard turns it on around a request's
  // command, so that its loop does not wait on a read. Default: nothing (a
  // store whose reads never wait).
  virtual void memory_reads(bool on) { (void)on; }
  // The reads that answered errc::would_block since memory_reads(true)
  // (each command's misses are its own).
  virtual read_misses take_read_misses() { return {}; }
  // A range the caller will read next, named after a read that answered
  // errc::would_block: warm() reads it into memory with the misses, at most
  // max_bytes of its values (a consumer behind the message cache reads on
  // in order, and each trip to the reader thread costs a second run of its
  // command). Only while memory_reads is on. Default: nothing.
  virtual void read_soon(column c, std::string_view begin, std::string_view end,
                         std::size_t max_bytes) {
    (void)c, (void)begin, (void)end, (void)max_bytes;
  }
  // Reads m from the disk into memory, so that the same reads from memory
  // then succeed (unless evicted meanwhile). The one call that may run on
  // another thread (the shard's reader) while the loop uses the store; it
  // may wait for the disk. Errors are swallowed: the read is made again.
  virtual void warm(const read_misses& m) { (void)m; }
};

}  // namespace onceq::storage
