#pragma once

// One shard: a broker core, its own store, and the one event-loop thread
// that owns both (ARCHITECTURE.md, "Concurrency: shards, each owned by one
// loop"). The loop is an Asio io_context run by that thread; HTTP sessions
// placed on it (context()) run their requests to completion there: parse,
// run the command on the broker, write the batch (no sync), queue the
// answer. When the loop has no more ready events it ends the iteration
// (Redis's beforeSleep): it ticks the broker's timers, wakes long-polls and
// key waiters, and makes everything the iteration wrote durable with one
// WAL sync (store::when_durable; on the loop itself when the store syncs on
// its caller, else on the store's syncer while the loop goes on) before the
// iteration's answers are released.
//
// While the store refuses writes (disk full, EIO), commands that write
// answer errc::unavailable and reads keep working; the loop asks the store
// to resume every 500 ms and rebuilds the broker from the store when the
// store had to be reopened, so the shard recovers without a restart.
//
// In a cluster (a shard_log given) the broker is the replica's: it lives on
// the thread that applies the shard's Raft log, not on this loop. Commands
// that change state are proposed as log entries (broker/log_entry.hpp) and
// answered with what their apply returned, once committed on a majority
// (durable there: no sync of the shard's own). Reads run where the broker
// lives (shard_log::read), long-polls park on this loop and propose their
// consume again when an applied entry may have made messages ready, and the
// leader proposes a tick entry when the broker's timers are due. A node
// that does not lead the shard answers errc::unavailable with
// error::leader naming the leader (http/ forwards the request there).
//
// Thread safety: every public member may be called from any thread. A call
// from the shard's own loop runs the command at once (no hand-off); a call
// from another thread crosses once, through the loop's mailbox
// (shard/mailbox.hpp: lock-free, one asio::post per batch), and its done
// callback runs there. done callbacks run on the loop or on the store's
// syncer thread and must not block (post to your own executor).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "broker/broker.hpp"
#include "shard/commands.hpp"
#include "shard/disk_reader.hpp"
#include "shard/mailbox.hpp"
#include "shard/shard_log.hpp"

namespace onceq {

struct shard_options {
  std::size_t max_queue = 100'000;     // Default: commands crossing from other loops before 429
  millis max_wait_ms = k_max_wait_ms;  // Default: longest long-poll (the API's limit)
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

  // Whether the shard is one of a cluster (a shard_log).
  bool replicated() const noexcept { return log_ != nullptr; }

  // Runs fn on the loop and calls done with its result after the writes it
  // made are durable (errors are answered at once). In a cluster fn may
  // only read: it runs on the leader, on state that holds every committed
  // command (the leader's read after a barrier).
  template <class T>
  void execute(std::function<result<T>(broker&)> fn, std::function<void(result<T>)> done) {
    if (log_ != nullptr) return read_replica<T>(true, std::move(fn), std::move(done));
    run_on_loop<T>(std::move(fn), std::move(done), true);
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
    if (log_ != nullptr) return read_replica<T>(fresh, std::move(fn), std::move(done));
    run_on_loop<T>(std::move(fn), std::move(done), fresh);
  }

  // Runs the command on the loop (shard/commands.hpp) and calls done with
  // its answer after the writes it made are durable, as execute. In a
  // cluster a command that writes is proposed to the log, a read runs on
  // the leader as execute.
  template <class Cmd>
  void submit(Cmd cmd, std::function<void(result<typename command<Cmd>::reply>)> done) {
    using reply = typename command<Cmd>::reply;
    if constexpr (command<Cmd>::writes) {
      if (log_ != nullptr) {
        propose(Cmd(std::move(cmd)), [done = std::move(done)](result<log_reply> r) {
          done(reply_of<reply>(std::move(r)));
        });
        return;
      }
    }
    execute<reply>([cmd = std::move(cmd)](broker& b) { return command<Cmd>::run(b, cmd); },
                   std::move(done));
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
  // Acks the previous batch and consumes the next in one job, so that one
  // durable round trip serves a consumer's whole cycle (docs/API.md, "Acks
  // carried on the next consume"). The acks run first, exactly as
  // ack_batch; then the consume, exactly as consume(). The answer waits
  // until both are durable, an empty one after a long-poll too. An ack
  // batch that fails as a whole (unknown topic, storage refusing writes)
  // answers that error and consumes nothing.
  void consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                          std::function<void(result<acked_consume>)> done);

