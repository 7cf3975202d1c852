#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <queue>
#include <vector>

#include "base/clock.hpp"
#include "storage/schema.hpp"

namespace onceq {

// Where a message sits for one group: its partition and offset.
struct position {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  friend bool operator==(const position&, const position&) = default;
  friend auto operator<=>(const position&, const position&) = default;
};

// The core's deadlines on its own clock: lease expiries and pending
// messages becoming due (delay, backoff). A timer is a hint: when it fires
// the delivery is checked again, so a timer made stale by an ack or an
// extension is dropped, never acted on.
enum class timer_kind : std::uint8_t { lease, due };

struct timer {
  millis at = 0;
  timer_kind kind = timer_kind::lease;
  storage::topic_id topic = 0;
  storage::group_id group = 0;
  position pos;
  friend bool operator>(const timer& a, const timer& b) { return a.at > b.at; }
};

class timer_queue {
 public:
  void push(const timer& t) { heap_.push(t); }
  // Removes and returns every timer due at now, earliest first.
  std::vector<timer> take_due(millis now);
  std::optional<millis> next() const;
  std::size_t size() const noexcept { return heap_.size(); }
  void clear() { heap_ = {}; }

 private:
  // A deque, not a vector: every delivery pushes a lease timer, and one
  // made stale by an ack stays until its deadline, so after a burst the
  // heap holds about a million timers (rate x lease_ms). A vector doubles
  // by copying all of them into fresh pages on the loop thread: 20-45 ms
  // at 2^20 timers, the aged fixed-rate run's p99.9 (docs/BENCHMARKS.md,
  // "The aged tail"). A deque grows a block at a time.
  std::priority_queue<timer, std::deque<timer>, std::greater<>> heap_;
};

}  // namespace onceq
