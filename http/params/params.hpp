#pragma once

// The parameters of a request: its JSON body when the body is non-empty,
// else its query string (docs/API.md "Conventions"). They are read with
// reader / field (http/params/reader.hpp); nothing is parsed here but the
// query string.
//
// Padding: simdjson reads up to k_json_padding bytes past the text. The
// server's bodies are read into strings with that room (http/session.cpp)
// and parsed in place; any other body is copied once into a padded buffer
// the params own.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace onceq::http {

// Deepest nesting accepted (arrays and objects; the top-level value is 1).
inline constexpr int k_max_json_depth = 64;

// Bytes past the end of a body that must be readable (allocated; their
// content does not matter) for it to be parsed in place: SIMDJSON_PADDING.
inline constexpr std::size_t k_json_padding = 64;

// Bad input, thrown by the readers (and the codec) and turned into
// errc::invalid_argument by the codec's public functions.
struct bad_input {
  std::string message;
};
[[noreturn]] void throw_bad_input(std::string message);

class params {
 public:
  params() = default;
  // A JSON body (tests, fuzzers): copied, with padding.
  static params json(std::string_view body);

  bool from_query() const noexcept { return from_query_; }

 private:
  friend class reader;
  friend result<params> read_params(std::string_view, std::string_view, std::size_t);
  std::string_view body_;  // padded: k_json_padding readable bytes past it
  std::string copy_;       // the body, when it had no room for padding
  std::vector<std::pair<std::string, std::string>> query_;  // decoded, in order
  bool from_query_ = false;
};

// The body if it has anything but whitespace, else the query.
// body_capacity: the bytes readable from body.data(); with k_json_padding
// of them past the body it is borrowed (it must outlive the params), else
// copied. The body is parsed by the readers, not here. Errors
// (errc::invalid_argument): a bad query string (a bad percent escape, a
// name given twice, a name or value that is not valid UTF-8).
result<params> read_params(std::string_view body, std::string_view query,
                           std::size_t body_capacity = 0);

// Decodes %XX escapes (and '+' as a space when plus_is_space).
result<std::string> percent_decode(std::string_view s, bool plus_is_space);

// Whether s is well-formed UTF-8.
bool valid_utf8(std::string_view s) noexcept;

}  // namespace onceq::http
