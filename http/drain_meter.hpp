#pragma once

// How fast the core is answering, as seen from the HTTP edge: the Retry-After
// of the queue-full 429 is the time the commands queued now need at that
// rate, instead of a constant.
//
// It counts finished requests that needed the core (one request is one
// command, a batch included) in windows of about a second. The estimate is
// only offered while it is fresh: a window that ended long ago, or one that
// spanned an idle spell, says nothing about the queue now.
//
// Thread safety: every member may be called from any thread (a mutex; one
// uncontended lock per request).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

#include "base/clock.hpp"

namespace onceq::http {

class drain_meter {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr std::chrono::milliseconds k_window{1000};
  static constexpr millis k_min_ms = 100;     // never invite an instant stampede
  static constexpr millis k_max_ms = 60'000;  // a hint, not a ban

  void completed(time_point now) {
    std::lock_guard lock(mu_);
    if (started_ && now - window_start_ >= k_window) {
      const auto span = now - window_start_;
      // A window stretched by idle time would report a rate far too low.
      fresh_ = span <= 2 * k_window && done_ > 0;
      if (fresh_) {
        rate_per_s_ = static_cast<double>(done_) / std::chrono::duration<double>(span).count();
        measured_at_ = now;
      }
      done_ = 0;
      window_start_ = now;
    }
    if (!started_) {
      started_ = true;
      window_start_ = now;
    }
    ++done_;
  }

  // The time for depth queued commands to run at the recent rate, clamped
  // to [k_min_ms, k_max_ms]; nullopt without a recent measurement.
  std::optional<millis> drain_ms(std::size_t depth, time_point now) const {
    std::lock_guard lock(mu_);
    if (!fresh_ || now - measured_at_ > 3 * k_window || rate_per_s_ <= 0) return std::nullopt;
    const double ms = static_cast<double>(depth) * 1000.0 / rate_per_s_;
    return std::clamp(static_cast<millis>(ms), k_min_ms, k_max_ms);
  }

 private:
  mutable std::mutex mu_;
  bool started_ = false;
  time_point window_start_{};
  std::uint64_t done_ = 0;  // completions since window_start_
  bool fresh_ = false;      // the last closed window measured a rate
  double rate_per_s_ = 0;
  time_point measured_at_{};
};

}  // namespace onceq::http
