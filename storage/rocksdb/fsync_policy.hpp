#pragma once

#include <string>
#include <string_view>

#include "base/clock.hpp"
#include "base/result.hpp"

namespace onceq::storage {

// When a write counts as durable (spec: --fsync always|interval:<ms>|none).
struct fsync_policy {
  enum class mode { always, interval, none };
  static constexpr millis k_max_interval_ms = 60'000;

  mode kind = mode::always;  // Default: always (synced before each answer)
  millis interval_ms = 0;    // for mode::interval

  // Parses "always", "none" or "interval:<ms>" (ms in 1..60000).
  static result<fsync_policy> parse(std::string_view text);
  std::string to_string() const;
};

}  // namespace onceq::storage
