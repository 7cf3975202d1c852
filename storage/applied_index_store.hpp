#pragma once

// A replica's store (docs/REPLICATION.md, section 2): every batch written
// while a log entry is applied also records, in the same batch, that
// entry's index and the replica's clock reading, so that the store says
// exactly which entries its state holds. After a crash the replica skips
// the entries at or below it and re-applies the rest (raft replays its log
// from the last snapshot). An entry that wrote nothing moves nothing: it
// changed no state, and applying it again changes none either.
//
// Wraps another store and forwards everything else to it. Thread safety:
// as the wrapped store; begin() and write() from the applying thread.

#include <cstdint>

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

class applied_index_store final : public store {
 public:
  explicit applied_index_store(store& inner) : inner_(inner) {}

  // The position the store holds (read from it): what a replica resumes
  // from. errc::internal when the stored value is corrupt.
  result<applied_position> load();
  // The entry being applied from now on; its position goes into every
  // batch written until the next begin().
  void begin(applied_position p) { current_ = p; }
  // The last position a write recorded (or load() read).
  applied_position applied() const noexcept { return applied_; }

  result<void> write(const batch& b) override;
  result<std::string> get(column c, std::string_view key) override { return inner_.get(c, key); }
  std::vector<result<std::string>> multi_get(column c,
                                             const std::vector<std::string>& keys) override {
    return inner_.multi_get(c, keys);
  }
  result<void> scan(column c, std::string_view begin, std::string_view end,
                    const visitor& fn) override {
    return inner_.scan(c, begin, end, fn);
  }
  result<std::string> last_key(column c, std::string_view begin, std::string_view end) override {
    return inner_.last_key(c, begin, end);
  }
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
  store& inner_;
  applied_position current_;
  applied_position applied_;
};

}  // namespace onceq::storage
