#pragma once

#include <array>
#include <map>
#include <string>

#include "storage/store.hpp"

namespace onceq::storage {

// An in-memory store for unit tests: same key spaces and encoding as the
// RocksDB store, every write is "durable" at once. Survives a broker
// restart in a test by being handed to a new broker. Single-threaded.
// Tests derive from it to change one behaviour (when_durable, wal_sync_stats).
class memory_store : public store {
 public:
  result<void> write(const batch& b) override;
  result<std::string> get(column c, std::string_view key) override;
  result<void> scan(column c, std::string_view begin, std::string_view end,
                    const visitor& fn) override;
  result<std::string> last_key(column c, std::string_view begin, std::string_view end) override;
  void when_durable(std::function<void(result<void>)> done) override;
  store_health health() const override;
  result<resume_outcome> resume() override;

  // Test hooks.
  std::size_t count(column c) const { return cols_[static_cast<int>(c)].size(); }
  std::size_t writes() const noexcept { return writes_; }
  // Fault injection, as a full disk or a failing device would:
  // - fail_writes: every write fails with errc::unavailable and health()
  //   says not writable until it is turned off and resume() is called;
  // - fail_writes_after(n): the next n writes succeed, then writes fail as
  //   with fail_writes(true), until fail_writes(false);
  // - fail_reads_after(n): the first n reads (get, multi_get keys, scan,
  //   last_key) succeed and every later one fails with errc::unavailable,
  //   until fail_reads_after(npos).
  void fail_writes(bool on) noexcept {
    fail_ = on;
    if (on) faulted_ = true;
    writes_left_ = npos;
  }
  void fail_writes_after(std::size_t n) noexcept {
    fail_writes(false);
    writes_left_ = n;
  }
  void fail_reads_after(std::size_t n) noexcept { reads_left_ = n; }
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t reads() const noexcept { return reads_; }
  // What resume() answers once the fault is cleared (reopened: a caller
  // must rebuild from the store).
  void resume_as(resume_outcome o) noexcept { resume_as_ = o; }

 private:
  result<void> read_fault();

  using map = std::map<std::string, std::string, std::less<>>;
  std::array<map, k_column_count> cols_;
  std::size_t writes_ = 0;
  bool fail_ = false;
  bool faulted_ = false;  // refuses writes until resume()
  std::size_t writes_left_ = npos;
  std::size_t reads_left_ = npos;
  std::size_t reads_ = 0;
  resume_outcome resume_as_ = resume_outcome::resumed;
};

}  // namespace onceq::storage
