#pragma once

// Applying a replicated log entry (broker/log_entry.hpp) to a broker: what
// every replica of a shard's Raft group runs, in log order
// (docs/REPLICATION.md, section 1). The broker reads time only from its
// clock; a replica gives it a log_clock, which apply_entry() moves to the
// entry's stamped time before the command runs, so that every replica
// runs every command at the same reading. Time never runs backwards: an
// entry stamped earlier than the last (a new leader whose clock is behind)
// runs at the last reading.
//
// Each command runs through its row of the command table
// (broker/dispatch.hpp), the same row a single node's shard runs; the
// answer is its log_reply. A consume is applied as the broker's own
// consume(): it leases what is ready now. Waiting for messages (long-poll)
// is the shard's business (shard/replicated_path.hpp), not the log's.
//
// Thread safety: as broker (one thread).

#include <cstdint>
#include <optional>

#include "broker/broker.hpp"
#include "broker/dispatch.hpp"
#include "broker/log_entry.hpp"
#include "storage/applied_index_store.hpp"

namespace onceq {

// The clock of a replica: the stamp of the entry being applied.
class log_clock final : public clock {
 public:
  explicit log_clock(millis start = 0) : now_(start) {}
  millis now_ms() const override { return now_; }
  // Moves to stamp, or stays if stamp is earlier. Returns the reading.
  millis advance_to(millis stamp) {
    if (stamp > now_) now_ = stamp;
    return now_;
  }

 private:
  millis now_;
};

// Runs e on b at e.now_ms (through time, which must be b's clock). The
// command's own error is the answer, as from the broker's call; every
// replica gives the same one.
result<log_reply> apply_entry(broker& b, log_clock& time, const log_entry& e);

// A replica's apply of the entry at index of its shard's log, over a
// broker whose store is `applied` (the position goes into the same batch as
// the entry's writes). nullopt: skipped, the store already holds that entry
// (raft replaying its log after a restart).
result<std::optional<log_reply>> apply_at(broker& b, log_clock& time,
                                          storage::applied_index_store& applied,
                                          std::uint64_t index, const log_entry& e);

// After a restart: the clock resumes from the stored position's reading
// (so that entries stamped before it still run at it), and the position is
// what apply_at skips up to. Call after applied.load() and b.recover().
void resume_clock(log_clock& time, const storage::applied_index_store& applied);

}  // namespace onceq
