#include "http/json_write.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace onceq::http {

namespace {

// Whether any of the 8 bytes in w needs an escape in a JSON string: a
// control character (< 0x20), '"' or '\\'. Classic SWAR tests (no false
// negatives; a false positive only sends the block down the byte path).
bool needs_escape(std::uint64_t w) noexcept {
  constexpr std::uint64_t ones = 0x0101010101010101ULL;
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  auto has_zero = [](std::uint64_t v) { return (v - ones) & ~v & highs; };
  const std::uint64_t below_space = (w - ones * 0x20) & ~w & highs;
  return (below_space | has_zero(w ^ (ones * '"')) | has_zero(w ^ (ones * '\\'))) != 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char k_hex[] = "0123456789abcdef";
  out.push_back('"');
  std::size_t run = 0;  // start of the current run of bytes that need no escape
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // Payloads rarely need escapes: skip 8 clean bytes at a time.
    if (n - i >= 8) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, sizeof w);
      if (!needs_escape(w)) {
        i += 8;
        continue;
      }
    }
    for (const std::size_t stop = std::min(n, i + 8); i < stop; ++i) {
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
          const char esc[6] = {'\\', 'u', '0', '0', k_hex[c >> 4], k_hex[c & 0xF]};
          out.append(esc, sizeof esc);
        }
      }
    }
  }
  out.append(s.data() + run, n - run);
  out.push_back('"');
}

}  // namespace onceq::http
