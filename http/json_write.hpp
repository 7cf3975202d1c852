#pragma once

// The one JSON writer path of the server: every answer (produce and ack
// replies, NDJSON delivery lines, errors) writes its strings and integers
// with these. Reading JSON is http/json.hpp (simdjson).

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace onceq::http {

// Appends s as a quoted JSON string: '"', '\\' and control characters are
// escaped (\n, \u001f, ...); other bytes, UTF-8 included, pass through
// (inputs were validated as UTF-8 when they entered the server).
void append_json_string(std::string& out, std::string_view s);

// Appends an integer in decimal.
template <std::integral Int>
void append_json_int(std::string& out, Int v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 24 bytes hold any 64-bit integer
  out.append(buf, end);
}

}  // namespace onceq::http
