#pragma once

// A cluster's apply path (apply_path.hpp): the broker is the replica's,
// and lives on the thread that applies the shard's Raft log (shard_log).
// Commands that change state are proposed as log entries
// (broker/log_entry.hpp) and answered with what their apply returned, once
// committed on a majority (durable there: no sync of the shard's own).
// Reads run where the broker lives (shard_log::read). A consume's try is a
// proposed consume; a parked one is tried again when an applied entry may
// have made messages ready (the log's on_applied, posted to the loop). The
// leader proposes a tick entry when the broker's timers are due. A node
// that does not lead answers errc::unavailable with error::leader.
//
// Thread safety: write, read, the first consume and key check, health and
// the log's callbacks from any thread; the rest on the loop.

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shard/apply_path.hpp"
#include "shard/shard_log.hpp"

namespace onceq {

class shard;

class replicated_path final : public apply_path {
 public:
  // s, log, store and time outlive the path; store is the replica's.
  replicated_path(shard& s, shard_log& log, storage::store& store, const clock& time);

  void start() override {}
  void stop() override {}
  void write(log_command cmd, reply_fn done) override;
  void read(bool fresh, std::unique_ptr<broker_job> job) override;
  void consume(std::shared_ptr<consume_waiter> w, bool first) override;
  void check_key(std::shared_ptr<key_waiter> w, bool first, bool last) override;
  // Committed on a majority: durable already.
  void after_durable(durable_fn fn) override { fn(result<void>{}); }
  void end_iteration() override;
  void flush() override {}
  std::chrono::steady_clock::time_point wake_by(
      std::chrono::steady_clock::time_point now) const override;
  storage::store_health health() const override;
  bool held() const override { return log_.holds(); }
  std::uint64_t disk_reads() const override { return 0; }
  std::uint64_t loop_disk_reads() const override { return 0; }

 private:
  // Proposes cmd stamped with this node's clock; errc::unavailable while
  // the shard does not take requests.
  void propose(log_command cmd, reply_fn done);
  // Loop: the reply of a consume's entry, as shard::consumed takes it.
  void consumed(std::shared_ptr<consume_waiter> w, result<log_reply> r, bool first);
  // The log's thread: after each applied entry.
  void on_applied(log_tag tag, std::string_view topic);
  // Loop: what on_applied collected, to the shard's waiters.
  void wake();

  shard& shard_;
  shard_log& log_;
  storage::store& store_;
  const clock& clock_;

  // Set from the log's thread when an applied entry may wake parked
  // consumers (ready_topics_, or every topic) or key waiters.
  std::mutex wake_mu_;
  std::vector<std::string> ready_topics_;  // wake_mu_
  bool wake_all_ = false;                  // wake_mu_
  bool wake_keys_ = false;                 // wake_mu_
  std::atomic<bool> wake_posted_{false};
  bool tick_in_flight_ = false;                        // loop only
  std::chrono::steady_clock::time_point last_tick_{};  // loop only
};

}  // namespace onceq
