#pragma once

// How many HTTP connections an event loop serves, how many of them wait
// for the answer to a request they sent, and how many of the others have
// been idle a while: what a shard's loop reads at the end of an iteration
// to decide where its round's WAL sync runs (shard/local_path.cpp). When
// every connection of the loop waits, no request can arrive during the
// sync that the syncer thread would let the loop apply meanwhile, so the
// loop syncs itself and saves the hand-over both ways.
//
// A connection that has sent nothing for a while (a keep-alive connection
// of a metrics scraper, of a producer's pool) does not count against that:
// it is as unlikely to send during the next sync (a fraction of a
// millisecond) as at any other moment, and if it does, its request waits
// for that one sync. Without this, one idle connection on the loop kept
// every round on the syncer (docs/BENCHMARKS.md, "Twentieth round").
// Idle connections are counted by generation: the loop turns to a new
// generation each k_quiet_after (turn()); a connection idle since the
// generation before the last is quiet. So a connection is quiet after
// between one and two k_quiet_after of silence while the loop runs; a loop
// that slept turns once after its next iteration, so its first round
// after a long sleep still counts the connections that went idle before
// it (the syncer takes that round, as before this rule).
//
// A service of the loop's execution context (Asio's registry, as
// shard/mailbox.hpp): http/ sessions count themselves in on the loop that
// runs them, and out when they leave it (close, or a move to another
// loop); they do not include shard/ for anything else.
//
// Thread safety: every member may be called from any thread (a session's
// last reference, and so its count-out, may drop on another thread). A
// count-out racing turn() may leave a generation's count off by one; the
// count is dropped two turns later, and the rule it feeds only chooses the
// thread that syncs.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include <boost/asio/execution_context.hpp>

namespace onceq {

class loop_clients : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit loop_clients(boost::asio::execution_context& owner)
      : boost::asio::execution_context::service(owner) {}
  loop_clients(const loop_clients&) = delete;
  loop_clients& operator=(const loop_clients&) = delete;

  // The counter of ctx's loop, created on first use. Takes the registry's
  // lock: look it up once and keep the reference.
  static loop_clients& of(boost::asio::execution_context& ctx) {
    return boost::asio::use_service<loop_clients>(ctx);
  }

  // Each returns the generation in which the connection became idle, for
  // its next request_sent() or disconnected().
  std::uint64_t connected() noexcept {
    connected_.fetch_add(1, std::memory_order_relaxed);
    return went_idle();
  }
  std::uint64_t answered() noexcept {
    waiting_.fetch_sub(1, std::memory_order_relaxed);
    return went_idle();
  }
  // idle_since: what connected() or answered() returned last.
  void request_sent(std::uint64_t idle_since) noexcept {
    no_longer_idle(idle_since);
    waiting_.fetch_add(1, std::memory_order_relaxed);
  }
  // A connection leaves idle (its answer, if one was owed, came first).
  void disconnected(std::uint64_t idle_since) noexcept {
    no_longer_idle(idle_since);
    connected_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The loop, after each iteration: a new generation once k_quiet_after
  // has passed since the last one began.
  void turn(std::chrono::steady_clock::time_point now) noexcept {
    if (now < next_turn_) return;
    next_turn_ = now + k_quiet_after;
    const std::uint64_t next = generation_.load(std::memory_order_relaxed) + 1;
    idle_[next % 2].store(0, std::memory_order_relaxed);  // two generations ago: quiet now
    generation_.store(next, std::memory_order_relaxed);
  }

  std::size_t connections() const noexcept { return connected_.load(std::memory_order_relaxed); }
  std::size_t waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }
  // Idle connections that became idle in this generation or the last.
  std::size_t recently_idle() const noexcept {
    const auto a = idle_[0].load(std::memory_order_relaxed);
    const auto b = idle_[1].load(std::memory_order_relaxed);
    return static_cast<std::size_t>(std::max<std::int64_t>(a, 0) + std::max<std::int64_t>(b, 0));
  }
  // At least one connection waits, and every other one is quiet.
  bool all_waiting() const noexcept {
    const std::size_t w = waiting();
    return w > 0 && (w >= connections() || recently_idle() == 0);
  }

  static constexpr std::chrono::milliseconds k_quiet_after{100};

 private:
  void shutdown() override {}

  std::uint64_t went_idle() noexcept {
    const std::uint64_t g = generation_.load(std::memory_order_relaxed);
    idle_[g % 2].fetch_add(1, std::memory_order_relaxed);
    return g;
  }
  void no_longer_idle(std::uint64_t since) noexcept {
    const std::uint64_t g = generation_.load(std::memory_order_relaxed);
    if (since + 1 >= g) idle_[since % 2].fetch_sub(1, std::memory_order_relaxed);
  }

  std::atomic<std::size_t> connected_{0};
  std::atomic<std::size_t> waiting_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::int64_t> idle_[2] = {0, 0};         // by generation % 2
  std::chrono::steady_clock::time_point next_turn_{};  // the loop only
};

}  // namespace onceq
