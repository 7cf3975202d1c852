#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "broker/timers.hpp"

namespace onceq {

// One group's ordering keys (topics with ordering = key). A key is held by
// one open delivery of a message with that key: the one being delivered,
// redelivered (nack, lease expiry, backoff) or waiting for its delay. The
// other open deliveries of the key are parked, in position order, and do
// not block their partitions. When the holder ends (ack, auto-ack,
// dead-letter, supersede, retention) the lowest parked one becomes the
// holder at once, so nothing later of the key can overtake it.
// Memory only: rebuilt on recovery from the open delivery records.
class order_table {
 public:
  struct entry {
    std::optional<position> holder;
    std::set<position> parked;
    bool empty() const { return !holder && parked.empty(); }
  };

  // The steps, on one key's entry (the consume planner replays them on a
  // copy to see what its own txn will do).
  static void hold(entry& e, position pos) { e.holder = pos; }
  static void park(entry& e, position pos) { e.parked.insert(pos); }
  // pos ends. If it held the key, the lowest parked delivery holds it now
  // and is returned; if it was parked, it leaves the queue.
  static std::optional<position> release(entry& e, position pos);

  // A copy of key's entry (empty if the key is free).
  entry get(std::string_view key) const;
  const position* holder(std::string_view key) const;

  void hold(const std::string& key, position pos);
  void park(const std::string& key, position pos);
  std::optional<position> release(const std::string& key, position pos);

  std::size_t size() const noexcept { return keys_.size(); }
  void clear() { keys_.clear(); }
  // Deterministic dump for state comparisons (sorted by key).
  std::string describe() const;

 private:
  std::map<std::string, entry, std::less<>> keys_;
};

}  // namespace onceq
