#include "shard/shard.hpp"
#include "shard/waiters.hpp"

#include <pthread.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace onceq {

namespace {
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;
// Longest the loop sleeps without a deadline: bounds how late a manual or
// adjusted clock is noticed.
constexpr auto k_idle_wait = std::chrono::milliseconds(200);
// How often the loop asks a store that refuses writes to resume.
constexpr auto k_resume_every = std::chrono::milliseconds(500);
// Cluster: how often the loop looks whether this node leads (it then
// proposes the ticks).
constexpr auto k_replicated_idle_wait = std::chrono::milliseconds(50);
// Runs of a request's command with reads from memory before one that may
// read from the disk on the loop (run_reading): each miss first goes to the
// reader thread, so only a command that missed memory on two runs in a row
// (another read, or blocks evicted again) waits here.
constexpr int k_memory_tries = 3;
}  // namespace

shard::shard(std::uint32_t id, broker& b, storage::store& store, const clock& time,
             shard_options opts, shard_log* log)
    : id_(id), broker_(b), store_(store), clock_(time), opts_(opts), reader_(store, id), log_(log) {
  if (log_ != nullptr) {
    log_->on_applied([this](log_tag tag, std::string_view topic) { on_applied(tag, topic); });
  }
}

shard::~shard() {
  stop();
}

