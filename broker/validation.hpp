#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "broker/commands.hpp"
#include "broker/limits.hpp"

namespace onceq {

// Domain rules for names and numbers, shared by every command. The HTTP edge
// checks JSON types; these check values. The name rules live here only:
// http/ asks these functions instead of writing them again.

// Topic names: k_topic_name_pattern, that is 1..k_max_name_bytes of
// letters, digits, '.', '_' and '-'.
inline constexpr std::string_view k_topic_name_pattern = "[A-Za-z0-9._-]{1,200}";
bool valid_topic_name(std::string_view name) noexcept;
result<void> validate_topic_name(std::string_view name);
// Group and owner: 1..k_max_name_bytes bytes.
bool valid_label(std::string_view value) noexcept;
result<void> validate_label(std::string_view what, std::string_view value);

// The dead letters of topic T go to the topic "dlq.T", made by the first
// one with T's settings; a token that covers T covers it too (http/auth).
inline constexpr std::string_view k_dlq_prefix = "dlq.";
std::string dlq_topic_of(std::string_view topic);
// Every setting >= 0, lease_ms > 0, key sources well formed.
result<void> validate_settings(const topic_settings& s);
// idempotency_key_fields: at most k_max_key_fields sources, each
// "envelope.<path>" or "value.<path>" with no empty path segment.
result<void> validate_key_fields(const std::vector<std::string>& fields);
// A value within [lo, hi]; the message names the field.
result<void> validate_range(std::string_view field, std::int64_t v, std::int64_t lo,
                            std::int64_t hi);

// min(backoff_ms * 2^(attempts-1), max_backoff_ms), saturating; max 0 = no cap.
millis retry_delay(std::int64_t attempts, millis backoff_ms, millis max_backoff_ms);

// Stable partitioning hash (FNV-1a 64): the same key maps to the same
// partition across restarts and builds.
std::uint64_t partition_hash(std::string_view key) noexcept;

}  // namespace onceq
