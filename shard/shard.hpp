#pragma once

// One shard: a broker core, its own store, and the one event-loop thread
// that serves both (docs/DESIGN.md, "Shards and threads"). The loop is an
// Asio io_context run by that thread; HTTP sessions placed on it
// (context()) run their requests to completion there. When the loop has no
// more ready events it ends the iteration (Redis's beforeSleep): the
// path's timers and wake-ups, the parked waiters' deadlines, then the
// durability of everything the iteration wrote, before the iteration's
// answers are released.
//
// What is common to every shard lives here: the loop, the mailbox, the
// parked long-polls and key waits with their deadlines, drain and stop,
// the metrics. How a request reaches the broker and when its answer goes
// out is the shard's apply path (shard/apply_path.hpp), picked once at
// construction:
//  - a single node (no shard_log): local_path, the loop's own broker;
//    commands run at once, answers wait for one WAL sync per iteration
//    (a long one's first commands may go to an idle syncer sooner);
//    while the store refuses writes (disk full, EIO), writes answer
//    errc::unavailable, reads keep working, and the loop asks the store to
//    resume every 500 ms (rebuilding the broker after a reopen);
//  - a cluster (a shard_log): replicated_path, the replica's broker on the
//    thread that applies the shard's Raft log; commands that change state
//    are proposed and answered with their apply's reply once committed,
//    reads run on the leader, the leader proposes the timers' ticks, and a
//    node that does not lead answers errc::unavailable with error::leader
//    naming the leader (http/ forwards the request there).
//
// Thread safety: every public member may be called from any thread. A call
// from the shard's own loop runs at once (no hand-off); a call from
// another thread crosses once, through the loop's mailbox
// (shard/mailbox.hpp: lock-free, one asio::post per batch). done callbacks
// run on the loop, on the store's syncer thread, or (cluster) on the
// log's applying thread, and must not block (post to your own executor).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "broker/dispatch.hpp"
#include "shard/apply_path.hpp"
#include "shard/loop_clients.hpp"
#include "shard/loop_load.hpp"
#include "shard/mailbox.hpp"
#include "shard/shard_log.hpp"
#include "shard/waiters.hpp"

namespace onceq {

struct shard_options {
  std::size_t max_queue = 100'000;     // Default: commands crossing from other loops before 429
  millis max_wait_ms = k_max_wait_ms;  // Default: longest long-poll (the API's limit)
  // A single node's round goes to an idle syncer between two handlers once
  // it is this old and its answers took 50 us each on average
  // (local_path::flush_if_disk_idle; docs/BENCHMARKS.md, "Fourteenth
  // round"). A test that checks the iteration's end sets it out of reach.
  std::chrono::microseconds early_sync_age{100};
};

class shard {
 public:
  // b and store belong to this shard alone; all three outlive it. log: the
  // shard's replicated log in a cluster (then b is its replica's broker and
  // store its store, both touched only by the log's thread), else null; it
  // must stop calling back (raft_node::stop) before the shard is destroyed.
  shard(std::uint32_t id, broker& b, storage::store& store, const clock& time,
        shard_options opts = {}, shard_log* log = nullptr);
  ~shard();  // stop()
  shard(const shard&) = delete;
  shard& operator=(const shard&) = delete;

  std::uint32_t id() const noexcept { return id_; }

  // Starts the loop thread ("onceq-shard-N").
  void start();
  // Stops taking commands (they answer errc::unavailable) and answers
  // parked waiters with what they have; the loop keeps serving sessions
  // (their answers still go out). Idempotent.
  void drain();
  // drain(), releases every pending answer, then ends the loop and joins
  // its thread. Idempotent.
  void stop();

  // The loop's io_context: sessions placed here run on the shard's thread.
  boost::asio::io_context& context() noexcept { return io_; }
  // The broker's topics, read on the calling thread: before start() only.
  std::vector<std::string> topics_before_start() const { return broker_.list_topics(); }

  // Whether the caller runs on this shard's loop.
  bool on_loop() const noexcept;

  // fn(topic, exists) runs on the loop right after a create or delete of
  // topic (or of its DLQ, with a delete) ran on this node's broker: a
  // single node's placement follows what each shard holds (shard_set). A
  // cluster's shard never calls it: a cluster places names by hash. Set
  // before start().
  void on_topic_change(std::function<void(std::string_view topic, bool exists)> fn) {
    topic_change_ = std::move(fn);
  }