  // get_key, and if wait_ms > 0 and the key is not committed, park until it
  // is committed or wait_ms passes (then answer its state as it is). A
  // commit is answered only once the ack that made it is durable; if that
  // sync fails, the failure is the answer.
  void wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done);

  // Commands posted from other loops and not run yet (backpressure).
  std::size_t queue_depth() const noexcept { return queued_.load(std::memory_order_relaxed); }

  // Whether the store accepts writes (store::health), for healthz and
  // metrics. Any thread.
  storage::store_health storage_health() const { return store_.health(); }

  // The store's WAL sync statistics (store::wal_sync_stats), for metrics.
  std::optional<storage::sync_stats> wal_sync_stats() const { return store_.wal_sync_stats(); }
  // Writes the loop waited for in a storage write stall (store::watch_write_stalls).
  std::uint64_t write_stalls() const { return store_.write_stalls(); }

  // Loop iterations so far and those that ended with a sync (metrics).
  std::uint64_t iterations() const noexcept { return iterations_.load(std::memory_order_relaxed); }

  // Commands whose reads needed the disk (metrics): handed to the reader
  // thread, and of those, run again on the loop with reads that may wait
  // (after k_memory_tries tries, or while stopping).
  std::uint64_t disk_reads() const noexcept { return reader_.reads(); }
  std::uint64_t loop_disk_reads() const noexcept {
    return loop_disk_reads_.load(std::memory_order_relaxed);
  }

 private:
  struct waiter;
  struct key_waiter;
  // Cluster: runs fn where the broker lives (shard_log::read) and answers
  // done there.
  template <class T>
  void read_replica(bool fresh, std::function<result<T>(broker&)> fn,
                    std::function<void(result<T>)> done) {
    auto shared_done = std::make_shared<std::function<void(result<T>)>>(std::move(done));
    replica_read(
        fresh,
        [fn = std::move(fn), shared_done](broker& b) {
          result<T> r = make_error(errc::internal, "internal error");
          try {
            r = fn(b);
          } catch (const std::exception& e) {
            r = make_error(errc::internal, e.what());
          }
          (*shared_done)(std::move(r));
        },
        [shared_done](error e) { (*shared_done)(result<T>(std::move(e))); });
  }
  // Cluster (shard_replicated.cpp).
  void replica_read(bool fresh, std::function<void(broker&)> fn, std::function<void(error)> fail);
  void propose(log_command cmd, shard_log::reply_fn done);
  void replicated_consume(std::shared_ptr<waiter> w, log_command entry);
  void consumed(std::shared_ptr<waiter> w, result<log_reply> r);
  void replicated_wait_key(std::shared_ptr<key_waiter> w);
  void recheck_key(std::shared_ptr<key_waiter> w, bool last);
  void key_checked(std::shared_ptr<key_waiter> w, result<key_info> r, bool last);
  void on_applied(log_tag tag, std::string_view topic);
  void wake_replicated();
  void end_replicated_iteration();
  void expire_replicated_waiters(bool all);

