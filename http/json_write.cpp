#include "http/json_write.hpp"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace onceq::http {

namespace {

// Whether c needs an escape in a JSON string: a control character (< 0x20),
// '"' or '\\'.
bool special(unsigned char c) noexcept {
  return c < 0x20 || c == '"' || c == '\\';
}

// Whether any of the 8 bytes in w needs an escape. Classic SWAR tests (no
// false negatives; a false positive only sends the block down the byte
// path).
bool needs_escape(std::uint64_t w) noexcept {
  constexpr std::uint64_t ones = 0x0101010101010101ULL;
  constexpr std::uint64_t highs = 0x8080808080808080ULL;
  auto has_zero = [](std::uint64_t v) { return (v - ones) & ~v & highs; };
  const std::uint64_t below_space = (w - ones * 0x20) & ~w & highs;
  return (below_space | has_zero(w ^ (ones * '"')) | has_zero(w ^ (ones * '\\'))) != 0;
}

// The first byte in [p, end) that needs an escape, or end. Payloads rarely
// have any, so the clean stretch is skipped 16 bytes at a time (SSE2, which
// every x86-64 has), then 8 (SWAR), then byte by byte.
const char* find_special(const char* p, const char* end) noexcept {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i below_space = _mm_set1_epi8(0x1f);
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Unsigned v <= 0x1f exactly where min(v, 0x1f) == v.
    const __m128i hits =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                     _mm_cmpeq_epi8(_mm_min_epu8(v, below_space), v));
    const int mask = _mm_movemask_epi8(hits);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (end - p >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, sizeof w);
    if (needs_escape(w)) break;
    p += 8;
  }
  while (p != end && !special(static_cast<unsigned char>(*p))) ++p;
  return p;
}

void append_escape(std::string& out, unsigned char c) {
  static constexpr char k_hex[] = "0123456789abcdef";
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

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  const char* run = s.data();  // start of the current run of bytes that need no escape
  const char* const end = run + s.size();
  for (const char* p = find_special(run, end); p != end; p = find_special(run, end)) {
    out.append(run, static_cast<std::size_t>(p - run));
    append_escape(out, static_cast<unsigned char>(*p));
    run = p + 1;
  }
  out.append(run, static_cast<std::size_t>(end - run));
  out.push_back('"');
}

}  // namespace onceq::http
