// shard in a cluster (shard.hpp): commands proposed to the shard's log,
// reads where the replica's broker lives, long-polls and key waits parked on
// the loop and tried again when an applied entry may have changed their
// answer, and the leader's ticks.

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

#include <boost/asio/post.hpp>

#include "shard/shard.hpp"
#include "shard/waiters.hpp"

namespace onceq {

namespace {
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;
// Closest two ticks of the leader: lease expiry and backoff ends are this
// precise in a cluster, for at most 100 tick entries a second.
constexpr auto k_min_tick_gap = std::chrono::milliseconds(10);

error stopping() {
  return make_error(errc::unavailable, "server is shutting down");
}
}  // namespace

void shard::replica_read(bool fresh, std::function<void(broker&)> fn,
                         std::function<void(error)> fail) {
  if (draining_.load(std::memory_order_acquire) && fresh) return fail(stopping());
  log_->read(fresh, std::move(fn), std::move(fail));
}

void shard::propose(log_command cmd, shard_log::reply_fn done) {
  if (draining_.load(std::memory_order_acquire) || !started_.load(std::memory_order_acquire)) {
    return done(stopping());
  }
  log_->propose(log_entry{clock_.now_ms(), std::move(cmd)}, std::move(done));
}

void shard::replicated_consume(std::shared_ptr<waiter> w, log_command entry) {
  interest_.fetch_add(1, std::memory_order_relaxed);
  propose(std::move(entry), [this, w = std::move(w)](result<log_reply> r) mutable {
    asio::post(io_, [this, w = std::move(w), r = std::move(r)]() mutable {
      consumed(std::move(w), std::move(r));
    });
  });
}

void shard::consumed(std::shared_ptr<waiter> w, result<log_reply> r) {
  const bool first = !w->retried;
  w->retried = true;
  result<std::vector<delivery>> got = [&]() -> result<std::vector<delivery>> {
    if (first && w->on_acked) {
      auto a = reply_of<consume_after_acks_reply>(std::move(r));
      if (!a.ok()) return std::move(a).err();
      return w->on_acked(std::move(a));
    }
    return reply_of<std::vector<delivery>>(std::move(r));
  }();
  if (!got.ok() && !first && got.code() == errc::unavailable) {
    // A later poll of a long-poll failed (leadership moved, stopping): the
    // poll ends empty, the consumer asks again (at the new leader).
    got = std::vector<delivery>{};
  }
  if (!got.ok() || !got->empty() || steady::now() >= w->deadline ||
      draining_.load(std::memory_order_acquire)) {
    interest_.fetch_sub(1, std::memory_order_relaxed);
    return w->done(std::move(got));
  }
  waiters_.push_back(std::move(w));
}

void shard::replicated_wait_key(std::shared_ptr<key_waiter> w) {
  interest_.fetch_add(1, std::memory_order_relaxed);
  recheck_key(std::move(w), false);
}

void shard::recheck_key(std::shared_ptr<key_waiter> w, bool last) {
  auto back = [this, w, last](result<key_info> r) {
    asio::post(io_,
               [this, w, last, r = std::move(r)]() mutable { key_checked(w, std::move(r), last); });
  };
  replica_read(
      true, [w, back](broker& b) { back(b.get_key(w->q)); },
      [back](error e) { back(result<key_info>(std::move(e))); });
}

void shard::key_checked(std::shared_ptr<key_waiter> w, result<key_info> r, bool last) {
  if (!r.ok() || r->st == key_info::state::committed || last || steady::now() >= w->deadline ||
      draining_.load(std::memory_order_acquire)) {
    interest_.fetch_sub(1, std::memory_order_relaxed);
    return w->done(std::move(r));
  }
  key_waiters_.push_back(std::move(w));
}

void shard::on_applied(log_tag tag, std::string_view topic) {
  if (interest_.load(std::memory_order_relaxed) == 0) return;
  bool consumers = false, keys = false;
  switch (tag) {
    case log_tag::produce:
    case log_tag::create_topic:
    case log_tag::delete_topic:
    case log_tag::nack:
    case log_tag::redrive:
    case log_tag::replay:
      consumers = true;
      break;
    case log_tag::tick:
      consumers = keys = true;
      break;
    case log_tag::ack:
    case log_tag::ack_batch:
    case log_tag::consume_after_acks:
      keys = true;
      break;
    case log_tag::consume:
    case log_tag::extend:
      break;
  }
  if (!consumers && !keys) return;
  {
    std::lock_guard lock(wake_mu_);
    if (consumers) {
      if (topic.empty()) {
        wake_all_ = true;
      } else if (!wake_all_) {
        ready_topics_.emplace_back(topic);
      }
    }
    wake_keys_ = wake_keys_ || keys;
  }
  if (!wake_posted_.exchange(true)) asio::post(io_, [this] { wake_replicated(); });
}

void shard::wake_replicated() {
  std::vector<std::string> topics;
  bool all = false, keys = false;
  {
    std::lock_guard lock(wake_mu_);
    wake_posted_.store(false);
    topics.swap(ready_topics_);
    all = std::exchange(wake_all_, false);
    keys = std::exchange(wake_keys_, false);
  }
  if (!waiters_.empty() && (all || !topics.empty())) {
    std::unordered_set<std::string> ready(topics.begin(), topics.end());
    std::vector<std::shared_ptr<waiter>> keep;
    for (auto& w : waiters_) {
      if (all || ready.count(w->cmd.topic) != 0) {
        // Tried again as a plain consume: its acks, if any, are applied.
        interest_.fetch_sub(1, std::memory_order_relaxed);
        log_command again = w->cmd;
        replicated_consume(std::move(w), std::move(again));
      } else {
        keep.push_back(std::move(w));
      }
    }
    waiters_.swap(keep);
  }
  if (keys && !key_waiters_.empty()) {
    auto pending = std::move(key_waiters_);
    key_waiters_.clear();
    for (auto& w : pending) recheck_key(std::move(w), false);
  }
}

void shard::expire_replicated_waiters(bool all) {
  const auto now = steady::now();
  std::vector<std::shared_ptr<waiter>> keep;
  for (auto& w : waiters_) {
    if (all || w->deadline <= now) {
      interest_.fetch_sub(1, std::memory_order_relaxed);
      w->done(std::vector<delivery>{});
    } else {
      keep.push_back(std::move(w));
    }
  }
  waiters_.swap(keep);
  std::vector<std::shared_ptr<key_waiter>> keep_keys, last;
  for (auto& w : key_waiters_) {
    (all || w->deadline <= now ? last : keep_keys).push_back(std::move(w));
  }
  key_waiters_.swap(keep_keys);
  // The state as it is now is the answer of a wait that ran out.
  for (auto& w : last) recheck_key(std::move(w), true);
}

void shard::end_replicated_iteration() {
  // The leader fires the timers: a tick entry, when the broker's earliest
  // deadline (as of the last apply) has passed, one at a time.
  const auto now = steady::now();
  if (!tick_in_flight_ && !draining_.load(std::memory_order_acquire) &&
      now - last_tick_ >= k_min_tick_gap && log_->leads()) {
    const millis due = log_->next_deadline();
    if (due >= 0 && due <= clock_.now_ms()) {
      tick_in_flight_ = true;
      last_tick_ = now;
      propose(tick_cmd{},
              [this](result<log_reply>) { asio::post(io_, [this] { tick_in_flight_ = false; }); });
    }
  }
  expire_replicated_waiters(false);
  iterations_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace onceq
