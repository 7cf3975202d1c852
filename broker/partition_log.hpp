#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "base/named_type.hpp"
#include "base/result.hpp"
#include "storage/schema.hpp"
#include "storage/store.hpp"

namespace onceq {

// A number of messages, where an offset (a uint64_t too) could be passed by
// mistake.
using message_count = named_type<std::uint64_t, struct message_count_tag>;

// One partition of a topic: the range of offsets it holds in the store's
// messages key space, and two read caches over it (the newest records, kept
// by message_cache, and a read-ahead run for consumers further behind).
// Messages are immutable, so a cached record stays valid until retention
// moves start past it.
struct partition_log {
  storage::topic_id topic = 0;
  std::uint32_t index = 0;
  std::uint64_t start = 0;  // first retained offset
  std::uint64_t next = 0;   // next offset to assign
  // Value + envelope bytes of the messages in [start, next). Kept only for
  // topics with a max_backlog_bytes cap (others pay nothing): recovery and
  // retention read the messages to count them.
  std::uint64_t bytes = 0;

  // The message cache's share: records of [tail_base, tail_base + tail.size()).
  std::uint64_t tail_base = 0;
  std::deque<storage::message_record> tail;
  // Read-ahead: one scan reads a run of messages instead of one point lookup
  // each (an iterator per 25 messages was a visible cost draining a backlog).
  std::uint64_t ahead_base = 0;
  std::vector<std::optional<storage::message_record>> ahead;

  // Stored messages not yet deleted by retention.
  std::uint64_t size() const noexcept { return next - start; }

  // The message at off: from the caches, else the store. errc::not_found
  // when retention deleted it.
  result<storage::message_record> read(storage::store& store, std::uint64_t off) const;

  // Fills the read-ahead with up to want records from off unless off is
  // cached already. A failed scan leaves holes that read() fills one by one,
  // except errc::would_block (the store reads from memory only and the scan
  // needs the disk), which is returned: the command is run again once the
  // range is read, and a scan of it then costs less than one lookup per
  // message. With errc::would_block it also names the messages after the
  // run, up to k_warm_ahead from off, for the store to read with it
  // (store::read_soon): a consumer behind the message cache reads on in
  // order, and its next read-aheads then find them in memory.
  result<void> read_ahead(storage::store& store, std::uint64_t from, message_count want);

  // Value + envelope bytes of the stored messages in [from, upto).
  result<std::uint64_t> count_bytes(storage::store& store, std::uint64_t from,
                                    std::uint64_t upto) const;

  // Read-ahead bounds: at least min messages per scan, at most max, and no
  // more than bytes of records past the first.
  static constexpr std::uint64_t k_read_ahead_min = 128;
  static constexpr std::uint64_t k_read_ahead_max = 1000;
  static constexpr std::size_t k_read_ahead_bytes = 512u << 10;
  // After a read-ahead that needed the disk, the store reads the messages
  // up to this many from its first into memory, at most k_read_ahead_bytes
  // of them past the run: a drain from the disk then costs one trip to the
  // shard's reader thread per 1024 messages instead of one per run.
  static constexpr std::uint64_t k_warm_ahead = 1024;
};

// The bytes a message counts against max_backlog_bytes.
std::uint64_t backlog_bytes(const storage::message_record& m);

// Recently produced messages kept in memory, across all partitions, within a
// byte budget, so that consumers near the tail do not read them back from
// the store. Evicts the oldest first.
class message_cache {
 public:
  using finder = std::function<partition_log*(storage::topic_id, std::uint32_t)>;
  message_cache(std::size_t budget_bytes, finder find)
      : budget_(budget_bytes), find_(std::move(find)) {}

  // Caches the record just stored at p's offset off.
  void append(partition_log& p, std::uint64_t off, storage::message_record m);
  // Forgets p's cached records (retention, topic deletion).
  void drop(partition_log& p);
  void clear();
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  struct entry {
    storage::topic_id topic;
    std::uint32_t partition;
    std::uint64_t offset;
  };
  std::size_t budget_;
  finder find_;
  std::deque<entry> order_;  // produce order; stale entries are skipped
  std::size_t bytes_ = 0;
};

}  // namespace onceq
