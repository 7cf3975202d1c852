#include "broker/records.hpp"

namespace onceq {

storage::topic_settings to_record(const topic_settings& s) {
  storage::topic_settings r;
  r.lease_ms = s.lease_ms;
  r.max_attempts = s.max_attempts;
  r.backoff_ms = s.backoff_ms;
  r.max_backoff_ms = s.max_backoff_ms;
  r.key_ttl_ms = s.key_ttl_ms;
  r.dedup_window_ms = s.dedup_window_ms;
  r.retention_ms = s.retention_ms;
  r.max_backlog_messages = s.max_backlog_messages;
  r.max_backlog_bytes = s.max_backlog_bytes;
  r.max_inflight = s.max_inflight;
  r.idempotency_key_fields = s.idempotency_key_fields;
  r.idempotency_key_include_topic = s.idempotency_key_include_topic;
  r.idempotency_key_optional = s.idempotency_key_optional;
  r.dedup_by_content = s.dedup_by_content;
  r.key_conflict = static_cast<std::uint8_t>(s.key_conflict);
  r.key_history = s.key_history;
  r.replay_window_ms = s.replay_window_ms;
  r.ordering = static_cast<std::uint8_t>(s.ordering);
  return r;
}

topic_settings to_api(const storage::topic_settings& r) {
  topic_settings s;
  s.lease_ms = r.lease_ms;
  s.max_attempts = r.max_attempts;
  s.backoff_ms = r.backoff_ms;
  s.max_backoff_ms = r.max_backoff_ms;
  s.key_ttl_ms = r.key_ttl_ms;
  s.dedup_window_ms = r.dedup_window_ms;
  s.retention_ms = r.retention_ms;
  s.max_backlog_messages = r.max_backlog_messages;
  s.max_backlog_bytes = r.max_backlog_bytes;
  s.max_inflight = r.max_inflight;
  s.idempotency_key_fields = r.idempotency_key_fields;
  s.idempotency_key_include_topic = r.idempotency_key_include_topic;
  s.idempotency_key_optional = r.idempotency_key_optional;
  s.dedup_by_content = r.dedup_by_content;
  s.key_conflict =
      r.key_conflict == 1 ? topic_settings::conflict::supersede : topic_settings::conflict::hold;
  s.key_history = r.key_history;
  s.replay_window_ms = r.replay_window_ms;
  s.ordering =
      r.ordering == 1 ? topic_settings::ordering_mode::key : topic_settings::ordering_mode::none;
  return s;
}

}  // namespace onceq
