#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "broker/broker.hpp"

namespace onceq {

struct runner_options {
  std::size_t max_queue = 100'000;     // Default: commands waiting for the core before 429
  millis max_wait_ms = k_max_wait_ms;  // Default: longest long-poll (the API's limit)
};

// Runs the broker on its own core thread: commands queue up from any
// thread, run one after another, and each answer is released once the
// store says its writes are durable (group commit happens in the store:
// one sync covers every command that ran while the previous sync was in
// flight). Also drives broker::tick() from the broker's next deadline and
// parks long-polling consumers until a produce makes their topic ready.
//
// While the store refuses writes (disk full, EIO), commands that write
// answer errc::unavailable and reads keep working; the core asks the store
// to resume every 500 ms and rebuilds the broker from the store when the
// store had to be reopened, so the server recovers without a restart.
//
// Thread safety: every public member may be called from any thread. The
// done callbacks run on the core or the store's syncer thread and must not
// block (post to your own executor).
class runner {
 public:
  runner(broker& b, storage::store& store, const clock& time, runner_options opts = {});
  ~runner();  // stop()
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;

  void start();
  // Stops taking commands (they answer errc::unavailable), answers parked
  // waiters, waits for pending answers to be released, joins the thread.
  void stop();

  // Runs fn on the core thread and calls done with its result after the
  // writes it made are durable (errors are answered at once).
  template <class T>
  void execute(std::function<result<T>(broker&)> fn, std::function<void(result<T>)> done) {
    auto shared_done = std::make_shared<std::function<void(result<T>)>>(std::move(done));
    post_job(
        [this, fn = std::move(fn), shared_done](broker& b) mutable {
          auto r = fn(b);
          if (!r.ok()) {
            (*shared_done)(std::move(r));
            return;
          }
          answer_when_durable(std::move(r),
                              [shared_done](result<T> x) { (*shared_done)(std::move(x)); });
        },
        [shared_done](error e) { (*shared_done)(result<T>(std::move(e))); });
  }

  // consume, and if nothing is available and wait_ms > 0, park until the
  // topic gets a ready message (then try again) or wait_ms passes (then
  // answer an empty vector).
  void consume(consume_cmd cmd, millis wait_ms,
               std::function<void(result<std::vector<delivery>>)> done);

  // What consume_after_acks answers: the acks' outcomes (as ack_batch's)
  // and the deliveries (as consume's).
  struct acked_consume {
    std::vector<ack_outcome> acks;
    std::vector<delivery> deliveries;
  };
  // Acks the previous batch and consumes the next in one core job, so that
  // one durable round trip serves a consumer's whole cycle (docs/API.md,
  // "Acks carried on the next consume"). The acks run first, exactly as
  // ack_batch; then the consume, exactly as consume(). The answer waits
  // until both are durable, an empty one after a long-poll too. An ack
  // batch that fails as a whole (unknown topic, storage refusing writes)
  // answers that error and consumes nothing.
  void consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                          std::function<void(result<acked_consume>)> done);

  // get_key, and if wait_ms > 0 and the key is not committed, park until it
  // is committed or wait_ms passes (then answer its state as it is).
  void wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done);

  std::size_t queue_depth() const;

  // Whether the store accepts writes (store::health), for healthz and
  // metrics. Any thread.
  storage::store_health storage_health() const { return store_.health(); }

  // The store's WAL sync statistics (store::wal_sync_stats), for metrics.
  std::optional<storage::sync_stats> wal_sync_stats() const { return store_.wal_sync_stats(); }

 private:
  using job = std::function<void(broker&)>;
  using reject = std::function<void(error)>;
  using durable_fn = std::function<void(result<void>)>;
  void post_job(job j, reject r);
  void loop();
  // Core thread: fn runs once the writes made so far are durable. Answers
  // gathered over one round of the loop share one when_durable (and so one
  // fsync), including consumes woken by that round's produces.
  void after_durable(durable_fn fn);
  void end_round();
  // While the store refuses writes: store::resume() every k_resume_every,
  // and a rebuild of the broker's memory when the store had to reopen.
  void try_resume();
  // Calls done(r) once durable, or done(the durability error).
  template <class T, class Done>
  void answer_when_durable(result<T> r, Done done) {
    after_durable([r = std::move(r), done = std::move(done)](result<void> durable) mutable {
      if (!durable.ok()) {
        done(result<T>(std::move(durable).err()));
      } else {
        done(std::move(r));
      }
    });
  }
  void answer_durable(result<std::vector<delivery>> r,
                      std::function<void(result<std::vector<delivery>>)> done);

  struct waiter;
  struct key_waiter;
  // Core thread: consume for w now, or park it (wait_ms > 0, nothing yet).
  void consume_now(broker& b, std::shared_ptr<waiter> w, millis wait_ms);

  broker& broker_;
  storage::store& store_;
  const clock& clock_;
  runner_options opts_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<job, reject>> queue_;
  bool stopping_ = false;
  bool started_ = false;
  std::thread thread_;

  // Core-thread only.
  std::vector<std::shared_ptr<waiter>> waiters_;
  std::vector<std::shared_ptr<key_waiter>> key_waiters_;
  std::vector<durable_fn> round_;
  std::chrono::steady_clock::time_point next_resume_{};
  bool needs_recover_ = false;
};

}  // namespace onceq
