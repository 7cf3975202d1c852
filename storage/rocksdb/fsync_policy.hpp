#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace onceq::storage {

// When a write counts as durable (spec: --fsync always|interval:<ms>|none).
struct fsync_policy {
  enum class mode { always, interval, none };
  static constexpr std::chrono::milliseconds k_max_interval{60'000};

  mode kind = mode::always;              // Default: always (synced before each answer)
  std::chrono::milliseconds interval{};  // for mode::interval: 1 ms .. k_max_interval

  // Parses "always", "none" or "interval:<ms>" (ms in 1..60000).
  static result<fsync_policy> parse(std::string_view text);
  std::string to_string() const;
};

}  // namespace onceq::storage
