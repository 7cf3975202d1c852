#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "storage/batch.hpp"
#include "storage/schema.hpp"
#include "storage/store.hpp"

namespace onceq {

struct partition_log;
struct topic;

// One command's changes, in two halves that must agree: the storage batch
// and the in-memory changes that mirror it. A command only reads memory and
// the store while it builds the txn; commit() writes the batch with one
// store::write and applies the memory side only once the write succeeded
// (RocksDB's own order: WAL and memtable before readers see anything). A txn
// that is dropped, or whose write fails, leaves memory exactly as it was.
//
// Not thread-safe: built and committed on the core thread.
class txn {
 public:
  txn() = default;
  txn(const txn&) = delete;
  txn& operator=(const txn&) = delete;

  storage::batch& batch() noexcept { return batch_; }
  // Room for about ops more batch ops and effects more effects (a command
  // that knows its size: a consume's deliveries, an ack batch's acks).
  void reserve(std::size_t ops, std::size_t effects) {
    batch_.reserve(batch_.size() + ops);
    effects_.reserve(effects_.size() + effects);
  }

  // An in-memory change to make after the batch is written. Changes run in
  // the order they were added; they must not fail or touch the store.
  template <class F>
  void then(F&& f) {
    effects_.emplace_back(std::forward<F>(f));
  }

  // Appends ev to the key history stored at history_key (topics with
  // key_history), which then expires at expires_at (0: never). commit()
  // reads each touched history once, appends, keeps the newest
  // storage::k_history_max events and puts it in the batch; a failed read
  // fails the commit before anything is written.
  void record(std::string history_key, millis expires_at, storage::history_event ev);

  // The next free offset of p as this txn sees it (its own appends count):
  // commit() moves p.next past every offset handed out here.
  std::uint64_t append_offset(partition_log& p);
  // The next free offset of p without taking it.
  std::uint64_t peek_offset(const partition_log& p) const;
  // The next value of a counter kept in memory (the outbox's sequence) as
  // this txn sees it: commit() moves counter past every value taken here.
  std::uint64_t take(std::uint64_t& counter);

  // Topics this txn creates (topic_registry::create), which the registry
  // gets only when the commit succeeds: the command's later steps find them
  // here (a second dead letter into the DLQ the first one creates).
  void note_new_topic(topic& t) { new_topics_.push_back(&t); }
  const std::vector<topic*>& new_topics() const noexcept { return new_topics_; }

  // What the txn holds now, to go back to: a command that refuses one part
  // of itself (one entry of an ack batch) after staging some of it.
  struct savepoint {
    std::size_t ops = 0;
    std::size_t effects = 0;
    std::size_t new_topics = 0;
    std::unordered_map<partition_log*, std::uint64_t> next;
    std::unordered_map<std::uint64_t*, std::uint64_t> counters;
    std::map<std::string, std::pair<std::size_t, millis>> history;  // events, expiry
  };
  savepoint mark() const;
  // Drops everything staged after s was taken.
  void rollback(const savepoint& s);

  // Writes the batch (nothing when it is empty), then applies the memory
  // side. errc::unavailable with a retry hint when the store refused.
  result<void> commit(storage::store& store);

 private:
  storage::batch batch_;
  std::vector<std::function<void()>> effects_;
  std::unordered_map<partition_log*, std::uint64_t> next_;
  std::unordered_map<std::uint64_t*, std::uint64_t> counters_;
  std::vector<topic*> new_topics_;  // owned by their effects until the commit
  struct pending_history {
    millis expires_at = 0;
    std::vector<storage::history_event> events;
  };
  std::map<std::string, pending_history> history_;  // ordered: deterministic batches
};

// How long a client should wait before retrying a write the store refused.
inline constexpr long long k_storage_retry_after_ms = 1000;

// errc::unavailable for a command refused because the store does not take
// writes now (store::health), with a retry hint.
error storage_unavailable(std::string reason);

}  // namespace onceq
