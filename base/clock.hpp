#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace onceq {

// Milliseconds since the Unix epoch: every timestamp the broker stores or
// answers (lease deadlines, committed_at, expires_at) is one of these.
using millis = std::int64_t;

// The source of time for the core. Thread-safe. The server uses
// system_clock; tests use manual_clock and never sleep.
class clock {
 public:
  virtual ~clock() = default;
  virtual millis now_ms() const = 0;
};

class system_clock final : public clock {
 public:
  millis now_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class manual_clock final : public clock {
 public:
  explicit manual_clock(millis start = 1'700'000'000'000) : now_(start) {}
  millis now_ms() const override { return now_.load(std::memory_order_acquire); }
  void advance(millis d) { now_.fetch_add(d, std::memory_order_acq_rel); }
  void set(millis t) { now_.store(t, std::memory_order_release); }

 private:
  std::atomic<millis> now_;
};

}  // namespace onceq
