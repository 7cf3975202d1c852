#pragma once

// Retention: deleting messages that every group has acked, and messages
// older than the topic's retention_ms, a bounded number per run.

#include "broker/core.hpp"
#include "broker/txn.hpp"

namespace onceq {

// One retention run over every topic, as one txn, which also stores
// c.next_retention_ms (set by the caller before the run): the schedule is
// part of the state, so that replicas that restart at different points run
// retention at the same entries and stay byte-for-byte equal. A failed
// write leaves everything for the next run.
void run_retention(core& c, millis now);

// Plans deleting the messages of t's partition p below upto, with every
// group's delivery records for them: open deliveries there end (unacked
// messages dropped by age, or moved out of a DLQ) and cursors move past.
void truncate(core& c, topic& t, std::uint32_t p, std::uint64_t upto, millis now, txn& tx);

inline constexpr millis k_retention_period_ms = 1000;     // how often tick() runs retention
inline constexpr std::size_t k_retention_batch = 10'000;  // messages deleted per partition per run

}  // namespace onceq
