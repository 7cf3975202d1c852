#include "bench/json_scan.hpp"

#include <charconv>
#include <cstring>

namespace onceq::bench {
namespace detail {

std::size_t skip_ws(std::string_view s, std::size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

std::size_t end_of_string(std::string_view s, std::size_t i) {
  const std::size_t start = i + 1;  // first byte of the contents
  for (i = start; i < s.size();) {
    const void* q = std::memchr(s.data() + i, '"', s.size() - i);
    if (q == nullptr) return std::string_view::npos;
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(q) - s.data());
    // The quote is escaped when an odd run of backslashes precedes it.
    std::size_t k = at;
    while (k > start && s[k - 1] == '\\') --k;
    if ((at - k) % 2 == 0) return at + 1;
    i = at + 1;
  }
  return std::string_view::npos;
}

std::size_t end_of_value(std::string_view s, std::size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  if (s[i] == '"') return end_of_string(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"') {
        i = end_of_string(s, i);
        if (i == std::string_view::npos) return i;
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return std::string_view::npos;
  }
  const std::size_t start = i;
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' &&
         s[i] != '\r' && s[i] != '\t') {
    ++i;
  }
  return i == start ? std::string_view::npos : i;
}

}  // namespace detail

bool json_int(std::string_view raw, std::int64_t& out) {
  const char* end = raw.data() + raw.size();
  auto [ptr, ec] = std::from_chars(raw.data(), end, out);
  return ec == std::errc{} && ptr == end;
}

bool json_plain_string(std::string_view raw, std::string_view& out) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return false;
  const auto inner = raw.substr(1, raw.size() - 2);
  if (inner.find('\\') != std::string_view::npos) return false;
  out = inner;
  return true;
}

}  // namespace onceq::bench
