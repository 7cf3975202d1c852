#pragma once

// The API's fixed limits, in one place: the broker enforces them and http/
// reads them from here (docs/API.md, "Limits").

#include <cstddef>
#include <cstdint>

namespace onceq {

inline constexpr std::size_t k_max_batch = 1000;          // messages / acks per request
inline constexpr std::int64_t k_max_wait_ms = 60'000;     // wait_ms of consume and keys
inline constexpr std::size_t k_max_name_bytes = 200;      // topic, group, owner
inline constexpr std::uint32_t k_max_partitions = 1024;   // per topic
inline constexpr std::size_t k_max_key_fields = 8;        // idempotency_key_fields sources
inline constexpr std::size_t k_max_skip_groups = 16;      // produce skip_if_committed groups
inline constexpr std::size_t k_max_step_messages = 1000;  // messages one ack produces
// A derived key longer than this is stored as "sha256:<hex>".
inline constexpr std::size_t k_max_derived_key_bytes = 200;

}  // namespace onceq
