#pragma once

// JSON <-> broker commands and replies (docs/API.md "Endpoints").
//
// Parsing is strict: unknown fields are rejected (except inside
// envelope.headers and result), integers must be JSON integers (from a
// query string: decimal text), strings must be strings, null is never
// valid, and every range the spec states is checked. Every parse error is
// errc::invalid_argument with a message naming the field. Commands own
// their strings: they outlive the params they were read from.
//
// Each parse_* reads its params in one pass (http/params.hpp: simdjson
// on-demand for JSON bodies), fields in the order the client wrote them:
// a body with several faults is answered with the first one met.
//
// Thread safety: free functions without shared state.

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/commands.hpp"
#include "broker/limits.hpp"
#include "http/json_write.hpp"
#include "http/params.hpp"
#include "storage/base/result.hpp"

namespace onceq::http {

// The API's limits have one home, broker/limits.hpp; the codec rejects
// what is out of range before a command is built.
using onceq::k_max_batch;
using onceq::k_max_wait_ms;
inline constexpr std::size_t k_max_label_bytes = k_max_name_bytes;  // topic, group, owner

// ---- requests -> commands --------------------------------------------------

// Topic names: [A-Za-z0-9._-]{1,200}.
bool valid_topic_name(std::string_view name) noexcept;

// POST /v1/topics. Settings not given come from defaults.
result<create_topic_cmd> parse_create_topic(const params& p, const topic_settings& defaults);

struct produce_request {
  produce_cmd cmd;
  bool batch = false;  // the "messages" form: answered with "results"
};
// POST /v1/produce; idempotency_header is the Idempotency-Key header ("" if none).
result<produce_request> parse_produce(const params& p, std::string_view idempotency_header);

struct consume_request {
  consume_cmd cmd;
  bool stream = false;  // no max_messages: a stream until the client leaves
  millis wait_ms = 0;
  // The previous batch's acks, carried on this consume (docs/API.md, "Acks
  // carried on the next consume"); only with max_messages, in a body.
  std::optional<std::vector<ack_item>> acks;
};
result<consume_request> parse_consume(const params& p);

// POST /v1/ack: the single form, or the batch form ("acks").
using ack_request = std::variant<ack_cmd, ack_batch_cmd>;
result<ack_request> parse_ack(const params& p);
result<nack_cmd> parse_nack(const params& p);
result<extend_cmd> parse_extend(const params& p);

struct key_request {
  key_query q;
  millis wait_ms = 0;
};
result<key_request> parse_key_query(const params& p);
// GET /v1/keys/history: topic, group, key, tenant_id (no wait_ms).
result<key_query> parse_key_history_query(const params& p);

result<redrive_cmd> parse_redrive(const params& p);

// ---- replies -> JSON -----------------------------------------------------

// The hot replies, written straight into text (same bytes as a dump() of
// the equivalent nlohmann object: keys in alphabetical order).
// POST /v1/produce: {"duplicate","offset","partition","status","topic"},
// or for a batch {"results":[{"duplicate","offset","partition"},...],
// "status","topic"}.
std::string produce_reply_json(const produce_reply& r, std::string_view topic, bool batch);
// POST /v1/ack, batch form: {"results":[{"error"?,"offset","partition","status"},...]}.
std::string ack_outcomes_json(const std::vector<ack_outcome>& outcomes);
// The first line of a consume that carried acks: {"acks":[...]} (the same
// items as ack_outcomes_json's), then '\n'.
std::string consumed_acks_line(const std::vector<ack_outcome>& outcomes);

nlohmann::json to_json(const topic_created& c);
nlohmann::json to_json(const topic_info& t);
nlohmann::json to_json(const topic_settings& s);
nlohmann::json to_json(const key_info& k);
nlohmann::json to_json(const dlq_origin& d);
// GET /v1/keys/history: {"events":[{"event","at_ms",...},...]}.
nlohmann::json to_json(const key_history& h);

// The broker's message_inspector: dot paths into JSON with json_field
// (http/params.hpp), SHA-256 with OpenSSL. Stateless; any thread.
const message_inspector& json_inspector();

// Serializes compactly; invalid UTF-8 is replaced, never thrown.
std::string dump(const nlohmann::json& j);

}  // namespace onceq::http
