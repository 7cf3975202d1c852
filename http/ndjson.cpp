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
  std::string out;
  std::size_t guess = 0;
  for (const auto& d : ds) guess += 160 + d.value.size() + d.envelope_json.size();
  out.reserve(guess);
  for (const auto& d : ds) append_delivery_line(out, d);
  return out;
}

}  // namespace onceq::http
