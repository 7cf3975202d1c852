#include "shard/replicated_path.hpp"

#include <algorithm>
#include <utility>

#include <boost/asio/post.hpp>

#include "shard/shard.hpp"

namespace onceq {

namespace {
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;
// How often the loop looks whether this node leads (it then proposes the
// ticks).
constexpr auto k_idle_wait = std::chrono::milliseconds(50);
// Closest two ticks of the leader: lease expiry and backoff ends are this
// precise in a cluster, for at most 100 tick entries a second.
constexpr auto k_min_tick_gap = std::chrono::milliseconds(10);

error stopping() {
  return make_error(errc::unavailable, "server is shutting down");
}
}  // namespace

replicated_path::replicated_path(shard& s, shard_log& log, storage::store& store, const clock& time)
    : shard_(s), log_(log), store_(store), clock_(time) {
  log_.on_applied([this](log_tag tag, std::string_view topic) { on_applied(tag, topic); });
}

void replicated_path::propose(log_command cmd, reply_fn done) {
  if (auto e = shard_.refusal()) return done(std::move(*e));
  log_.propose(log_entry{clock_.now_ms(), std::move(cmd)}, std::move(done));
}

void replicated_path::write(log_command cmd, reply_fn done) {
  propose(std::move(cmd), std::move(done));
}

void replicated_path::read(bool fresh, std::unique_ptr<broker_job> job) {
  if (fresh && shard_.draining()) return job->refuse(stopping());
  std::shared_ptr<broker_job> j(std::move(job));
  // The replica's store never reads from memory only: run() ends.
  log_.read(
      fresh, [j](broker& b) { j->run(b); }, [j](error e) { j->refuse(std::move(e)); });
}

void replicated_path::consume(std::shared_ptr<consume_waiter> w, bool first) {
  // The first try of a consume with acks is one entry that acks and
  // consumes (command_traits<consume_after_acks_cmd>); a long-poll after
  // it consumes alone.
  const bool acks = w->acks.has_value();
  log_command cmd =
      acks ? log_command(consume_after_acks_cmd{std::move(*w->acks), w->cmd}) : log_command(w->cmd);
  w->acks.reset();
  propose(std::move(cmd), [this, w = std::move(w), first, acks](result<log_reply> r) mutable {
    asio::post(shard_.io_, [this, w = std::move(w), r = std::move(r), first, acks]() mutable {
      if (!acks) return consumed(std::move(w), std::move(r), first);
      auto both = reply_as<consume_after_acks_reply>(std::move(r));
      if (!both.ok()) return shard_.consumed(std::move(w), std::move(both).err());
      // The acks are applied: from now on the answer carries their outcomes.
      w->acked = std::move(both->acks);
      w->wrote = true;
      shard_.consumed(std::move(w), std::move(both->deliveries));
    });
  });
}

void replicated_path::consumed(std::shared_ptr<consume_waiter> w, result<log_reply> r, bool first) {
  auto got = reply_as<std::vector<delivery>>(std::move(r));
  if (!got.ok() && !first && got.code() == errc::unavailable) {
    // A later poll of a long-poll failed (leadership moved, stopping): the
    // poll ends empty, the consumer asks again (at the new leader).
    got = std::vector<delivery>{};
  }
  shard_.consumed(std::move(w), std::move(got));
}

void replicated_path::check_key(std::shared_ptr<key_waiter> w, bool /*first*/, bool last) {
  auto back = [this, w, last](result<key_info> r) {
    asio::post(shard_.io_, [this, w, last, r = std::move(r)]() mutable {
      shard_.key_checked(w, std::move(r), last);
    });
  };
  if (shard_.draining()) return back(stopping());
  log_.read(
      true, [w, back](broker& b) { back(b.get_key(w->q)); },
      [back](error e) { back(result<key_info>(std::move(e))); });
}

void replicated_path::on_applied(log_tag tag, std::string_view topic) {
  if (shard_.open_waits() == 0) return;
  bool consumers = false, keys = false;
  switch (tag) {
    case log_tag::produce:
    case log_tag::create_topic:
    case log_tag::delete_topic:
    case log_tag::nack:
    case log_tag::redrive:
    case log_tag::replay:
    case log_tag::outbox_append:
      consumers = true;
      break;
    case log_tag::tick:
    // An ack frees the next message of its key (ordering "key") and may
    // produce a workflow step's next messages.
    case log_tag::ack:
    case log_tag::ack_batch:
    case log_tag::consume_after_acks:
      consumers = keys = true;
      break;
    case log_tag::consume:
    case log_tag::extend:
    case log_tag::outbox_done:
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
  if (!wake_posted_.exchange(true)) asio::post(shard_.io_, [this] { wake(); });
}

void replicated_path::wake() {
  std::vector<std::string> topics;
  bool all = false, keys = false;
  {
    std::lock_guard lock(wake_mu_);
    wake_posted_.store(false);
    topics.swap(ready_topics_);
    all = std::exchange(wake_all_, false);
    keys = std::exchange(wake_keys_, false);
  }
  shard_.wake(topics, all, keys);
}

void replicated_path::end_iteration() {
  // The leader fires the timers: a tick entry, when the broker's earliest
  // deadline (as of the last apply) has passed, one at a time.
  const auto now = steady::now();
  if (!tick_in_flight_ && !shard_.draining() && now - last_tick_ >= k_min_tick_gap &&
      log_.leads()) {
    const millis due = log_.next_deadline();
    if (due >= 0 && due <= clock_.now_ms()) {
      tick_in_flight_ = true;
      last_tick_ = now;
      propose(tick_cmd{}, [this](result<log_reply>) {
        asio::post(shard_.io_, [this] { tick_in_flight_ = false; });
      });
    }
  }
}

steady::time_point replicated_path::wake_by(steady::time_point now) const {
  auto wake = now + k_idle_wait;
  // The broker is not ours to read: the log publishes its next deadline
  // (the leader's tick).
  if (const millis d = log_.next_deadline(); d >= 0 && log_.leads() && !tick_in_flight_) {
    auto in = std::max<millis>(0, d - clock_.now_ms());
    wake = std::min(wake, now + std::chrono::milliseconds(in));
  }
  return wake;
}

storage::store_health replicated_path::health() const {
  // A node whose Raft log cannot be written takes no part in commits: it
  // says so (/v1/healthz: 503), as one whose store refuses writes does.
  storage::store_health h = store_.health();
  if (!h.writable) return h;
  return log_.log_health();
}

}  // namespace onceq
