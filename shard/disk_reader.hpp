#pragma once

// A single node's shard's reader thread: the loop never waits for a read
// from the disk (docs/DESIGN.md, "Shards and threads", "Reader threads").
// A request's command reads from memory only (store::memory_reads); when a
// read would need the disk, the command changed nothing, and the shard
// hands what it missed to this thread, which reads it into the store's
// block cache (store::warm) and calls back; the shard then runs the command
// again on its loop (local_path::run_reading).
//
// Thread safety: read() and stop() from any thread. done callbacks run on
// the reader thread and must only post (to the shard's loop).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "storage/store.hpp"

namespace onceq {

class disk_reader {
 public:
  // store outlives the reader.
  disk_reader(storage::store& store, std::uint32_t shard_id) : store_(store), shard_id_(shard_id) {}
  ~disk_reader() { stop(); }
  disk_reader(const disk_reader&) = delete;
  disk_reader& operator=(const disk_reader&) = delete;

  // Starts the thread ("onceq-read-N"). Once only.
  void start();
  // Queues m; the thread warms it, then calls done. false (done is not
  // called) when the reader is not running.
  bool read(storage::read_misses m, std::function<void()> done);
  // Warms and answers what is queued, then joins the thread. Idempotent.
  void stop();
  bool running() const;

  // Reads handed to the thread so far (metrics).
  std::uint64_t reads() const noexcept;

 private:
  struct item {
    storage::read_misses misses;
    std::function<void()> done;
  };
  void run();

  storage::store& store_;
  std::uint32_t shard_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<item> queue_;   // mu_
  bool running_ = false;     // mu_
  std::uint64_t reads_ = 0;  // mu_
  std::thread thread_;
};

}  // namespace onceq
