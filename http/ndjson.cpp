#include "http/ndjson.hpp"

#include "http/codec.hpp"
#include "http/json_write.hpp"

namespace onceq::http {

namespace {

// The envelope object of a dead-lettered message: the producer's envelope
// as stored (a minified object, which never has a "dlq" field: the codec
// rejects unknown envelope fields) with "dlq" appended as its last field.
void append_dlq_envelope(std::string& out, const delivery& d) {
  std::string_view env = d.envelope_json;
  if (env.size() < 2 || env.front() != '{' || env.back() != '}') env = "{}";
  out.append(env.substr(0, env.size() - 1));
  if (env.size() > 2) out += ',';
  out += "\"dlq\":";
  out += dump(to_json(*d.dlq));
  out += '}';
}

}  // namespace

void append_delivery_line(std::string& out, const delivery& d) {
  out += "{\"topic\":";
  append_json_string(out, d.topic);
  out += ",\"partition\":";
  append_json_int(out, d.partition);
  out += ",\"offset\":";
  append_json_int(out, d.offset);
  out += ",\"attempts\":";
  append_json_int(out, d.attempts);
  out += ",\"key\":";
  append_json_string(out, d.key ? std::string_view(*d.key) : std::string_view{});
  out += ",\"value\":";
  append_json_string(out, d.value);
  out += ",\"last_error\":";
  append_json_string(out, d.last_error);
  out += ",\"envelope\":";
  if (d.dlq) {
    append_dlq_envelope(out, d);
  } else if (d.envelope_json.empty()) {
    out += "{}";
  } else {
    // Stored as http/ re-serialized it (compact JSON): embed as is.
    out += d.envelope_json;
  }
  out += ",\"lease_expires_at_ms\":";
  append_json_int(out, d.lease_expires_at_ms);
  out += ",\"fencing_token\":";
  append_json_int(out, d.fencing_token);
  out += "}\n";
}

std::string encode_deliveries(const std::vector<delivery>& ds) {
  // A line's fixed text (field names, quotes, braces, an empty envelope's
  // {}: 138 bytes) and five integers of up to 20 digits, plus its strings:
  // one allocation for the whole answer, unless escapes or a dead letter's
  // envelope make it longer. (160 + value + envelope fell short by a few
  // bytes a line with 11-byte keys, and the answer was grown, and copied,
  // once at its end.)
  constexpr std::size_t k_line = 138 + 5 * 20;
  std::string out;
  std::size_t guess = 0;
  for (const auto& d : ds) {
    guess += k_line + d.topic.size() + (d.key ? d.key->size() : 0) + d.value.size() +
             d.last_error.size() + d.envelope_json.size();
  }
  out.reserve(guess);
  for (const auto& d : ds) append_delivery_line(out, d);
  return out;
}

}  // namespace onceq::http
