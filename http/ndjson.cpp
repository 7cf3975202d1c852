#include "http/ndjson.hpp"

#include <charconv>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "http/codec.hpp"

namespace onceq::http {

namespace {

constexpr char k_hex[] = "0123456789abcdef";

template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 24 bytes hold any 64-bit integer
  out.append(buf, end);
}

// The envelope object of a dead-lettered message: the producer's envelope
// plus "dlq". Rare, so it may use the DOM.
void append_dlq_envelope(std::string& out, const delivery& d) {
  auto env = d.envelope_json.empty() ? nlohmann::json::object()
                                     : nlohmann::json::parse(d.envelope_json, nullptr, false);
  if (!env.is_object()) env = nlohmann::json::object();
  env["dlq"] = to_json(*d.dlq);
  out += dump(env);
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  std::size_t run = 0;  // start of the current run of bytes that need no escape
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char esc[6] = {'\\', 'u', '0', '0', k_hex[c >> 4], k_hex[c & 0xF]};
        out.append(esc, sizeof esc);
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

void append_delivery_line(std::string& out, const delivery& d) {
  out += "{\"topic\":";
  append_json_string(out, d.topic);
  out += ",\"partition\":";
  append_int(out, d.partition);
  out += ",\"offset\":";
  append_int(out, d.offset);
  out += ",\"attempts\":";
  append_int(out, d.attempts);
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
  append_int(out, d.lease_expires_at_ms);
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
