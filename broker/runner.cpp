#include "broker/runner.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace onceq {

namespace {
using steady = std::chrono::steady_clock;
// Longest the core sleeps without a deadline: bounds how late a manual or
// adjusted clock is noticed.
constexpr auto k_idle_wait = std::chrono::milliseconds(200);
// How often the core asks a store that refuses writes to resume.
constexpr auto k_resume_every = std::chrono::milliseconds(500);
}  // namespace

struct runner::waiter {
  consume_cmd cmd;
  steady::time_point deadline;
  std::function<void(result<std::vector<delivery>>)> done;
  // The command wrote before it parked (acks carried on the consume): its
  // empty answer too waits for durability.
  bool wrote = false;
};

struct runner::key_waiter {
  key_query q;
  steady::time_point deadline;
  std::function<void(result<key_info>)> done;
};

runner::runner(broker& b, storage::store& store, const clock& time, runner_options opts)
    : broker_(b), store_(store), clock_(time), opts_(opts) {}

runner::~runner() {
  stop();
}

void runner::start() {
  std::lock_guard lk(mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "onceq-core");  // for top -H, perf, gdb
    loop();
  });
}

void runner::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Anything queued after the loop ended.
  std::deque<std::pair<job, reject>> rest;
  {
    std::lock_guard lk(mu_);
    rest.swap(queue_);
  }
  for (auto& [j, r] : rest) r(make_error(errc::unavailable, "server is shutting down"));
}

std::size_t runner::queue_depth() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

void runner::post_job(job j, reject r) {
  {
    std::unique_lock lk(mu_);
    if (stopping_ || !started_) {
      lk.unlock();
      r(make_error(errc::unavailable, "server is shutting down"));
      return;
    }
    if (queue_.size() >= opts_.max_queue) {
      lk.unlock();
      r(make_error(errc::resource_exhausted, "too many requests waiting for the broker"));
      return;
    }
    queue_.emplace_back(std::move(j), std::move(r));
  }
  cv_.notify_one();
}

// Answers a consume after its delivery records are durable.
void runner::answer_durable(result<std::vector<delivery>> r,
                            std::function<void(result<std::vector<delivery>>)> done) {
  if (!r.ok() || r->empty()) {
    done(std::move(r));
    return;
  }
  answer_when_durable(std::move(r), std::move(done));
}

void runner::after_durable(durable_fn fn) {
  round_.push_back(std::move(fn));
}

void runner::end_round() {
  if (round_.empty()) return;
  store_.when_durable([batch = std::move(round_)](result<void> durable) mutable {
    for (auto& fn : batch) fn(durable);
  });
  round_.clear();
}

void runner::consume(consume_cmd cmd, millis wait_ms,
                     std::function<void(result<std::vector<delivery>>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<waiter>(
      waiter{std::move(cmd), steady::now() + std::chrono::milliseconds(wait_ms), std::move(done)});
  auto rej = [w](error e) { w->done(std::move(e)); };
  post_job([this, w, wait_ms](broker& b) { consume_now(b, w, wait_ms); }, std::move(rej));
}

void runner::consume_now(broker& b, std::shared_ptr<waiter> w, millis wait_ms) {
  auto r = b.consume(w->cmd);
  if (r.ok() && r->empty() && wait_ms > 0) {
    waiters_.push_back(std::move(w));
    return;
  }
  if (w->wrote && r.ok()) {
    answer_when_durable(std::move(r), std::move(w->done));
  } else {
    answer_durable(std::move(r), std::move(w->done));
  }
}

void runner::consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                                std::function<void(result<acked_consume>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto shared_done = std::make_shared<std::function<void(result<acked_consume>)>>(std::move(done));
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

void runner::wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<key_waiter>(key_waiter{
      std::move(q), steady::now() + std::chrono::milliseconds(wait_ms), std::move(done)});
  auto rej = [w](error e) { w->done(std::move(e)); };
  post_job(
      [this, w, wait_ms](broker& b) {
        auto r = b.get_key(w->q);
        if (r.ok() && r->st != key_info::state::committed && wait_ms > 0) {
          key_waiters_.push_back(w);
          return;
        }
        // The state shown may come from a write of this very round (an ack
        // that committed the key): answered only once that write is durable.
        answer_when_durable(std::move(r), std::move(w->done));
      },
      std::move(rej));
}

void runner::try_resume() {
  auto now = steady::now();
  if (!store_.health().writable && now >= next_resume_) {
    next_resume_ = now + k_resume_every;
    auto r = store_.resume();
    // Reopened: writes that were not synced may be gone, so memory follows
    // the store. Not cleared yet: try again later.
    if (r.ok() && *r == storage::resume_outcome::reopened) needs_recover_ = true;
  }
  // A failed rebuild is tried again every round.
  if (needs_recover_) needs_recover_ = !broker_.recover().ok();
}

void runner::loop() {
  std::deque<std::pair<job, reject>> local;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      auto wake = steady::now() + k_idle_wait;
      if (auto d = broker_.next_deadline()) {
        auto in = std::max<millis>(0, *d - clock_.now_ms());
        wake = std::min(wake, steady::now() + std::chrono::milliseconds(in));
      }
      for (const auto& w : waiters_) wake = std::min(wake, w->deadline);
      for (const auto& w : key_waiters_) wake = std::min(wake, w->deadline);
      if (!store_.health().writable) wake = std::min(wake, next_resume_);
      cv_.wait_until(lk, wake, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      local.swap(queue_);
    }
    for (auto& [j, r] : local) j(broker_);
    local.clear();
    try_resume();
    broker_.tick();

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
      // on the next round.
    }
    auto committed = broker_.take_committed_keys();
    if (!key_waiters_.empty()) {
      std::vector<std::shared_ptr<key_waiter>> keep;
      for (auto& w : key_waiters_) {
        bool check = !committed.empty();
        if (check || w->deadline <= now) {
          auto r = broker_.get_key(w->q);
          if (!r.ok() || r->st == key_info::state::committed || w->deadline <= now) {
            // A committed key is durable once the ack that committed it is.
            after_durable([r = std::move(r), done = std::move(w->done)](result<void>) mutable {
              done(std::move(r));
            });
            continue;
          }
        }
        keep.push_back(std::move(w));
      }
      key_waiters_.swap(keep);
    }
    end_round();
  }
  // Shutting down: run what is queued (its answers are still owed), then
  // release parked waiters with what they have.
  {
    std::lock_guard lk(mu_);
    local.swap(queue_);
  }
  for (auto& [j, r] : local) j(broker_);
  end_round();
  for (auto& w : waiters_) w->done(std::vector<delivery>{});
  for (auto& w : key_waiters_) w->done(broker_.get_key(w->q));
  waiters_.clear();
  key_waiters_.clear();
}

}  // namespace onceq
