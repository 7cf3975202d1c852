#pragma once

#include <cstddef>
#include <cstdint>

#include "broker/limits.hpp"

namespace onceq {

struct broker_options {
  std::uint32_t max_partitions = k_max_partitions;  // Default: 1024 per topic
  std::size_t max_batch = k_max_batch;              // Default: 1000 messages / acks per request
  std::int64_t max_lease_ms = 3'600'000;            // Default: 1 hour
  std::int64_t max_delay_ms = 31'536'000'000;       // Default: 365 days (delay_ms, nack delay_ms)
  // Recently produced messages kept in memory so that consumers near the
  // tail do not read them back from the store. Default: 32 MiB.
  std::size_t message_cache_bytes = 32ull << 20;
};

}  // namespace onceq
