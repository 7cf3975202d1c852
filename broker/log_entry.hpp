#pragma once

// A command as an entry of a shard's replicated log (docs/REPLICATION.md,
// sections 1 and 2): every command that changes a shard's state, plain
// data, with the time the leader stamped on it. Replicas decode the same
// bytes into the same command and apply it with now_ms as their clock, so
// they reach the same state and give the same answers.
//
// The encoding (base/bytes.hpp) is versioned: byte 0 is the entry
// format (k_log_entry_version), byte 1 the command's tag (log_tag, fixed
// numbers that never change meaning), then now_ms and the command's fields
// in a fixed order. A replica that reads a version or tag it does not know
// refuses the entry (errc::failed_precondition: upgrade this node) rather
// than guess; a malformed entry is errc::internal (corrupt). Mixed-version
// groups are docs/REPLICATION.md's open problem 5: a new field needs a new
// version, and decode keeps reading the old one.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "broker/commands.hpp"

namespace onceq {

// Fire the timers due at the entry's now_ms (lease expiry, backoff ends,
// retention): the leader proposes it; followers never tick on their own.
struct tick_cmd {};

struct delete_topic_cmd {
  std::string name;
};

// A consume that first acks the previous batch (POST /v1/consume with
// "acks"): one entry, so that both are applied together.
struct consume_after_acks_cmd {
  ack_batch_cmd acks;
  consume_cmd consume;
};

// The tags on the wire. Numbers are forever: add new ones at the end.
enum class log_tag : std::uint8_t {
  tick = 1,
  create_topic = 2,
  delete_topic = 3,
  produce = 4,
  consume = 5,
  consume_after_acks = 6,
  ack = 7,
  ack_batch = 8,
  nack = 9,
  extend = 10,
  redrive = 11,
  replay = 12,
  outbox_append = 13,
  outbox_done = 14,
};

using log_command =
    std::variant<tick_cmd, create_topic_cmd, delete_topic_cmd, produce_cmd, consume_cmd,
                 consume_after_acks_cmd, ack_cmd, ack_batch_cmd, nack_cmd, extend_cmd, redrive_cmd,
                 replay_cmd, outbox_append_cmd, outbox_done_cmd>;

struct log_entry {
  millis now_ms = 0;  // the leader's clock when it proposed the entry
  log_command cmd;
};

// Format 2 added topic_settings::ordering and an ack's produce list;
// format 1 entries still decode (without them).
inline constexpr std::uint8_t k_log_entry_version = 2;

log_tag tag_of(const log_command& cmd) noexcept;

std::string encode_entry(const log_entry& e);

// The entry, or: errc::failed_precondition for a version or tag this
// build does not know; errc::internal for bytes that do not decode
// (truncated, trailing bytes, an enum out of range).
result<log_entry> decode_entry(std::string_view bytes);

// One message in the same encoding (an outbox record's message).
std::string encode_message(const message_in& m);
result<message_in> decode_message(std::string_view bytes);

}  // namespace onceq
