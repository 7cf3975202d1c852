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
  return s;
}

dlq_origin to_api(const storage::dlq_origin& d) {
  return dlq_origin{d.original_topic, d.original_partition, d.original_offset,
                    d.attempts,       d.last_error,         d.routed_at_ms};
}

}  // namespace onceq