  // Loop: runs step, a request's command that returns false when a read
  // would have waited for the disk (errc::would_block; its txn was dropped,
  // so it changed nothing), with the store reading from memory only. On
  // false the reader thread reads what it missed into memory and the step
  // runs again on the loop; its k_memory_tries-th run reads from the disk
  // on the loop, so a command that keeps missing memory still ends. Without
  // a running reader (a cluster's shard, a stopping one) step just runs.
  template <class Step>
  void run_reading(Step step) {
    if (!reading_from_memory_) {
      step();
      return;
    }
    bool done = false;
    {
      memory_reads_scope scope(store_);
      done = step();
    }
    if (!done) read_then_retry(std::function<bool()>(std::move(step)), 1);
  }
  // Loop: fn's answer goes to done, once what it wrote (and, for a read,
  // what it shows) is durable when durable, else at once.
  template <class T>
  void run_on_loop(std::function<result<T>(broker&)> fn, std::function<void(result<T>)> done,
                   bool durable) {
    auto shared_done = std::make_shared<std::function<void(result<T>)>>(std::move(done));
    post_job(
        [this, fn = std::move(fn), shared_done, durable](broker& b) mutable {
          run_reading([this, fn = std::move(fn), shared_done, durable, &b]() {
            auto r = fn(b);
            if (would_block(r)) return false;
            if (!r.ok() || !durable) {
              (*shared_done)(std::move(r));
              return true;
            }
            answer_when_durable(std::move(r),
                                [shared_done](result<T> x) { (*shared_done)(std::move(x)); });
            return true;
          });
        },
        [shared_done](error e) { (*shared_done)(result<T>(std::move(e))); });
  }
  template <class T>
  static bool would_block(const result<T>& r) {
    return !r.ok() && r.code() == errc::would_block;
  }
  struct memory_reads_scope {
    explicit memory_reads_scope(storage::store& s) : store(s) { store.memory_reads(true); }
    ~memory_reads_scope() { store.memory_reads(false); }
    memory_reads_scope(const memory_reads_scope&) = delete;
    memory_reads_scope& operator=(const memory_reads_scope&) = delete;
    storage::store& store;
  };
  void read_then_retry(std::function<bool()> step, int tries);
  void retry_reading(std::function<bool()> step, int tries);

  using job = std::function<void(broker&)>;
  using reject = std::function<void(error)>;
  using durable_fn = std::function<void(result<void>)>;
  void post_job(job j, reject r);
  void run_loop();
  // The end of one loop iteration: resume, tick, waiters, then one sync for
  // everything the iteration wrote.
  void end_iteration();
  // How long the loop may sleep: the broker's next deadline, parked
  // waiters' deadlines, the next resume attempt.
  std::chrono::steady_clock::duration sleep_budget() const;
  // Loop: fn runs once the writes made so far are durable. Answers
  // gathered over one iteration share one when_durable (and so one sync),
  // including consumes woken by that iteration's produces.
  void after_durable(durable_fn fn);
  void end_round();
  // While the store refuses writes: store::resume() every k_resume_every,
  // and a rebuild of the broker's memory when the store had to reopen.
  void try_resume();
  // Answers parked waiters with what they have (drain, stop).
  void release_waiters();
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
  void wake_waiters();

  // Loop: consume for w now, or park it (wait_ms > 0, nothing yet).
  void consume_now(broker& b, std::shared_ptr<waiter> w, millis wait_ms);

  std::uint32_t id_;
  broker& broker_;
  storage::store& store_;
  const clock& clock_;
  shard_options opts_;

  boost::asio::io_context io_{1};
  // How commands from other loops cross to this one (lock-free, one
  // asio::post per batch).
  mailbox& mailbox_ = mailbox::of(io_);
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_{};
  std::atomic<bool> started_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_loop_{false};
  std::atomic<std::size_t> queued_{0};
  std::atomic<std::uint64_t> iterations_{0};
  // Reads that need the disk (run_reading); started with the loop, single
  // node only.
  disk_reader reader_;
  bool reading_from_memory_ = false;  // loop only; set before the loop starts
  std::atomic<std::uint64_t> loop_disk_reads_{0};

  // Loop only.
  std::vector<std::shared_ptr<waiter>> waiters_;
  std::vector<std::shared_ptr<key_waiter>> key_waiters_;
  std::vector<durable_fn> round_;
  std::chrono::steady_clock::time_point next_resume_{};
  bool needs_recover_ = false;

  // Cluster.
  shard_log* log_ = nullptr;
  // Set from the log's thread when an applied entry may wake parked
  // consumers (ready_topics_, or every topic) or key waiters.
  std::mutex wake_mu_;
  std::vector<std::string> ready_topics_;  // wake_mu_
  bool wake_all_ = false;                  // wake_mu_
  bool wake_keys_ = false;                 // wake_mu_
  std::atomic<bool> wake_posted_{false};
  // Consumes and key waits started and not answered yet: while there are
  // none, applied entries wake nothing (no lock, no post).
  std::atomic<std::size_t> interest_{0};
  bool tick_in_flight_ = false;                        // loop only
  std::chrono::steady_clock::time_point last_tick_{};  // loop only
};

}  // namespace onceq
