#pragma once

// Commands the broker accepts and the replies it gives: plain structs,
// translated from/to JSON by http/. Field names follow docs/API.md. These
// are the API's types, not the disk records (storage/schema.hpp): the broker
// converts between them (broker/records.hpp), so either can change alone.
// One exception: dlq_origin, six facts that are the same on disk and on the
// wire, is the record's type (storage/dlq_origin.hpp).

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.hpp"
#include "base/errc.hpp"
#include "base/result.hpp"
#include "storage/dlq_origin.hpp"

namespace onceq {

// A topic's settings (POST /v1/topics). Defaults are the API's.
struct topic_settings {
  millis lease_ms = 30'000;           // Default: 30 s
  std::int64_t max_attempts = 0;      // Default: 0 = unlimited
  millis backoff_ms = 0;              // Default: 0 = redeliver at once
  millis max_backoff_ms = 0;          // Default: 0 = no cap
  millis key_ttl_ms = 604'800'000;    // Default: 7 days; 0 = forever
  millis dedup_window_ms = 120'000;   // Default: 2 minutes
  millis retention_ms = 604'800'000;  // Default: 7 days; 0 = no age limit
  // A produce that would take the topic's stored messages past either cap is
  // refused whole with RESOURCE_EXHAUSTED (docs/OPERATIONS.md, "Limits").
  std::int64_t max_backlog_messages = 0;  // Default: 0 = unlimited
  std::int64_t max_backlog_bytes = 0;     // Default: 0 = unlimited (value + envelope bytes)
  // Leases one group may hold at once; a consume past it gets no more
  // messages until leases end. Default: 0 = unlimited.
  std::int64_t max_inflight = 0;
  // Keys derived from the message (docs/API.md, "Derived keys"): each source
  // is "envelope.<dot.path>" or "value.<dot.path>"; the key is their values
  // joined with ':'. An explicit envelope.idempotency_key wins. Default: none.
  std::vector<std::string> idempotency_key_fields;
  bool idempotency_key_include_topic = false;  // Default: false
  // A message missing a source gets no key instead of a 400. Default: false.
  bool idempotency_key_optional = false;
  // The produce dedup id defaults to SHA-256 of (key, value). Default: false.
  bool dedup_by_content = false;
  // What a newer message with a key does to an older one still waiting in a
  // group. Default: hold (it waits its turn).
  enum class conflict : std::uint8_t { hold = 0, supersede = 1 };
  conflict key_conflict = conflict::hold;
  bool key_history = false;  // Default: false (GET /v1/keys/history)
  // How long a message every group has acked (or dead-lettered) is kept
  // after that, so that POST /v1/replay can hand it back; retention_ms still
  // caps its age. Costs the disk of every message acked in the window.
  // Default: 0 = acked messages are deleted at the next retention run.
  millis replay_window_ms = 0;
  // Delivery order per message key within each group (docs/API.md,
  // "Workflow steps (ext)"): with key, at most one message of a key is
  // leased at a time, in offset order; the next waits until the one before
  // it is acked, auto-acked or dead-lettered. Default: none.
  enum class ordering_mode : std::uint8_t { none = 0, key = 1 };
  ordering_mode ordering = ordering_mode::none;
  friend bool operator==(const topic_settings&, const topic_settings&) = default;
};

// What the broker needs from a message's JSON and from SHA-256, given to
// the broker's constructor (http/ implements it with its JSON parser and
// OpenSSL) so that the core includes neither, and a command stays plain
// data. Pure functions: the same input gives the same
// output on every replica.
class message_inspector {
 public:
  virtual ~message_inspector() = default;
  // The scalar at dot_path ("a.b.c") inside the JSON text doc, as text
  // (strings unquoted, numbers and booleans as written). errc::not_found
  // when the path is absent or null; errc::invalid_argument when doc is not
  // JSON or the path names an object or array (the message says why).
  virtual result<std::string> field(std::string_view doc, std::string_view dot_path) const = 0;
  // Lower-case hex SHA-256 of bytes.
  virtual std::string sha256_hex(std::string_view bytes) const = 0;
};

// Where a dead-lettered message came from (envelope.dlq on the wire): the
// stored record's own type, as the API answers it unchanged.
using dlq_origin = storage::dlq_origin;

struct create_topic_cmd {
  std::string name;
  std::int64_t partitions = 1;
  topic_settings settings;
};

struct topic_created {
  std::string name;
  std::uint32_t partitions = 1;
  bool created = true;  // false: it existed with the same settings
};

// envelope.retry_policy; unset fields fall back to the topic's settings.
struct retry_policy {
  std::optional<std::int64_t> max_attempts;
  std::optional<std::int64_t> backoff_ms;
  std::optional<std::int64_t> max_backoff_ms;
};

// One message of a produce. http/ parses the envelope and fills the fields
// the broker acts on; envelope_json is the envelope as sent ("" if none),
// echoed to consumers unchanged.
struct message_in {
  std::optional<std::string> key;
  std::string value;
  std::string envelope_json;
  std::string idempotency_key;  // envelope.idempotency_key
  std::string tenant_id;        // envelope.tenant_id
  std::string msg_id;           // envelope.msg_id: produce dedup id
  std::optional<std::int64_t> partition_override;
  std::optional<std::int64_t> key_ttl_ms;
  std::optional<std::int64_t> delay_ms;
  std::optional<millis> deadline_ms;  // envelope.deadline, parsed
  retry_policy retry;
};

struct produce_cmd {
  std::string topic;
  std::vector<message_in> messages;  // 1..1000
  // The Idempotency-Key request header ("" if none). For a single message it
  // is that message's dedup id (over envelope.msg_id); for a batch, message i
  // without msg_id uses "<header>#<i>".
  std::string idempotency_header;
  // Groups in which a message's key must be committed for the message to be
  // answered already_committed instead of stored. Empty: always store.
  std::vector<std::string> skip_if_committed;
};

// A key's commit in one group, as an already_committed produce reports it.
struct committed_key {
  std::string result_json;  // "" if the ack carried none
  millis committed_at_ms = 0;
  std::string owner;
  friend bool operator==(const committed_key&, const committed_key&) = default;
};

struct produced {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  bool duplicate = false;
};

struct produce_reply {
  std::vector<produced> results;
  // Results not stored because the message's key is committed in every
  // skip_if_committed group: result index -> each group's commit. Their
  // entries in results carry no position.
  std::map<std::size_t, std::map<std::string, committed_key>> already_committed;
};

struct consume_cmd {
  std::string topic;
  std::string group;
  std::string owner;
  std::optional<std::int64_t> lease_ms;  // default: the topic's
  std::int64_t max_messages = 1;         // 1..1000
  // Nothing is delivered at or after this time (epoch ms): the consumer's
  // own deadline (deadline_ms / deadline_rfc3339).
  std::optional<millis> deadline_ms;
};

// One message handed to a consumer (a line of the NDJSON answer).
struct delivery {
  std::string topic;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::int64_t attempts = 0;
  std::optional<std::string> key;
  std::string value;
  std::string last_error;
  std::string envelope_json;      // "" if the producer sent none
  std::optional<dlq_origin> dlq;  // set on messages of dlq.<topic>: envelope.dlq
  millis lease_expires_at_ms = 0;
  // Strictly increasing per (topic, group), never reused (restart, expired
  // keys): pass it to the database the side effect goes to.
  std::uint64_t fencing_token = 0;
};

// Identifies one delivery for ack / nack / extend.
struct delivery_ref {
  std::string topic;
  std::string group;
  std::string owner;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::optional<std::int64_t> attempts;        // fence: must equal the current delivery's
  std::optional<std::uint64_t> fencing_token;  // fence: must equal the current delivery's
};

// One message an ack produces: the workflow step's next step (docs/API.md,
// "Workflow steps (ext)"), shaped like a single POST /v1/produce body.
struct step_message {
  std::string topic;
  message_in message;
};

// Where a message an ack produced was stored, in the ack's produce order.
struct step_produced {
  std::string topic;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  bool duplicate = false;  // answered from the target topic's dedup window
  // Written to the ack's shard's outbox for a topic on another shard and
  // not stored there yet: outbox_seq names it until it is (then pending is
  // false and partition/offset are set).
  bool pending = false;
  // Stored, but where is not known: its target had taken it before and the
  // answer that said where was lost (a restart between the two shards).
  bool no_position = false;
  std::uint64_t outbox_seq = 0;  // 0: stored in the ack's own transaction
  // Not ok: its target refused it for good (its topic was deleted after
  // the ack was checked); it was not stored.
  errc code = errc::ok;
  std::string message;
  friend bool operator==(const step_produced&, const step_produced&) = default;
};

struct ack_cmd {
  delivery_ref ref;
  std::string result_json;            // "" if none; stored with the committed key
  std::vector<step_message> produce;  // 0..k_max_step_messages
};

struct ack_item {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::optional<std::int64_t> attempts;
  std::string result_json;
  std::optional<std::uint64_t> fencing_token;
  std::vector<step_message> produce;  // 0..k_max_step_messages
};

struct ack_batch_cmd {
  std::string topic;
  std::string group;
  std::string owner;
  std::vector<ack_item> acks;  // 1..1000
};

struct ack_outcome {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  errc code = errc::ok;  // ok: "acked"; otherwise "error" with this code
  std::string message;
  // The ack carried produce (or is a repeat of one whose key's commit holds
  // its list): what it produced, in request order. Absent: it carried none.
  std::optional<std::vector<step_produced>> produced;
};

// The outbox (docs/DESIGN.md, "Workflow steps"): messages an ack produced
// into topics on other shards. The source shard writes them in the ack's
// transaction; a relay appends them to the target shard, which keeps the
// highest sequence it took from each source and drops any at or below it.
struct outbox_entry {
  std::uint64_t seq = 0;
  step_message msg;
  millis created_at_ms = 0;
};

// On a target shard: store entries of source's outbox, in seq order. An
// entry at or below the source's high-water mark is answered duplicate
// and not stored again.
struct outbox_append_cmd {
  std::uint32_t source = 0;  // the source shard's id
  std::vector<outbox_entry> entries;
};

struct outbox_appended {  // one per entry, in order
  std::uint64_t seq = 0;
  errc code = errc::ok;  // not ok: refused for good (unknown topic, bad message)
  std::string message;
  bool stored = false;     // false with ok: at or below the high-water mark
  bool duplicate = false;  // the target topic's dedup window answered
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
};

// On the source shard: entries the targets took (or refused for good) leave
// the outbox; their positions go to the step's key and its history.
struct outbox_done_cmd {
  std::vector<outbox_appended> done;
};

// A shard's outbox, for /metrics.
struct outbox_stats {
  std::uint64_t depth = 0;
  millis oldest_created_at_ms = 0;  // 0: empty
};

struct nack_cmd {
  delivery_ref ref;
  std::string reason = "nack";
  std::optional<std::int64_t> delay_ms;
};

struct extend_cmd {
  delivery_ref ref;
  std::int64_t lease_ms = 0;
};

struct key_query {
  std::string topic;
  std::string group;
  std::string key;
  std::string tenant_id;
};

struct key_info {
  enum class state { none, leased, committed, failed };
  state st = state::none;
  std::string owner;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::int64_t attempts = 0;
  millis lease_expires_at_ms = 0;   // leased
  millis committed_at_ms = 0;       // committed
  millis expires_at_ms = 0;         // committed; 0 = never
  std::string result_json;          // committed, "" if none
  std::uint64_t fencing_token = 0;  // of the lease, or of the delivery that committed / failed it
};

// One event of GET /v1/keys/history.
struct key_event {
  enum class kind {
    leased,
    lease_expired,
    nacked,
    committed,
    duplicate_auto_acked,
    produce_duplicate,
    produce_committed,
    superseded,
    failed,
    replayed,
    produced  // the committing ack produced a message (reason: its topic)
  };
  kind what = kind::leased;
  millis at_ms = 0;
  std::string owner;
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  std::int64_t attempts = 0;
  std::uint64_t fencing_token = 0;
  std::string reason;
  std::uint64_t result_bytes = 0;
};

struct key_history {
  std::vector<key_event> events;  // oldest first, at most 64
};

struct redrive_cmd {
  std::string topic;  // the original topic; messages come from dlq.<topic>
  std::optional<std::int64_t> max_messages;
};

// POST /v1/replay: a range of a topic's messages, as one group sees them
// (dry run), or handed back to that group (docs/API.md, "Replay").
struct replay_position {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  friend bool operator==(const replay_position&, const replay_position&) = default;
};

struct replay_cmd {
  std::string topic;
  std::string group;
  // The range, one of two forms: produce time [from_ms, to_ms) over every
  // partition (or only `partition`), or offsets [from_offset, to_offset) of
  // `partition`.
  std::optional<millis> from_ms;
  std::optional<millis> to_ms;
  std::optional<std::int64_t> from_offset;
  std::optional<std::int64_t> to_offset;
  std::optional<std::int64_t> partition;
  bool dry_run = true;               // Default: true: change nothing, answer the diff
  std::int64_t max_messages = 1000;  // Default: 1000 (1..1000) messages per page
  // Where the previous page stopped (its `next`); the range is the same.
  std::optional<replay_position> cursor;
};

// What a replay would do (or did) to one message, for the group.
enum class replay_outcome : std::uint8_t {
  already_committed = 0,  // its key is committed in the group: stays done
  would_deliver = 1,      // acked without a committed key: a replay runs it again
  in_flight = 2,          // leased now
  pending = 3,            // not delivered yet, or waiting for a retry
  dead_lettered = 4,
  superseded = 5,
  gone = 6,  // removed by retention
};
inline constexpr std::size_t k_replay_outcomes = 7;

struct replay_item {
  std::uint32_t partition = 0;
  std::uint64_t offset = 0;
  replay_outcome outcome = replay_outcome::gone;
  std::string idempotency_key;  // "" if none (or gone)
  std::string tenant_id;
  millis produced_at_ms = 0;               // 0: gone
  std::int64_t attempts = 0;               // the group's deliveries of it so far
  std::string owner;                       // in_flight: the lease holder
  std::optional<committed_key> committed;  // already_committed: result, time, owner
};

struct replay_reply {
  bool dry_run = true;
  std::vector<replay_item> messages;                       // in partition, then offset order
  std::array<std::uint64_t, k_replay_outcomes> summary{};  // per outcome, this page
  std::uint64_t replayed = 0;                              // made pending again (0 in a dry run)
  std::optional<replay_position> next;                     // more of the range: pass back as cursor
};

// Counters since start, per topic and group (for /metrics and GET topic).
struct group_stats {
  std::uint64_t backlog = 0;   // waiting for delivery, not in flight
  std::uint64_t inflight = 0;  // leased now
  std::uint64_t delivered = 0;
  std::uint64_t redelivered = 0;
  std::uint64_t acked = 0;
  std::uint64_t auto_acked = 0;
  std::uint64_t nacked = 0;
  std::uint64_t lease_expired = 0;
  std::uint64_t dead_lettered = 0;
  std::uint64_t stale_acks_rejected = 0;
  std::uint64_t superseded = 0;  // waiting messages replaced by a newer one (key_conflict)
  millis oldest_unacked_produced_at_ms = 0;  // 0: nothing unacked
};

struct topic_info {
  std::string name;
  std::uint32_t partitions = 1;
  topic_settings settings;
  std::uint64_t produced = 0;
  std::uint64_t produce_duplicates = 0;         // answered from the dedup window
  std::uint64_t produce_already_committed = 0;  // answered from committed keys
  std::map<std::string, group_stats> groups;
};

}  // namespace onceq
