#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onceq::storage {

// One key space each; storage/rocksdb maps each to a column family.
enum class column : std::uint8_t {
  meta = 0,        // topics, groups, cursors, partition start offsets
  messages = 1,    // (topic, partition, offset) -> message_record
  deliveries = 2,  // (topic, group, partition, offset) -> delivery_record
  keys = 3,        // (topic, group, tenant, key) -> key_record (committed / failed)
  dedup = 4,       // (topic, dedup id) -> dedup_record
};
inline constexpr int k_column_count = 5;

// An ordered set of mutations that store::write applies atomically (one
// RocksDB WriteBatch). Not thread-safe; owned by whoever builds it.
class batch {
 public:
  enum class kind : std::uint8_t { put, del, del_range };
  struct op {
    kind k;
    column col;
    std::string key;
    std::string value;  // put: the value; del_range: the exclusive end key
  };

  void put(column c, std::string key, std::string value) {
    bytes_ += key.size() + value.size();
    ops_.push_back(op{kind::put, c, std::move(key), std::move(value)});
  }
  void del(column c, std::string key) {
    bytes_ += key.size();
    ops_.push_back(op{kind::del, c, std::move(key), {}});
  }
  // Deletes every key in [begin, end).
  void del_range(column c, std::string begin, std::string end) {
    bytes_ += begin.size() + end.size();
    ops_.push_back(op{kind::del_range, c, std::move(begin), std::move(end)});
  }

  // Room for n ops in all, for a builder that knows about how many it adds.
  void reserve(std::size_t n) { ops_.reserve(n); }

  bool empty() const noexcept { return ops_.empty(); }
  std::size_t size() const noexcept { return ops_.size(); }
  std::size_t bytes() const noexcept { return bytes_; }
  const std::vector<op>& ops() const noexcept { return ops_; }
  void clear() noexcept {
    ops_.clear();
    bytes_ = 0;
  }
  // Drops every mutation after the first n (a command undoing its last
  // steps before anything was written).
  void truncate(std::size_t n) {
    while (ops_.size() > n) {
      const auto& o = ops_.back();
      bytes_ -= o.key.size() + o.value.size();
      ops_.pop_back();
    }
  }

 private:
  std::vector<op> ops_;
  std::size_t bytes_ = 0;
};

}  // namespace onceq::storage
