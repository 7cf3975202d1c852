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

  // Test hooks.
  std::size_t count(column c) const { return cols_[static_cast<int>(c)].size(); }
  std::size_t writes() const noexcept { return writes_; }
  // Makes every later write fail with errc::unavailable (a full disk).
  void fail_writes(bool on) noexcept { fail_ = on; }

 private:
  using map = std::map<std::string, std::string, std::less<>>;
  std::array<map, k_column_count> cols_;
  std::size_t writes_ = 0;
  bool fail_ = false;
};

}  // namespace onceq::storage
