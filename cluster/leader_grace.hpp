#pragma once

// leader_grace: a new leader's grace on the stamps of its entries
// (docs/REPLICATION.md, section 4).
//
// A lease's deadline is absolute, computed from the stamp of the entry that
// granted it, and any entry applied at a later stamp may expire it. A new
// leader whose clock runs ahead of the previous leader's would therefore end
// that leader's leases early. For max_lease_ms after it first proposes in a
// term (by then every lease granted in an earlier term has run out), the
// leader stamps its entries grace_ms behind its clock: up to grace_ms of
// skew is absorbed. The replicas' log_clock (max of the last stamp and the
// entry's) keeps time from running backwards across the change. Leases the
// new leader grants meanwhile end up to grace_ms early in real time, which
// errs on the safe side.
//
// The tick that fires a broker deadline d must then be proposed at d +
// grace_ms while the grace lasts, so that its stamp reaches d: tick_at.
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <cstdint>
#include <mutex>

#include "base/clock.hpp"

namespace onceq::cluster {

class leader_grace {
 public:
  leader_grace(millis grace_ms, millis max_lease_ms)
      : grace_ms_(grace_ms), max_lease_ms_(max_lease_ms) {}

  // The stamp of an entry this node proposes at now (its clock) while it
  // leads term (not 0). The first call in a term starts that term's grace.
  millis stamp(std::uint64_t term, millis now) {
    std::lock_guard lock(mu_);
    if (term != term_) {
      term_ = term;
      term_seen_at_ms_ = now;
      grace_until_ms_.store(now + max_lease_ms_, std::memory_order_relaxed);
    }
    return now - term_seen_at_ms_ < max_lease_ms_ ? now - grace_ms_ : now;
  }

  // When to propose the tick that fires a broker deadline d (-1: none): d
  // itself, or d + grace_ms for a deadline inside the grace (a tick stamped
  // grace_ms behind the clock fires nothing before then).
  millis tick_at(millis d) const {
    if (d < 0 || d >= grace_until_ms_.load(std::memory_order_relaxed)) return d;
    return d + grace_ms_;
  }

 private:
  const millis grace_ms_, max_lease_ms_;
  std::mutex mu_;
  std::uint64_t term_ = 0;                 // mu_: the term of the last stamp
  millis term_seen_at_ms_ = 0;             // mu_: when this node first stamped in it
  std::atomic<millis> grace_until_ms_{0};  // term_seen_at_ms_ + max_lease_ms_
};

}  // namespace onceq::cluster