  // Runs fn on the broker and calls done with its result after the writes
  // it made are durable (errors are answered at once). In a cluster fn may
  // only read: it runs on the leader, on state that holds every committed
  // command (the leader's read after a barrier).
  template <class T>
  void execute(std::function<result<T>(broker&)> fn, std::function<void(result<T>)> done) {
    query<T>(true, std::move(fn), std::move(done));
  }

  // A read of this node's state. Fresh: as execute, answered once what it
  // shows is durable (in a cluster, errc::unavailable with the leader on a
  // node that does not lead). Not fresh: the state as it is now, answered
  // at once; in a cluster, as this replica last applied it (may lag the
  // leader). A single node's not-fresh reads (/metrics) so keep answering
  // while a failed WAL write holds back every answer that waits for
  // durability.
  template <class T>
  void query(bool fresh, std::function<result<T>(broker&)> fn,
             std::function<void(result<T>)> done) {
    path_->read(fresh, std::make_unique<read_job<T>>(*this, fresh, std::move(fn), std::move(done)));
  }

  // Runs the command through its row of the command table
  // (broker/dispatch.hpp) and calls done with its typed reply, once what
  // it wrote is durable. A command that writes goes through the apply path
  // (in a cluster, proposed to the log); a read runs as execute.
  template <class Cmd>
  void submit(Cmd cmd, std::function<void(result<typename command_traits<Cmd>::reply>)> done) {
    using reply = typename command_traits<Cmd>::reply;
    if constexpr (writes<Cmd>) {
      path_->write(
          log_command(std::in_place_type<Cmd>, std::move(cmd)),
          [done = std::move(done)](result<log_reply> r) { done(reply_as<reply>(std::move(r))); });
    } else {
      execute<reply>([cmd = std::move(cmd)](broker& b) { return command_traits<Cmd>::run(b, cmd); },
                     std::move(done));
    }
  }

  // consume, and if nothing is available and wait_ms > 0, park until the
  // topic gets a ready message (then try again) or wait_ms passes (then
  // answer an empty vector).
  void consume(consume_cmd cmd, millis wait_ms,
               std::function<void(result<std::vector<delivery>>)> done);

  // Acks the previous batch and consumes the next in one request, so that
  // one durable round trip serves a consumer's whole cycle (docs/API.md,
  // "Acks carried on the next consume";
  // command_traits<consume_after_acks_cmd>): the acks first, exactly as
  // ack_batch; then the consume, exactly as consume(). The answer waits
  // until both are durable, an empty one after a long-poll too. An ack
  // batch that fails as a whole (unknown topic, storage refusing writes)
  // answers that error and consumes nothing.
  void consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                          std::function<void(result<consume_after_acks_reply>)> done);

