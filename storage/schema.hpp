#pragma once

// The key layout and record encoding of every key space, shared by all
// store implementations (see docs/DESIGN.md "RocksDB key layout").
//
// Keys use fixed-width big-endian integers so that byte order is numeric
// order; records use a small versioned binary encoding (codec below).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.hpp"
#include "base/result.hpp"
#include "storage/batch.hpp"
#include "storage/dlq_origin.hpp"

namespace onceq::storage {

using topic_id = std::uint32_t;
using group_id = std::uint32_t;

// A topic's settings as stored: onceq::topic_settings (broker/commands.hpp)
// is the one definition of what each means and of its default; the broker
// converts (broker/records.cpp) and every record carries every field of its
// version. A field that an older version lacks decodes as zero (0 = no
// limit, false, none), so the members start at zero rather than at the
// API's defaults.
struct topic_settings {
  millis lease_ms = 0;
  std::int64_t max_attempts = 0;
  millis backoff_ms = 0;
  millis max_backoff_ms = 0;
  millis key_ttl_ms = 0;
  millis dedup_window_ms = 0;
  millis retention_ms = 0;
  // Version 2.
  std::int64_t max_backlog_messages = 0;
  std::int64_t max_backlog_bytes = 0;
  std::int64_t max_inflight = 0;
  // Version 3.
  std::vector<std::string> idempotency_key_fields;
  bool idempotency_key_include_topic = false;
  bool idempotency_key_optional = false;
  bool dedup_by_content = false;
  std::uint8_t key_conflict = 0;  // 0 = hold; 1 = supersede
  bool key_history = false;
  // Version 4.
  millis replay_window_ms = 0;
  // Version 5.
  std::uint8_t ordering = 0;  // 0 = none; 1 = key
  friend bool operator==(const topic_settings&, const topic_settings&) = default;
};

struct topic_record {
  topic_id id = 0;
  std::string name;
  std::uint32_t partitions = 1;
  topic_settings settings;
  millis created_at_ms = 0;
};

struct group_record {
  topic_id topic = 0;
  group_id id = 0;
  std::string name;
};

struct message_record {
  millis produced_at_ms = 0;
  millis deliver_at_ms = 0;  // 0: at once (envelope.delay_ms)
  std::optional<std::string> key;
  std::string value;
  std::string envelope_json;  // the envelope as the producer sent it; "" if none
  std::string idempotency_key;
  std::string tenant_id;
  std::int64_t key_ttl_ms = -1;      // -1: the topic's
  std::int64_t max_attempts = -1;    // -1: the topic's (retry_policy)
  std::int64_t backoff_ms = -1;      // -1: the topic's
  std::int64_t max_backoff_ms = -1;  // -1: the topic's
  std::optional<dlq_origin> dlq;
};

enum class delivery_state : std::uint8_t {
  pending = 0,  // delivered before, waiting for redelivery (not_before_ms)
  leased = 1,   // in flight with owner until lease_deadline_ms
  acked = 2,    // acked by owner (kept so that a repeated ack is idempotent)
  dead = 3,     // attempts exhausted; moved to the DLQ
};

struct delivery_record {
  delivery_state state = delivery_state::pending;
  std::string owner;
  std::int64_t attempts = 0;
  millis lease_deadline_ms = 0;
  millis not_before_ms = 0;
  std::string last_error;
  // The group's fencing token of this delivery (version 2; 0 in version 1
  // records, written before tokens existed).
  std::uint64_t fencing_token = 0;
  // When the delivery ended, acked or dead-lettered (version 3; 0 in older
  // records and in open ones): topics with replay_window_ms keep the message
  // for that long after it (broker/retention.cpp).
  millis ended_at_ms = 0;
};

// The first leases that one consume made in one partition, in one record
// (keys::lease_run) instead of a delivery_record each: every member is a
// fresh message leased to owner until lease_deadline_ms with attempts 1,
// each with its own fencing token. A member's own delivery_record, once
// written (acked, expired, nacked, extended...), says more than the run:
// recovery reads a member from the run only while it has none
// (docs/DESIGN.md, "Lease runs").
struct lease_run_record {
  struct member {
    std::uint64_t offset = 0;
    std::uint64_t fencing_token = 0;
    friend bool operator==(const member&, const member&) = default;
  };
  std::string owner;
  millis lease_deadline_ms = 0;
  std::vector<member> members;  // offsets and tokens both strictly ascending
  friend bool operator==(const lease_run_record&, const lease_run_record&) = default;
};

enum class key_state : std::uint8_t { committed = 1, failed = 2 };

// A message the ack that committed a key produced (a workflow step's next
// step): where it was stored, or (outbox_seq, pending) until the target
// shard took it.
struct produced_ref {
  std::string topic;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  bool duplicate = false;
  bool pending = false;
  // Stored by its target, which could not say where (it had taken the
  // entry before, and its answer was lost): partition/offset are unknown.
  bool no_position = false;
  std::uint64_t outbox_seq = 0;
  friend bool operator==(const produced_ref&, const produced_ref&) = default;
};

// A committed or failed idempotency key. "leased" is not stored here: it is
// derived from the leased delivery that holds the key.
struct key_record {
  millis expires_at_ms = 0;  // 0: never (committed with TTL 0, or failed)
  key_state state = key_state::committed;
  std::string owner;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::int64_t attempts = 0;
  millis committed_at_ms = 0;
  std::string result_json;          // "" when the ack carried no result
  std::uint64_t fencing_token = 0;  // of the delivery that committed or failed it (version 2)
  // What the committing ack produced, in its order (version 3): a retried
  // ack answers this list instead of producing again.
  std::vector<produced_ref> produced;
};

// Where the newest message with an idempotency key was stored (topics with
// key_conflict supersede): an older waiting message with the key is
// superseded. Expires with the message (retention).
struct latest_record {
  millis expires_at_ms = 0;  // 0: never
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
};

// One event in a key's life (topics with key_history).
enum class history_kind : std::uint8_t {
  leased = 1,
  lease_expired = 2,
  nacked = 3,
  committed = 4,
  duplicate_auto_acked = 5,  // a delivery found the key committed
  produce_duplicate = 6,     // a produce answered from the dedup window
  produce_committed = 7,     // a produce answered already_committed
  superseded = 8,            // a waiting message replaced by a newer one
  failed = 9,                // attempts used up: dead-lettered
  replayed = 10,             // made pending again by POST /v1/replay
  produced = 11,             // the committing ack produced a message: reason names its topic
};
// Nine fields, several of one integer type: set them by name (the broker's
// history_event_at / delivery_event), never by position.
struct history_event {
  history_kind kind = history_kind::leased;
  millis at_ms = 0;
  std::string owner;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::int64_t attempts = 0;
  std::uint64_t fencing_token = 0;
  std::string reason;              // nacked, lease_expired, failed
  std::uint64_t result_bytes = 0;  // committed
};
// The last k_history_max events of a key, oldest first.
struct history_record {
  millis expires_at_ms = 0;  // 0: never
  std::vector<history_event> events;
};
inline constexpr std::size_t k_history_max = 64;

// A message in a shard's outbox (meta keys::outbox): produced by an ack on
// this shard into a topic on another shard, and not taken there yet.
struct outbox_record {
  std::string topic;    // the target topic
  std::string message;  // the message_in, in the log's encoding (broker/log_entry.hpp)
  millis created_at_ms = 0;
  std::string source_scope;  // the committing key's idem_key ("" if none)
  std::uint32_t source_partition = 0;
  std::uint64_t source_offset = 0;
  std::uint32_t index = 0;  // its place in the ack's produce list
};

struct dedup_record {
  millis expires_at_ms = 0;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  millis stored_at_ms = 0;
};

// key_record, dedup_record, latest_record and history_record values start with expires_at_ms as a
// fixed 8-byte little-endian integer, so that a compaction filter can drop
// expired entries without decoding the rest. 0 means never.
millis expires_at_of(std::string_view value) noexcept;

// ---- keys -------------------------------------------------------------
namespace keys {
// meta
std::string topic(std::string_view name);
std::string topic_prefix();
std::string group(topic_id t, std::string_view name);
std::string group_prefix(topic_id t);
std::string cursor(topic_id t, group_id g, std::uint32_t partition);
std::string cursor_prefix(topic_id t);
std::string partition_start(topic_id t, std::uint32_t partition);
std::string partition_start_prefix(topic_id t);
std::string next_topic_id();
// When the broker's tick next runs retention (broker/retention.hpp): kept
// with the state it changes, so that a replica that restarted runs it at
// the entry the others do.
std::string next_retention();
// A replica's applied position in its shard's log (applied_index_store).
std::string applied();
// The outbox (outbox_record by sequence), its next sequence, and the
// highest sequence this shard took from each source shard's outbox.
std::string outbox(std::uint64_t seq);
std::string outbox_prefix();
std::string outbox_next();
std::string outbox_high_water(std::uint32_t source);
result<std::uint64_t> parse_outbox_seq(std::string_view key);
// The last fencing token handed out by (t, g): never reused.
std::string fence(topic_id t, group_id g);
std::string fence_prefix(topic_id t);
// messages
std::string message(topic_id t, std::uint32_t partition, std::uint64_t offset);
// deliveries
std::string delivery(topic_id t, group_id g, std::uint32_t partition, std::uint64_t offset);
// A lease run whose first member is at offset: the delivery key of that
// offset and one more byte (0x01), so it sorts right after the member's
// own record and before the next offset's.
std::string lease_run(topic_id t, group_id g, std::uint32_t partition, std::uint64_t offset);
bool is_lease_run(std::string_view key) noexcept;
// keys
std::string idem_key(topic_id t, group_id g, std::string_view tenant, std::string_view key);
// Also in the keys space, apart from every idem_key because group ids start
// at 1 and stay below 2^31: the newest message of a key (group 0) and a
// key's history (the group id with the top bit set; group 0: the topic's
// produce events, shared by every group).
std::string key_latest(topic_id t, std::string_view tenant, std::string_view key);
std::string key_history(topic_id t, group_id g, std::string_view tenant, std::string_view key);
// The same two, from the idem_key of the key in any group.
std::string history_of(std::string_view idem_key);
std::string latest_of(std::string_view idem_key);
std::string topic_history_of(std::string_view idem_key);  // key_history with group 0
// The topic of an idem_key (0 for a key too short to be one).
topic_id topic_of(std::string_view idem_key);
// dedup
std::string dedup(topic_id t, std::string_view id);

// The smallest key greater than every key that starts with prefix.
std::string prefix_end(std::string_view prefix);

// [begin, end) of everything of topic t in any key space keyed by topic first.
std::string topic_begin(topic_id t);
std::string topic_end(topic_id t);
// [begin, end) of all deliveries of (t, g).
std::string group_begin(topic_id t, group_id g);
std::string group_end(topic_id t, group_id g);

// Decoders for keys that the broker scans.
struct delivery_key {
  topic_id topic;
  group_id group;
  std::uint32_t partition;
  std::uint64_t offset;
};
result<delivery_key> parse_delivery(std::string_view key);
result<delivery_key> parse_lease_run(std::string_view key);  // offset: the first member's
struct cursor_key {
  topic_id topic;
  group_id group;
  std::uint32_t partition;
};
result<cursor_key> parse_cursor(std::string_view key);
result<std::uint64_t> parse_message_offset(std::string_view key);
result<std::uint32_t> parse_partition_start(std::string_view key);
}  // namespace keys

// ---- records ----------------------------------------------------------
std::string encode(const topic_record& r);
std::string encode(const group_record& r);
std::string encode(const message_record& r);
std::string encode(const delivery_record& r);
std::string encode(const lease_run_record& r);
std::string encode(const key_record& r);
std::string encode(const dedup_record& r);
std::string encode(const latest_record& r);
std::string encode(const outbox_record& r);
std::string encode(const history_record& r);
std::string encode_u64(std::uint64_t v);

result<topic_record> decode_topic(std::string_view v);
result<group_record> decode_group(std::string_view v);
result<message_record> decode_message(std::string_view v);
result<delivery_record> decode_delivery(std::string_view v);
result<lease_run_record> decode_lease_run(std::string_view v);
result<key_record> decode_key(std::string_view v);
result<dedup_record> decode_dedup(std::string_view v);
result<latest_record> decode_latest(std::string_view v);
result<outbox_record> decode_outbox(std::string_view v);
result<history_record> decode_history(std::string_view v);
result<std::uint64_t> decode_u64(std::string_view v);

}  // namespace onceq::storage
