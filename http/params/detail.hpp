#pragma once

// Private to http/params/: the simdjson walks behind reader, field and
// json_field. One document is read at a time per thread (t_state); errors
// are thrown as bad_input.

#include <cstddef>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <simdjson.h>

#include "http/params/params.hpp"

namespace onceq::http::params_detail {

namespace od = simdjson::ondemand;
static_assert(k_json_padding >= simdjson::SIMDJSON_PADDING);
static_assert(std::is_trivially_copyable_v<od::object> &&
              std::is_trivially_destructible_v<od::object>);

[[noreturn]] void fail(std::string message);
[[noreturn]] void malformed();
[[noreturn]] void too_deep();

inline void check(simdjson::error_code e) {
  if (e == simdjson::SUCCESS) return;
  if (e == simdjson::DEPTH_ERROR) too_deep();
  malformed();
}

// The per-thread parser and the document being read (one at a time).
struct thread_state {
  thread_state() {
    // The depth limit stays with the parser as it grows for larger bodies;
    // if this allocation fails, iterate() allocates with the default depth
    // (our own walks still stop at k_max_json_depth).
    (void)(parser.allocate(4096, k_max_json_depth + 1) == simdjson::SUCCESS);
  }
  od::parser parser;
  od::document doc;
  std::vector<std::string_view> keys;  // duplicate checks of free-form objects
  std::string copy;                    // json_field's padded copy
  const char* end = nullptr;           // of the text being read
};

extern thread_local thread_state t_state;

inline od::object& object_of(unsigned char* storage) {
  return *std::launder(reinterpret_cast<od::object*>(storage));
}

inline bool is_ws(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// simdjson's token of a scalar runs to the next token: drop the whitespace.
inline std::string_view trim_end(std::string_view s) noexcept {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// A number written without fraction or exponent.
inline bool integer_token(std::string_view t) noexcept {
  for (char c : t) {
    if (c == '.' || c == 'e' || c == 'E') return false;
  }
  return true;
}

inline od::value& value_of(void* v) {
  return *static_cast<od::value*>(v);
}

inline od::json_type type_of(od::value& v) {
  od::json_type type;
  check(v.type().get(type));
  return type;
}

// Where a walk of a free-form value is, for the path of a duplicate key:
// "acks[2].result.a.b". prefix is the path of the value walked.
struct walk_frame {
  const walk_frame* up = nullptr;
  std::string_view key;  // in an object
  std::size_t index = 0;
  bool in_array = false;
  std::string_view prefix;  // the outermost frame only
};

// Throws if the keys from `first` on in t_state.keys hold one twice.
void check_unique(std::size_t first, const walk_frame* at);

// Validates v whole: every string decoded, number and literal parsed, key
// unique in its object; depth is that of v's container (the top level: 0).
void validate(od::value v, int depth, const walk_frame* at);

// Only whitespace may follow the top-level value.
void check_end(od::document& doc);

// Validates a whole document that is not an object (read_params rejects
// it; this says whether as malformed or as not an object).
void validate_document(od::document& doc, od::json_type type, std::string_view prefix);

// Starts t_state.doc on text, which has k_json_padding readable bytes past
// its end. A leading UTF-8 BOM is skipped.
od::document& start(std::string_view text);

// raw, validated, without insignificant whitespace.
std::string minify(std::string_view raw);

}  // namespace onceq::http::params_detail