  // get_key, and if wait_ms > 0 and the key is not committed, park until it
  // is committed or wait_ms passes (then answer its state as it is). A
  // commit is answered only once the ack that made it is durable; if that
  // sync fails, the failure is the answer.
  void wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done);

  // Commands posted from other loops and not run yet (backpressure).
  std::size_t queue_depth() const noexcept { return queued_.load(std::memory_order_relaxed); }

  // Whether the shard can write, for healthz and metrics: its store
  // (store::health), and in a cluster its Raft log too
  // (shard_log::log_health). Any thread.
  storage::store_health storage_health() const { return path_->health(); }

  // Whether this node holds the shard (apply_path::held). Any thread.
  bool held() const { return path_->held(); }

  // The store's WAL sync statistics (store::wal_sync_stats), for metrics.
  std::optional<storage::sync_stats> wal_sync_stats() const { return store_.wal_sync_stats(); }
  // Writes the loop waited for in a storage write stall (store::watch_write_stalls).
  std::uint64_t write_stalls() const { return store_.write_stalls(); }

  // How busy the loop thread is (shard/loop_load.hpp). Any thread.
  const loop_load& load() const noexcept { return load_; }

  // Loop iterations so far (metrics).
  std::uint64_t iterations() const noexcept { return iterations_.load(std::memory_order_relaxed); }

  // Commands whose reads needed the disk (metrics): handed to the reader
  // thread, and of those, run again on the loop with reads that may wait.
  std::uint64_t disk_reads() const noexcept { return path_->disk_reads(); }
  std::uint64_t loop_disk_reads() const noexcept { return path_->loop_disk_reads(); }

 private:
  // The paths run requests and hand their outcomes back through the
  // members below.
  friend class local_path;
  friend class replicated_path;

  template <class T>
  class read_job;

  // Why a request cannot start now (draining, not started), if it cannot.
  std::optional<error> refusal() const;

  // Runs j.run() on the loop: at once when called there, else it crosses
  // through the mailbox (bounded by max_queue: errc::resource_exhausted
  // above). j.refuse(e) instead when the shard does not take requests.
  template <class Job>
  void post(Job j) {
    if (auto e = refusal()) return j.refuse(std::move(*e));
    // Run to completion: the command runs where its state lives, now.
    if (on_loop()) return j.run();
    if (queued_.load(std::memory_order_relaxed) >= opts_.max_queue) {
      return j.refuse(
          make_error(errc::resource_exhausted, "too many requests waiting for the shard"));
    }
    queued_.fetch_add(1, std::memory_order_relaxed);
    mailbox_.push([this, j = std::move(j)]() mutable {
      queued_.fetch_sub(1, std::memory_order_relaxed);
      j.run();  // accepted: the job answers, also while stopping
    });
  }

  // Loop: a try of w got r. Answers it (an error, deliveries, its wait ran
  // out, draining) or parks it until a wake-up or its deadline.
  void consumed(std::shared_ptr<consume_waiter> w, result<std::vector<delivery>> r);
  // Loop: a check of w's key got r. Answers it (an error, committed, last,
  // its wait ran out, draining) or parks it.
  void key_checked(std::shared_ptr<key_waiter> w, result<key_info> r, bool last);
  // Loop: tries again the consumers parked on topics (every one with all),
  // and with keys every key waiter.
  void wake(const std::vector<std::string>& topics, bool all, bool keys);
  // Consumes and key waits started and not answered yet (any thread): while
  // there are none, a cluster's applied entries wake nothing.
  std::size_t open_waits() const noexcept { return open_waits_.load(std::memory_order_relaxed); }
  bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }

  // Calls done(r) once durable, or done(the durability error).
  template <class T, class Done>
  void answer_when_durable(result<T> r, Done done) {
    path_->after_durable([r = std::move(r), done = std::move(done)](result<void> durable) mutable {
      if (!durable.ok()) {
        done(result<T>(std::move(durable).err()));
      } else {
        done(std::move(r));
      }
    });
  }
  void answer(std::shared_ptr<consume_waiter> w, result<std::vector<delivery>> r);
  void answer(std::shared_ptr<key_waiter> w, result<key_info> r);
  // Answers the waiters whose deadline passed (every one with all: drain,
  // stop) with what they have.
  void expire_waiters(bool all);

  void run_loop();
  // The end of one loop iteration: the path's timers and wake-ups, the
  // waiters' deadlines, then the durability of what the iteration wrote.
  void end_iteration();
  // How long the loop may sleep: the path's deadlines, the waiters'.
  std::chrono::steady_clock::duration sleep_budget() const;

  std::uint32_t id_;
  broker& broker_;
  storage::store& store_;
  const clock& clock_;
  shard_options opts_;

  boost::asio::io_context io_{1};
  // How commands from other loops cross to this one (lock-free, one
  // asio::post per batch).
  mailbox& mailbox_ = mailbox::of(io_);
  // The connections the loop serves, and those waiting for an answer.
  loop_clients& clients_ = loop_clients::of(io_);
  std::unique_ptr<apply_path> path_;
  std::function<void(std::string_view, bool)> topic_change_;  // set before start
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_{};
  std::atomic<bool> started_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_loop_{false};
  std::atomic<std::size_t> queued_{0};
  std::atomic<std::uint64_t> iterations_{0};
  std::atomic<std::size_t> open_waits_{0};
  loop_load load_;  // sampled by the loop, read by anyone

  // Loop only.
  std::vector<std::shared_ptr<consume_waiter>> waiters_;
  std::vector<std::shared_ptr<key_waiter>> key_waiters_;
};

// A typed read with its answer (execute, query, a read's submit).
template <class T>
class shard::read_job final : public broker_job {
 public:
  read_job(shard& s, bool fresh, std::function<result<T>(broker&)> fn,
           std::function<void(result<T>)> done)
      : shard_(s), fresh_(fresh), fn_(std::move(fn)), done_(std::move(done)) {}

  bool run(broker& b) override {
    result<T> r = make_error(errc::internal, "internal error");
    try {
      r = fn_(b);
    } catch (const std::exception& e) {
      r = make_error(errc::internal, e.what());
    }
    if (!r.ok() && r.code() == errc::would_block) return false;
    if (!r.ok() || !fresh_) {
      done_(std::move(r));
    } else {
      shard_.answer_when_durable(std::move(r), std::move(done_));
    }
    return true;
  }
  void refuse(error e) override { done_(result<T>(std::move(e))); }

 private:
  shard& shard_;
  bool fresh_;
  std::function<result<T>(broker&)> fn_;
  std::function<void(result<T>)> done_;
};

}  // namespace onceq
