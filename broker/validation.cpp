#include "broker/validation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace onceq {

namespace {

bool name_length_ok(std::string_view name) noexcept {
  return !name.empty() && name.size() <= k_max_name_bytes;
}

bool topic_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

bool valid_topic_name(std::string_view name) noexcept {
  return name_length_ok(name) && std::all_of(name.begin(), name.end(), topic_name_char);
}

result<void> validate_topic_name(std::string_view name) {
  if (!name_length_ok(name))
    return make_error(errc::invalid_argument, "topic name must be 1..200 characters");
  if (!valid_topic_name(name))
    return make_error(errc::invalid_argument,
                      "topic name may contain only letters, digits, '.', '_' and '-'");
  return {};
}

bool valid_label(std::string_view value) noexcept {
  return name_length_ok(value);
}

result<void> validate_label(std::string_view what, std::string_view value) {
  if (!valid_label(value))
    return make_error(errc::invalid_argument, fmt::format("{} must be 1..200 bytes", what));
  return {};
}

std::string dlq_topic_of(std::string_view topic) {
  std::string out(k_dlq_prefix);
  out += topic;
  return out;
}

result<void> validate_range(std::string_view field, std::int64_t v, std::int64_t lo,
                            std::int64_t hi) {
  if (v < lo || v > hi)
    return make_error(errc::invalid_argument,
                      fmt::format("{} must be between {} and {}, got {}", field, lo, hi, v));
  return {};
}

result<void> validate_settings(const topic_settings& s) {
  constexpr auto k_max = std::numeric_limits<std::int64_t>::max() / 4;
  ONCEQ_TRY(validate_range("lease_ms", s.lease_ms, 1, k_max));
  ONCEQ_TRY(validate_range("max_attempts", s.max_attempts, 0, 1'000'000));
  ONCEQ_TRY(validate_range("backoff_ms", s.backoff_ms, 0, k_max));
  ONCEQ_TRY(validate_range("max_backoff_ms", s.max_backoff_ms, 0, k_max));
  ONCEQ_TRY(validate_range("key_ttl_ms", s.key_ttl_ms, 0, k_max));
  ONCEQ_TRY(validate_range("dedup_window_ms", s.dedup_window_ms, 0, k_max));
  ONCEQ_TRY(validate_range("retention_ms", s.retention_ms, 0, k_max));
  ONCEQ_TRY(validate_range("max_backlog_messages", s.max_backlog_messages, 0, k_max));
  ONCEQ_TRY(validate_range("max_backlog_bytes", s.max_backlog_bytes, 0, k_max));
  ONCEQ_TRY(validate_range("max_inflight", s.max_inflight, 0, k_max));
  ONCEQ_TRY(validate_range("replay_window_ms", s.replay_window_ms, 0, k_max));
  ONCEQ_TRY(validate_key_fields(s.idempotency_key_fields));
  if (s.key_conflict != topic_settings::conflict::hold &&
      s.key_conflict != topic_settings::conflict::supersede)
    return make_error(errc::invalid_argument, "key_conflict must be 'hold' or 'supersede'");
  return {};
}

result<void> validate_key_fields(const std::vector<std::string>& fields) {
  if (fields.size() > k_max_key_fields)
    return make_error(
        errc::invalid_argument,
        fmt::format("idempotency_key_fields holds at most {} sources", k_max_key_fields));
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string_view f = fields[i];
    auto bad = [&](std::string_view why) {
      return make_error(errc::invalid_argument,
                        fmt::format("idempotency_key_fields[{}] '{}' {}", i, f, why));
    };
    if (f.size() > k_max_name_bytes) return bad("is longer than 200 bytes");
    auto dot = f.find('.');
    auto root = f.substr(0, dot);
    if (root != "envelope" && root != "value")
      return bad("must start with 'envelope.' or 'value.'");
    if (dot == std::string_view::npos) return bad("names no field after its root");
    // Every segment of the dot path must be non-empty: "value.a..b" is a typo.
    std::string_view path = f.substr(dot + 1);
    for (;;) {
      auto next = path.find('.');
      if (path.substr(0, next).empty()) return bad("has an empty path segment");
      if (next == std::string_view::npos) break;
      path.remove_prefix(next + 1);
    }
    if (root == "envelope" && f == "envelope.idempotency_key")
      return bad("is the explicit key itself");
  }
  return {};
}

millis retry_delay(std::int64_t attempts, millis backoff_ms, millis max_backoff_ms) {
  if (backoff_ms <= 0) return 0;
  constexpr millis k_ceiling = std::numeric_limits<millis>::max() / 4;
  millis d = backoff_ms;
  for (std::int64_t i = 1; i < attempts && d < k_ceiling; ++i) d *= 2;
  if (d > k_ceiling) d = k_ceiling;
  if (max_backoff_ms > 0 && d > max_backoff_ms) d = max_backoff_ms;
  return d;
}

std::uint64_t partition_hash(std::string_view key) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace onceq
