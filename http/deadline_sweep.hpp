#pragma once

// Connection timeouts without a timer per operation: a connection sets a
// deadline on itself (a relaxed atomic store) whenever it starts waiting,
// and one timer per io_context sweeps every registered deadline once per
// period. Redis's serverCron closes idle clients the same way.
//
// A sweep holds each due connection (hold()) and calls expire_if_due(now),
// which must re-check the deadline on the connection's own executor: it may
// have moved on meanwhile. The timer runs only while connections are
// registered. A mutex, uncontended when one thread runs the io_context (a
// shard's loop), keeps it right when several do (server's non-pooled mode).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/execution_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace onceq::http {

namespace asio = boost::asio;

// Nanoseconds of the steady clock: what deadlines are in.
std::int64_t steady_now_ns();

class timed {
 public:
  virtual ~timed() = default;
  // A hold on the connection; null if it is being destroyed.
  virtual std::shared_ptr<timed> hold() = 0;
  // Called by the sweep (any thread) when the deadline read was <= now.
  virtual void expire_if_due(std::int64_t now_ns) = 0;

  void set_deadline_after(std::chrono::nanoseconds d) {
    deadline_ns_.store(steady_now_ns() + d.count(), std::memory_order_relaxed);
  }
  void clear_deadline() { deadline_ns_.store(0, std::memory_order_relaxed); }
  // True if a deadline is set and has passed at now_ns.
  bool due(std::int64_t now_ns) const {
    const std::int64_t d = deadline_ns_.load(std::memory_order_relaxed);
    return d != 0 && d <= now_ns;
  }

 private:
  std::atomic<std::int64_t> deadline_ns_{0};  // 0: none
};

class deadline_sweep final : public asio::execution_context::service {
 public:
  using key_type = deadline_sweep;
  static inline asio::execution_context::id id;

  // ctx must be an io_context.
  explicit deadline_sweep(asio::execution_context& ctx);

  // The sweep's period becomes at most period.
  void add(timed* t, std::chrono::milliseconds period);
  void remove(timed* t);

 private:
  void shutdown() override;
  void arm();  // under mu_
  void sweep();

  std::mutex mu_;
  asio::steady_timer timer_;
  std::vector<timed*> members_;
  std::chrono::milliseconds period_{250};
  bool armed_ = false;
  bool stopped_ = false;
};

}  // namespace onceq::http
