#include "shard/shard.hpp"

#include <pthread.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include <fmt/format.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "shard/local_path.hpp"
#include "shard/replicated_path.hpp"

namespace onceq {

namespace {
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

std::unique_ptr<apply_path> path_for(shard& s, broker& b, storage::store& store, const clock& time,
                                     shard_log* log) {
  if (log == nullptr) return std::make_unique<local_path>(s, b, store, time);
  return std::make_unique<replicated_path>(s, *log, store, time);
}
}  // namespace

shard::shard(std::uint32_t id, broker& b, storage::store& store, const clock& time,
             shard_options opts, shard_log* log)
    : id_(id),
      broker_(b),
      store_(store),
      clock_(time),
      opts_(opts),
      path_(path_for(*this, b, store, time, log)) {}

shard::~shard() {
  stop();
}

bool shard::on_loop() const noexcept {
  return loop_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

void shard::start() {
  if (started_.exchange(true)) return;
  path_->start();
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
    expire_waiters(true);
    path_->flush();
  });
}

void shard::stop() {
  drain();
  // What the path still holds (the reader thread's reads) is answered
  // first, through the loop.
  path_->stop();
  if (!thread_.joinable()) return;
  stop_loop_.store(true);
  asio::post(io_, [] {});  // wakes the loop
  thread_.join();
}

std::optional<error> shard::refusal() const {
  if (draining_.load(std::memory_order_acquire) || !started_.load(std::memory_order_acquire)) {
    return make_error(errc::unavailable, "server is shutting down");
  }
  return std::nullopt;
}