bool shard::on_loop() const noexcept {
  return loop_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

void shard::start() {
  if (started_.exchange(true)) return;
  // From here on the store is written from the loop: count the writes it
  // had to wait for (onceq_shard_write_stalls_total). In a cluster the
  // log's thread writes it.
  if (log_ == nullptr) store_.watch_write_stalls();
  // A request's reads come from memory; what needs the disk is read on the
  // reader thread (run_reading). In a cluster the broker is read where the
  // log applies it, not here.
  if (log_ == nullptr) {
    reader_.start();
    reading_from_memory_ = true;
  }
  thread_ = std::thread([this] {
    // For top -H, perf, gdb.
    pthread_setname_np(pthread_self(), fmt::format("onceq-shard-{}", id_).substr(0, 15).c_str());
    run_loop();
  });
}

void shard::drain() {
  if (draining_.exchange(true)) return;
  if (!started_.load() || !thread_.joinable()) return;
  asio::post(io_, [this] {
    release_waiters();
    end_round();
  });
}

void shard::stop() {
  drain();
  // The reader answers what it holds first (posted to the loop, which runs
  // those commands again with reads from the disk), then stops.
  reader_.stop();
  if (!thread_.joinable()) return;
  stop_loop_.store(true);
  asio::post(io_, [] {});  // wakes the loop
  thread_.join();
}

void shard::post_job(job j, reject r) {
  if (draining_.load(std::memory_order_acquire) || !started_.load(std::memory_order_acquire)) {
    r(make_error(errc::unavailable, "server is shutting down"));
    return;
  }
  if (on_loop()) {
    // Run to completion: the command runs where its state lives, now.
    j(broker_);
    return;
  }
  if (queued_.load(std::memory_order_relaxed) >= opts_.max_queue) {
    r(make_error(errc::resource_exhausted, "too many requests waiting for the shard"));
    return;
  }
  queued_.fetch_add(1, std::memory_order_relaxed);
  mailbox_.push([this, j = std::move(j), r = std::move(r)]() mutable {
    queued_.fetch_sub(1, std::memory_order_relaxed);
    (void)r;  // accepted: the job answers, also while stopping
    j(broker_);
  });
}

// Answers a consume after its delivery records are durable.
void shard::answer_durable(result<std::vector<delivery>> r,
                           std::function<void(result<std::vector<delivery>>)> done) {
  if (!r.ok() || r->empty()) {
    done(std::move(r));
    return;
  }
  answer_when_durable(std::move(r), std::move(done));
}

void shard::after_durable(durable_fn fn) {
  round_.push_back(std::move(fn));
}

void shard::end_round() {
  if (round_.empty()) return;
  store_.when_durable([batch = std::move(round_)](result<void> durable) mutable {
    for (auto& fn : batch) fn(durable);
  });
  round_.clear();
  // A store that syncs on its caller does it here, on the loop: one sync
  // for the whole iteration (Redis's beforeSleep). Others sync on their
  // own thread while the loop goes on.
  store_.sync_pending();
}

void shard::consume(consume_cmd cmd, millis wait_ms,
                    std::function<void(result<std::vector<delivery>>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<waiter>(
      waiter{std::move(cmd), steady::now() + std::chrono::milliseconds(wait_ms), std::move(done)});
  if (log_ != nullptr) {
    log_command first = w->cmd;
    return replicated_consume(std::move(w), std::move(first));
  }
  auto rej = [w](error e) { w->done(std::move(e)); };
  post_job([this, w, wait_ms](broker& b) { consume_now(b, w, wait_ms); }, std::move(rej));
}

void shard::consume_now(broker& b, std::shared_ptr<waiter> w, millis wait_ms) {
  run_reading([this, &b, w = std::move(w), wait_ms]() {
    auto r = b.consume(w->cmd);
    if (would_block(r)) return false;
    if (r.ok() && r->empty() && wait_ms > 0) {
      waiters_.push_back(w);
      return true;
    }
    if (w->wrote && r.ok()) {
      answer_when_durable(std::move(r), std::move(w->done));
    } else {
      answer_durable(std::move(r), std::move(w->done));
    }
    return true;
  });
}

void shard::read_then_retry(std::function<bool()> step, int tries) {
  auto misses = store_.take_read_misses();
  auto held = std::make_shared<std::function<bool()>>(std::move(step));
  const bool queued = !misses.empty() && reader_.read(std::move(misses), [this, held, tries] {
    mailbox_.push([this, held, tries] { retry_reading(std::move(*held), tries); });
  });
  if (!queued) {
    // Nothing to read ahead of it (a store that blocked without saying on
    // what), or the reader is stopping: the disk is read here, on the loop.
    loop_disk_reads_.fetch_add(1, std::memory_order_relaxed);
    (*held)();
  }
}

void shard::retry_reading(std::function<bool()> step, int tries) {
  if (tries + 1 >= k_memory_tries || !reader_.running()) {
    loop_disk_reads_.fetch_add(1, std::memory_order_relaxed);
    step();  // reads may wait: it ends here
    return;
  }
  bool done = false;
  {
    memory_reads_scope scope(store_);
    done = step();
  }
  if (!done) read_then_retry(std::move(step), tries + 1);
}

void shard::consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                               std::function<void(result<acked_consume>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto shared_done = std::make_shared<std::function<void(result<acked_consume>)>>(std::move(done));
  if (log_ != nullptr) {
    // One entry acks and consumes; a long-poll after it consumes alone, and
    // its answer carries the acks' outcomes (the waiter's done).
    auto w =
        std::make_shared<waiter>(waiter{cmd, steady::now() + std::chrono::milliseconds(wait_ms),
                                        [shared_done](result<std::vector<delivery>> r) {
                                          if (!r.ok()) return (*shared_done)(std::move(r).err());
                                          (*shared_done)(acked_consume{{}, std::move(*r)});
                                        },
                                        true});
    w->on_acked = [shared_done, wp = w.get()](result<consume_after_acks_reply> r) {
      // The acks are applied: from now on the waiter's answer carries them.
      auto outcomes = std::make_shared<std::vector<ack_outcome>>(std::move(r->acks));
      wp->done = [shared_done, outcomes](result<std::vector<delivery>> d) {
        if (!d.ok()) return (*shared_done)(std::move(d).err());
        (*shared_done)(acked_consume{std::move(*outcomes), std::move(*d)});
      };
      return std::move(r->deliveries);
    };
    return replicated_consume(std::move(w),
                              consume_after_acks_cmd{std::move(acks), std::move(cmd)});
  }
  auto rej = [shared_done](error e) { (*shared_done)(std::move(e)); };
  post_job(
      [this, acks = std::move(acks), cmd = std::move(cmd), wait_ms,
       shared_done](broker& b) mutable {
        auto acked = b.ack_batch(acks);
        if (!acked.ok()) {
          (*shared_done)(std::move(acked).err());
          return;
        }
        auto w = std::make_shared<waiter>(waiter{
            std::move(cmd), steady::now() + std::chrono::milliseconds(wait_ms),
            [outcomes = std::move(*acked), shared_done](result<std::vector<delivery>> r) mutable {
              if (!r.ok()) {
                (*shared_done)(std::move(r).err());
                return;
              }
              (*shared_done)(acked_consume{std::move(outcomes), std::move(*r)});
            },
            true});
        consume_now(b, std::move(w), wait_ms);
      },
      std::move(rej));
}

void shard::wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<key_waiter>(key_waiter{
      std::move(q), steady::now() + std::chrono::milliseconds(wait_ms), std::move(done)});
  if (log_ != nullptr) return replicated_wait_key(std::move(w));
  auto rej = [w](error e) { w->done(std::move(e)); };
  post_job(
      [this, w, wait_ms](broker& b) {
        run_reading([this, w, wait_ms, &b]() {
          auto r = b.get_key(w->q);
          if (would_block(r)) return false;
          if (r.ok() && r->st != key_info::state::committed && wait_ms > 0) {
            key_waiters_.push_back(w);
            return true;
          }
          // The state shown may come from a write of this very iteration
          // (an ack that committed the key): answered only once that write
          // is durable.
          answer_when_durable(std::move(r), std::move(w->done));
          return true;
        });
      },
      std::move(rej));
}

void shard::try_resume() {
  auto now = steady::now();
  if (!store_.health().writable && now >= next_resume_) {
    next_resume_ = now + k_resume_every;
    auto r = store_.resume();
    // Reopened: writes that were not synced may be gone, so memory follows
    // the store. Not cleared yet: try again later.
    if (r.ok() && *r == storage::resume_outcome::reopened) needs_recover_ = true;
  }
  // A failed rebuild is tried again every iteration.
  if (needs_recover_) needs_recover_ = !broker_.recover().ok();
}

steady::duration shard::sleep_budget() const {
  const auto now = steady::now();
  auto wake = now + (log_ != nullptr ? k_replicated_idle_wait : k_idle_wait);
  if (log_ != nullptr) {
    // The broker is not ours to read: the log publishes its next deadline
    // (the leader's tick).
    if (const millis d = log_->next_deadline(); d >= 0 && log_->leads() && !tick_in_flight_) {
      auto in = std::max<millis>(0, d - clock_.now_ms());
      wake = std::min(wake, now + std::chrono::milliseconds(in));
    }
    for (const auto& w : waiters_) wake = std::min(wake, w->deadline);
    for (const auto& w : key_waiters_) wake = std::min(wake, w->deadline);
    return std::max<steady::duration>(steady::duration::zero(), wake - now);
  }
  if (auto d = broker_.next_deadline()) {
    auto in = std::max<millis>(0, *d - clock_.now_ms());
    wake = std::min(wake, now + std::chrono::milliseconds(in));
  }
  for (const auto& w : waiters_) wake = std::min(wake, w->deadline);
  for (const auto& w : key_waiters_) wake = std::min(wake, w->deadline);
  if (!store_.health().writable) wake = std::min(wake, next_resume_);
  return std::max<steady::duration>(steady::duration::zero(), wake - now);
}

void shard::wake_waiters() {
  auto now = steady::now();
  // Parked consumers: try again where their topic got messages, answer
  // empty where their wait ran out.
  auto ready = broker_.take_ready_topics();
  if (!waiters_.empty()) {
    std::unordered_set<std::string> ready_set(ready.begin(), ready.end());
    std::vector<std::shared_ptr<waiter>> keep;
    for (auto& w : waiters_) {
      if (ready_set.count(w->cmd.topic)) {
        auto r = broker_.consume(w->cmd);
        if (!r.ok() || !r->empty()) {
          answer_durable(std::move(r), std::move(w->done));
          continue;
        }
      }
      if (w->deadline <= now) {
        if (w->wrote) {
          answer_when_durable(result<std::vector<delivery>>(std::vector<delivery>{}),
                              std::move(w->done));
        } else {
          w->done(std::vector<delivery>{});
        }
        continue;
      }
      keep.push_back(std::move(w));
    }
    waiters_.swap(keep);
    // Consumes above may have made more topics ready; they are picked up
    // in the next iteration.
  }
  auto committed = broker_.take_committed_keys();
  if (!key_waiters_.empty()) {
    std::vector<std::shared_ptr<key_waiter>> keep;
    for (auto& w : key_waiters_) {
      bool check = !committed.empty();
      if (check || w->deadline <= now) {
        auto r = broker_.get_key(w->q);
        if (!r.ok() || r->st == key_info::state::committed || w->deadline <= now) {
          // A committed key is durable once the ack that committed it is;
          // a failed sync of that ack is the answer, not "committed".
          answer_when_durable(std::move(r), std::move(w->done));
          continue;
        }
      }
      keep.push_back(std::move(w));
    }
    key_waiters_.swap(keep);
  }
}

void shard::end_iteration() {
  if (log_ != nullptr) return end_replicated_iteration();
  try_resume();
  broker_.tick();
  wake_waiters();
  end_round();
  iterations_.fetch_add(1, std::memory_order_relaxed);
}

void shard::release_waiters() {
  if (log_ != nullptr) return expire_replicated_waiters(true);
  for (auto& w : waiters_) {
    if (w->wrote) {
      answer_when_durable(result<std::vector<delivery>>(std::vector<delivery>{}),
                          std::move(w->done));
    } else {
      w->done(std::vector<delivery>{});
    }
  }
  for (auto& w : key_waiters_) answer_when_durable(broker_.get_key(w->q), std::move(w->done));
  waiters_.clear();
  key_waiters_.clear();
}

void shard::run_loop() {
  loop_thread_.store(std::this_thread::get_id());
  auto work = asio::make_work_guard(io_);
  while (!stop_loop_.load(std::memory_order_relaxed)) {
    // Sleep until an event (a socket, a posted job, an answer) or the next
    // deadline; then everything else that is ready, then the iteration's
    // end: one sync for what it wrote.
    io_.run_one_for(sleep_budget());
    io_.poll();
    end_iteration();
  }
  // Stopping: run what is queued (its answers are still owed), then
  // release parked waiters with what they have.
  io_.poll();
  release_waiters();
  end_iteration();
  work.reset();
  io_.poll();  // the answers released by the last sync
}

}  // namespace onceq
