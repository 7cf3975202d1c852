#pragma once

// A replica's store (docs/REPLICATION.md, section 2). Everything one log
// entry writes reaches the wrapped store as ONE batch, with that entry's
// index and the replica's clock reading in it, so that the store says
// exactly which entries its state holds, whole: after a crash the replica
// skips the entries at or below that position and re-applies the rest
// (raft replays its log from the last snapshot). An entry that wrote
// nothing moves nothing: it changed no state, and applying it again
// changes none either.
//
// One batch per entry, because a command may write several (a consume
// ends lapsed leases, then leases; a tick fires timers, then runs
// retention) and a kill -9 keeps a prefix of the writes, which can end
// inside an entry: a position stamped on the first of them would then skip
// the entry whose later writes were lost, and the replica's state would
// part from the others' (the crash loop's lost acks, docs/RELIABILITY.md).
// So between begin() and finish() writes are gathered, not written; reads
// see them (an overlay on the wrapped store's reads), and finish() writes
// them once.
//
// Outside an entry nothing may write: a replica's state changes only by
// applying its log (a read that would end lapsed leases on one replica is
// refused the write, and the leader's tick ends them on every replica).
//
// Wraps another store and forwards everything else to it. Thread safety:
// as the wrapped store; begin(), finish() and write() from the applying
// thread.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "storage/store.hpp"

namespace onceq::storage {

struct applied_position {
  std::uint64_t index = 0;  // 0: nothing applied
  std::int64_t now_ms = 0;  // the replica's clock when that entry was applied
  friend bool operator==(const applied_position&, const applied_position&) = default;
};

// The stored form of a position (the value at keys::applied()), decoded;
// errc::internal when corrupt.
result<applied_position> decode_applied_position(std::string_view value);
// The stored form of a position.
std::string encode_applied_position(const applied_position& p);

class applied_index_store final : public store {
 public:
  explicit applied_index_store(store& inner) : inner_(inner) {}

  // The position the store holds (read from it): what a replica resumes
  // from. errc::internal when the stored value is corrupt.
  result<applied_position> load();
  // The entry being applied from now on: its writes are gathered until
  // finish().
  void begin(applied_position p);
  // Writes what the entry wrote, with its position, as one batch (nothing
  // when it wrote nothing). An error: the wrapped store refused it, and
  // nothing of the entry was written (the replica cannot go on).
  result<void> finish();
  // The last position a write recorded (or load() read).
  applied_position applied() const noexcept { return applied_; }
  // A digest of what the last finish() wrote (its whole batch, with the
  // position); 0 when its entry wrote nothing, or while digests are off.
  // Replicas that apply the same entry to the same state write the same
  // batch, so two digests of one index that differ say that their states
  // parted (cluster/replica's apply trace). Off by default: hashing every
  // batch is work on each entry that only the trace needs.
  void keep_digests(bool on) noexcept { keep_digests_ = on; }
  std::uint64_t last_digest() const noexcept { return digest_; }

  // Inside an entry: gathered (always ok). Outside: refused,
  // errc::failed_precondition.
  result<void> write(const batch& b) override;
  result<std::string> get(column c, std::string_view key) override;
  std::vector<result<std::string>> multi_get(column c,
                                             const std::vector<std::string>& keys) override;
  result<void> scan(column c, std::string_view begin, std::string_view end,
                    const visitor& fn) override;
  result<std::string> last_key(column c, std::string_view begin, std::string_view end) override;
  void when_durable(std::function<void(result<void>)> done) override {
    inner_.when_durable(std::move(done));
  }
  void sync_pending() override { inner_.sync_pending(); }
  bool sync_idle() const override { return inner_.sync_idle(); }
  void sync_here(std::function<void(result<void>)> done) override {
    inner_.sync_here(std::move(done));
  }
  store_health health() const override { return inner_.health(); }
  result<resume_outcome> resume() override { return inner_.resume(); }
  std::optional<sync_stats> wal_sync_stats() const override { return inner_.wal_sync_stats(); }
  void watch_write_stalls() override { inner_.watch_write_stalls(); }
  std::uint64_t write_stalls() const override { return inner_.write_stalls(); }
  void memory_reads(bool on) override { inner_.memory_reads(on); }
  read_misses take_read_misses() override { return inner_.take_read_misses(); }
  void read_soon(column c, std::string_view begin, std::string_view end,
                 std::size_t max_bytes) override {
    inner_.read_soon(c, begin, end, max_bytes);
  }
  void warm(const read_misses& m) override { inner_.warm(m); }

 private:
  // What the entry being applied wrote so far, as reads must see it: per
  // column, the keys it put (a value) or deleted (none), and the ranges it
  // deleted (a later put of a key inside one is in `point`).
  struct pending_column {
    std::map<std::string, std::optional<std::string>, std::less<>> point;
    std::vector<std::pair<std::string, std::string>> ranges;
    bool in_ranges(std::string_view key) const;
  };
  // nullopt: the entry did not touch the key (read the wrapped store);
  // else its value, or none when the entry deleted it.
  std::optional<std::optional<std::string>> pending_value(column c, std::string_view key) const;

  store& inner_;
  applied_position current_;
  applied_position applied_;
  bool wrote_ = false;  // the entry wrote (its overlay holds it all)
  bool keep_digests_ = false;
  std::uint64_t digest_ = 0;
  std::array<pending_column, k_column_count> overlay_;
};

}  // namespace onceq::storage