void shard::consume(consume_cmd cmd, millis wait_ms,
                    std::function<void(result<std::vector<delivery>>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<consume_waiter>();
  w->cmd = std::move(cmd);
  w->deadline = steady::now() + std::chrono::milliseconds(wait_ms);
  w->done = std::move(done);
  open_waits_.fetch_add(1, std::memory_order_relaxed);
  path_->consume(std::move(w), true);
}

void shard::consume_after_acks(ack_batch_cmd acks, consume_cmd cmd, millis wait_ms,
                               std::function<void(result<consume_after_acks_reply>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<consume_waiter>();
  w->cmd = std::move(cmd);
  w->deadline = steady::now() + std::chrono::milliseconds(wait_ms);
  w->acks = std::move(acks);
  w->done_acked = std::move(done);
  open_waits_.fetch_add(1, std::memory_order_relaxed);
  path_->consume(std::move(w), true);
}

void shard::wait_key(key_query q, millis wait_ms, std::function<void(result<key_info>)> done) {
  wait_ms = std::clamp<millis>(wait_ms, 0, opts_.max_wait_ms);
  auto w = std::make_shared<key_waiter>(key_waiter{
      std::move(q), steady::now() + std::chrono::milliseconds(wait_ms), std::move(done)});
  open_waits_.fetch_add(1, std::memory_order_relaxed);
  path_->check_key(std::move(w), true, false);
}

void shard::consumed(std::shared_ptr<consume_waiter> w, result<std::vector<delivery>> r) {
  if (!r.ok() || !r->empty() || steady::now() >= w->deadline || draining()) {
    return answer(std::move(w), std::move(r));
  }
  waiters_.push_back(std::move(w));
}

void shard::key_checked(std::shared_ptr<key_waiter> w, result<key_info> r, bool last) {
  if (!r.ok() || r->st == key_info::state::committed || last || steady::now() >= w->deadline ||
      draining()) {
    return answer(std::move(w), std::move(r));
  }
  key_waiters_.push_back(std::move(w));
}

void shard::answer(std::shared_ptr<consume_waiter> w, result<std::vector<delivery>> r) {
  open_waits_.fetch_sub(1, std::memory_order_relaxed);
  // Deliveries are leases the store recorded, and acks carried on the
  // consume wrote: either answer waits until that is durable.
  if (r.ok() && (w->wrote || !r->empty())) {
    answer_when_durable(std::move(r), [w = std::move(w)](result<std::vector<delivery>> x) mutable {
      w->finish(std::move(x));
    });
    return;
  }
  w->finish(std::move(r));
}

void shard::answer(std::shared_ptr<key_waiter> w, result<key_info> r) {
  open_waits_.fetch_sub(1, std::memory_order_relaxed);
  // The state shown may come from a write of this very iteration (an ack
  // that committed the key): answered only once that write is durable; a
  // failed sync of that ack is the answer, not "committed".
  answer_when_durable(std::move(r), std::move(w->done));
}

void shard::wake(const std::vector<std::string>& topics, bool all, bool keys) {
  if (!waiters_.empty() && (all || !topics.empty())) {
    const std::unordered_set<std::string_view> ready(topics.begin(), topics.end());
    auto parked = std::move(waiters_);
    waiters_.clear();
    for (auto& w : parked) {
      // A try that finds nothing parks it again (consumed).
      if (all || ready.count(w->cmd.topic) != 0) {
        path_->consume(std::move(w), false);
      } else {
        waiters_.push_back(std::move(w));
      }
    }
  }
  if (keys && !key_waiters_.empty()) {
    auto parked = std::move(key_waiters_);
    key_waiters_.clear();
    for (auto& w : parked) path_->check_key(std::move(w), false, false);
  }
}

void shard::expire_waiters(bool all) {
  const auto now = steady::now();
  if (!waiters_.empty()) {
    auto parked = std::move(waiters_);
    waiters_.clear();
    for (auto& w : parked) {
      if (all || w->deadline <= now) {
        answer(std::move(w), std::vector<delivery>{});
      } else {
        waiters_.push_back(std::move(w));
      }
    }
  }
  if (!key_waiters_.empty()) {
    auto parked = std::move(key_waiters_);
    key_waiters_.clear();
    for (auto& w : parked) {
      // The state as it is now is the answer of a wait that ran out.
      if (all || w->deadline <= now) {
        path_->check_key(std::move(w), false, true);
      } else {
        key_waiters_.push_back(std::move(w));
      }
    }
  }
}

steady::duration shard::sleep_budget() const {
  const auto now = steady::now();
  auto wake = path_->wake_by(now);
  for (const auto& w : waiters_) wake = std::min(wake, w->deadline);
  for (const auto& w : key_waiters_) wake = std::min(wake, w->deadline);
  return std::max<steady::duration>(steady::duration::zero(), wake - now);
}

void shard::end_iteration() {
  path_->end_iteration();
  expire_waiters(false);
  path_->flush();
  iterations_.fetch_add(1, std::memory_order_relaxed);
}

void shard::run_loop() {
  loop_thread_.store(std::this_thread::get_id());
  auto work = asio::make_work_guard(io_);
  while (!stop_loop_.load(std::memory_order_relaxed)) {
    // Sleep until an event (a socket, a posted job, an answer) or the next
    // deadline; then everything else that is ready, then the iteration's
    // end: one sync for what it wrote.
    // Between handlers, what they wrote goes to an idle syncer at once
    // rather than at the iteration's end (group commit: while a sync runs,
    // the next one's writes gather).
    if (io_.run_one_for(sleep_budget()) != 0) path_->flush_if_disk_idle();
    while (io_.poll_one() != 0) path_->flush_if_disk_idle();
    end_iteration();
    // One clock read for both: the load's window and the connections'
    // generation (loop_clients::turn), which the next iteration's flush reads.
    const auto now = steady::now();
    load_.sample(now);
    clients_.turn(now);
  }
  // Stopping: run what is queued (its answers are still owed), then
  // release parked waiters with what they have.
  io_.poll();
  expire_waiters(true);
  end_iteration();
  work.reset();
  io_.poll();  // the answers released by the last sync
}

}  // namespace onceq
