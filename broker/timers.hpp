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
// the deliveries it names are checked again, so a timer made stale by an
// ack or an extension is dropped, never acted on.
//
// A lease timer names a range of one partition's offsets, pos.offset to
// last (one offset when last is not above it): a consume leases all its
// messages until the same deadline, so it pushes one timer per run of
// nearby offsets it leased in a partition (broker/delivery.cpp), not one
// per message. When it fires, each open delivery in the range still leased
// until exactly `at` expires; the others (acked, extended, leased again,
// never delivered by that consume) are left alone. So the heap holds about
// one entry per consume and partition, not per message (a drain in
// batches of 100 over 4 partitions: 4 instead of 100), and a stale entry
// left by the acks costs 48 bytes per batch, not 40 per message.
enum class timer_kind : std::uint8_t { lease, due };

struct timer {
  millis at = 0;
  timer_kind kind = timer_kind::lease;
  storage::topic_id topic = 0;
  storage::group_id group = 0;
  position pos;
  std::uint64_t last = 0;  // lease: the range's last offset (if above pos.offset)
  std::uint64_t last_offset() const noexcept { return last > pos.offset ? last : pos.offset; }
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
  // A deque, not a vector: a timer made stale by an ack stays until its
  // deadline, so under load the heap holds (rate / batch) x lease_ms
  // timers, and when each delivery had its own timer that reached a
  // million. A vector doubles by copying all of them into fresh pages on
  // the loop thread: 20-45 ms at 2^20 timers, the aged fixed-rate run's
  // p99.9 (docs/BENCHMARKS.md, "The aged tail"). A deque grows a block at
  // a time.
  std::priority_queue<timer, std::deque<timer>, std::greater<>> heap_;
};

}  // namespace onceq
