#pragma once

#include <cstdint>
#include <string_view>

namespace onceq::bench {

// A minimal scanner over one flat JSON object, for the hot path of reading
// NDJSON deliveries without building a DOM. It does not validate numbers or
// unescape strings; nested values are skipped as raw text.

// Calls fn(key, raw_value) for each member of the object in `text`
// (`raw_value` is the value's exact text; strings keep their quotes). Keys
// must not contain escapes. Returns false on malformed input.
template <typename Fn>
bool scan_object(std::string_view text, Fn&& fn);

// Calls fn(raw_element) for each element of the array in `text`. Returns
// false on malformed input.
template <typename Fn>
bool scan_array(std::string_view text, Fn&& fn);

// The integer in `raw`, or false.
bool json_int(std::string_view raw, std::int64_t& out);

// The contents of the string `raw` when it has no escapes, or false.
bool json_plain_string(std::string_view raw, std::string_view& out);

namespace detail {
std::size_t skip_ws(std::string_view s, std::size_t i);
// Index one past the end of the string starting at s[i] == '"', or npos.
std::size_t end_of_string(std::string_view s, std::size_t i);
// Index one past the end of the value starting at s[i], or npos.
std::size_t end_of_value(std::string_view s, std::size_t i);
}  // namespace detail

template <typename Fn>
bool scan_object(std::string_view s, Fn&& fn) {
  std::size_t i = detail::skip_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = detail::skip_ws(s, i + 1);
  if (i < s.size() && s[i] == '}') return true;
  while (i < s.size()) {
    if (s[i] != '"') return false;
    const std::size_t key_end = detail::end_of_string(s, i);
    if (key_end == std::string_view::npos) return false;
    const std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = detail::skip_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return false;
    i = detail::skip_ws(s, i + 1);
    const std::size_t value_end = detail::end_of_value(s, i);
    if (value_end == std::string_view::npos) return false;
    fn(key, s.substr(i, value_end - i));
    i = detail::skip_ws(s, value_end);
    if (i >= s.size()) return false;
    if (s[i] == '}') return true;
    if (s[i] != ',') return false;
    i = detail::skip_ws(s, i + 1);
  }
  return false;
}

template <typename Fn>
bool scan_array(std::string_view s, Fn&& fn) {
  std::size_t i = detail::skip_ws(s, 0);
  if (i >= s.size() || s[i] != '[') return false;
  i = detail::skip_ws(s, i + 1);
  if (i < s.size() && s[i] == ']') return true;
  while (i < s.size()) {
    const std::size_t end = detail::end_of_value(s, i);
    if (end == std::string_view::npos) return false;
    fn(s.substr(i, end - i));
    i = detail::skip_ws(s, end);
    if (i >= s.size()) return false;
    if (s[i] == ']') return true;
    if (s[i] != ',') return false;
    i = detail::skip_ws(s, i + 1);
  }
  return false;
}

}  // namespace onceq::bench
