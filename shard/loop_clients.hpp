#pragma once

// How many HTTP connections an event loop serves, and how many of them
// wait for the answer to a request they sent: what a shard's loop reads at
// the end of an iteration to decide where its round's WAL sync runs
// (shard/local_path.cpp). When every connection of the loop waits, no
// request can arrive during the sync that the syncer thread would let the
// loop apply meanwhile, so the loop syncs itself and saves the hand-over
// both ways.
//
// A service of the loop's execution context (Asio's registry, as
// shard/mailbox.hpp): http/ sessions count themselves in on the loop that
// runs them, and out when they leave it (close, or a move to another
// loop); they do not include shard/ for anything else.
//
// Thread safety: every member may be called from any thread (a session's
// last reference, and so its count-out, may drop on another thread).

#include <atomic>
#include <cstddef>

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

  void connected() noexcept { connected_.fetch_add(1, std::memory_order_relaxed); }
  void disconnected() noexcept { connected_.fetch_sub(1, std::memory_order_relaxed); }
  void request_sent() noexcept { waiting_.fetch_add(1, std::memory_order_relaxed); }
  void answered() noexcept { waiting_.fetch_sub(1, std::memory_order_relaxed); }

  std::size_t connections() const noexcept { return connected_.load(std::memory_order_relaxed); }
  std::size_t waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }
  // At least one connection, and every one waits for an answer.
  bool all_waiting() const noexcept {
    const std::size_t w = waiting();
    return w > 0 && w >= connections();
  }

 private:
  void shutdown() override {}

  std::atomic<std::size_t> connected_{0};
  std::atomic<std::size_t> waiting_{0};
};

}  // namespace onceq
