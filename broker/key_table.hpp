#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/hash.hpp"
#include "base/result.hpp"
#include "broker/timers.hpp"
#include "storage/schema.hpp"
#include "storage/store.hpp"

namespace onceq {

// One group's idempotency keys. A key is, for the group:
// - leased: held by the one open delivery that may commit it (memory only:
//   rebuilt on recovery from the leased delivery records);
// - parked on: deliveries of other messages with the key wait here without
//   blocking their partition until the lease ends;
// - committed or failed: a record in the store's keys space (it outlives the
//   messages, up to its TTL), read through live().
// A key is named by its scope, the storage key of (topic, group, tenant, key).
class key_table {
 public:
  // The delivery holding the lease on scope, or nullptr.
  const position* holder(std::string_view scope) const;
  // Whether someone other than pos holds scope.
  bool held_by_other(const std::string& scope, position pos) const;

  void lease(const std::string& scope, position pos);
  void park(const std::string& scope, position pos);
  // Frees scope if pos holds it, and returns the deliveries that were parked
  // on it (the caller makes them ready; each is checked again on delivery).
  std::vector<position> release(const std::string& scope, position pos);

  std::size_t leased_count() const noexcept { return leased_.size(); }
  void clear();
  // Deterministic dump for state comparisons (sorted by scope).
  std::string describe() const;

  // The stored committed or failed record of scope if it has not expired;
  // errc::not_found otherwise; other errors are read failures.
  static result<storage::key_record> live(storage::store& store, std::string_view scope,
                                          millis now);

 private:
  std::unordered_map<std::string, position, string_hash, std::equal_to<>> leased_;
  std::unordered_map<std::string, std::vector<position>, string_hash, std::equal_to<>> parked_;
};

}  // namespace onceq
