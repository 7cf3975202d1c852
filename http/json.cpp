#include "http/json.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory_resource>
#include <system_error>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

namespace onceq::http {

struct jdoc::storage {
  explicit storage(std::size_t initial) : arena(initial) {}
  std::pmr::monotonic_buffer_resource arena;
  std::string text;  // parse_copy only
};

jdoc::jdoc() noexcept = default;
jdoc::~jdoc() = default;
jdoc::jdoc(jdoc&&) noexcept = default;
jdoc& jdoc::operator=(jdoc&&) noexcept = default;

namespace {

constexpr std::uint64_t k_ones = 0x0101010101010101ull;
constexpr std::uint64_t k_highs = 0x8080808080808080ull;

// Non-zero when one of the 8 bytes of w may need a look: a quote, a
// backslash, a control character or a non-ASCII byte. Exact as to "none".
inline std::uint64_t string_specials(std::uint64_t w) noexcept {
  const std::uint64_t quote = w ^ (k_ones * '"');
  const std::uint64_t slash = w ^ (k_ones * '\\');
  return (((w - k_ones * 0x20) & ~w) | ((quote - k_ones) & ~quote) | ((slash - k_ones) & ~slash) |
          w) &
         k_highs;
}

inline std::uint64_t load8(const char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// Printable ASCII other than '"' and '\\': copied as is inside strings.
constexpr std::array<bool, 256> k_plain = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

// The first byte in [p, end) that is not printable ASCII other than '"'
// and '\\' (so: the end of a string, an escape, a control character or
// UTF-8 to validate), or end.
inline const char* skip_plain(const char* p, const char* end) noexcept {
#if defined(__SSE2__)
  // Signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them
  // with the control characters.
  const __m128i space = _mm_set1_epi8(0x20);
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i slash = _mm_set1_epi8('\\');
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hit = _mm_or_si128(
        _mm_cmplt_epi8(v, space), _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)));
    const auto mask = static_cast<unsigned>(_mm_movemask_epi8(hit));
    if (mask != 0) return p + __builtin_ctz(mask);
    p += 16;
  }
#endif
  while (end - p >= 8 && string_specials(load8(p)) == 0) p += 8;
  while (p < end && k_plain[static_cast<unsigned char>(*p)]) ++p;
  return p;
}

inline bool is_ws(char c) noexcept {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

inline bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

inline bool is_cont(unsigned char c) noexcept {
  return (c & 0xC0) == 0x80;
}

// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF) starting at p, or 0.
inline std::size_t utf8_length(const unsigned char* p, const unsigned char* end) noexcept {
  const unsigned c = p[0];
  const std::ptrdiff_t avail = end - p;
  if (c < 0xC2) return 0;  // ASCII is not handled here; 80..C1 never lead
  if (c < 0xE0) return avail >= 2 && is_cont(p[1]) ? 2 : 0;
  if (c < 0xF0) {
    if (avail < 3) return 0;
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = c == 0xED ? 0x9F : 0xBF;
    return p[1] >= lo && p[1] <= hi && is_cont(p[2]) ? 3 : 0;
  }
  if (c < 0xF5) {
    if (avail < 4) return 0;
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = c == 0xF4 ? 0x8F : 0xBF;
    return p[1] >= lo && p[1] <= hi && is_cont(p[2]) && is_cont(p[3]) ? 4 : 0;
  }
  return 0;
}

inline int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Whether a number literal (valid JSON grammar) overflows a double, which
// nlohmann rejects ("number overflow"); underflow to 0 is accepted.
bool overflows_double(std::string_view num) {
  double d = 0;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), d);
  (void)ptr;
  if (ec != std::errc::result_out_of_range) return false;
  // Out of range: too big or too small. The decimal exponent of the first
  // significant digit tells which (they are hundreds of decades apart).
  std::size_t i = 0;
  if (num[i] == '-') ++i;
  std::int64_t magnitude = 0;  // 10^(magnitude-1) <= |value| < 10^magnitude
  bool seen = false;
  for (; i < num.size() && is_digit(num[i]); ++i) {
    if (num[i] != '0') seen = true;
    if (seen) ++magnitude;
  }
  if (i < num.size() && num[i] == '.') {
    for (++i; i < num.size() && is_digit(num[i]); ++i) {
      if (seen) continue;
      if (num[i] != '0') {
        seen = true;
      } else {
        --magnitude;
      }
    }
  }
  if (!seen) return false;  // zero
  std::int64_t exp = 0;
  if (i < num.size() && (num[i] == 'e' || num[i] == 'E')) {
    ++i;
    bool neg = false;
    if (num[i] == '-' || num[i] == '+') neg = num[i++] == '-';
    for (; i < num.size(); ++i) {
      if (exp < 1'000'000'000) exp = exp * 10 + (num[i] - '0');
    }
    if (neg) exp = -exp;
  }
  return magnitude + exp > 0;
}

// Per-thread scratch for the values of the containers being parsed; they
// are copied into the arena, contiguous, when their container closes.
struct scratch {
  std::vector<jvalue> elements;
  std::vector<jmember> members;
  std::string decoded;                 // a string with escapes, being decoded
  std::vector<std::string_view> keys;  // duplicate check of large objects

  void reset() {
    // Keep the space of ordinary requests, not that of a rare huge one.
    constexpr std::size_t k_keep = 4096;
    if (elements.capacity() > k_keep) std::vector<jvalue>().swap(elements);
    if (members.capacity() > k_keep) std::vector<jmember>().swap(members);
    if (keys.capacity() > k_keep) std::vector<std::string_view>().swap(keys);
    if (decoded.capacity() > k_keep * 16) std::string().swap(decoded);
    elements.clear();
    members.clear();
    keys.clear();
  }
};

}  // namespace

// One parse. Iterative: the stack of open containers is a fixed array of
// k_max_json_depth frames.
class json_parser {
 public:
  json_parser(std::string_view text, std::pmr::memory_resource& arena, scratch& s)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        arena_(arena),
        s_(s) {}

  bool run(jvalue& root, json_error* err);

 private:
  struct frame {
    bool object;
    std::uint32_t start;    // first index in s_.members / s_.elements
    std::uint32_t ws_runs;  // ws_runs_ when opened
    const char* raw_begin;  // the bracket
    std::string_view key;   // object: the key of the member being parsed
  };

  bool fail(json_errc code, std::string message) {
    if (err_ != nullptr) {
      err_->code = code;
      err_->offset = static_cast<std::size_t>(p_ - begin_);
      err_->message = std::move(message);
    }
    return false;
  }
  bool syntax(const char* what) { return fail(json_errc::syntax, what); }

  void skip_ws() noexcept {
    if (p_ < end_ && is_ws(*p_)) {
      ++ws_runs_;
      do ++p_;
      while (p_ < end_ && is_ws(*p_));
    }
  }

  jvalue& slot();
  bool parse_string(std::string_view& out);
  bool parse_string_value(jvalue& v);
  bool parse_escape();
  bool parse_number(jvalue& v);
  bool parse_literal(jvalue& v);
  bool parse_key(frame& f);
  bool close_object();
  void close_array();
  bool check_unique(const jmember* m, std::size_t n);
  std::string path_to(std::string_view key) const;
  std::size_t index_in(int d) const noexcept;

  template <class T>
  T* allocate(std::size_t n) {
    return static_cast<T*>(arena_.allocate(n * sizeof(T), alignof(T)));
  }

  void set_raw(jvalue& v, const char* from) const noexcept {
    v.raw_ = from;
    v.raw_size_ = static_cast<std::uint32_t>(p_ - from);
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::pmr::memory_resource& arena_;
  scratch& s_;
  json_error* err_ = nullptr;
  jvalue* root_ = nullptr;
  std::uint32_t ws_runs_ = 0;  // whitespace runs skipped so far
  int depth_ = 0;
  std::array<frame, k_max_json_depth> frames_;
};

bool json_parser::run(jvalue& root, json_error* err) {
  err_ = err;
  root_ = &root;
  if (end_ - begin_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;  // BOM
  for (;;) {
    // A value: a scalar written in its slot, or a container opened (and
    // maybe closed at once).
    skip_ws();
    if (p_ == end_) return syntax("unexpected end of input");
    const char c = *p_;
    if (c == '{' || c == '[') {
      if (depth_ == k_max_json_depth) {
        return fail(json_errc::too_deep,
                    fmt::format("nested deeper than {} levels", k_max_json_depth));
      }
      frame& f = frames_[static_cast<std::size_t>(depth_++)];
      f.object = c == '{';
      f.start = static_cast<std::uint32_t>(f.object ? s_.members.size() : s_.elements.size());
      f.raw_begin = p_;
      f.ws_runs = ws_runs_;
      ++p_;
      skip_ws();
      if (f.object) {
        if (p_ < end_ && *p_ == '}') {
          ++p_;
          if (!close_object()) return false;
        } else {
          if (!parse_key(f)) return false;
          continue;
        }
      } else {
        if (p_ < end_ && *p_ == ']') {
          ++p_;
          close_array();
        } else {
          continue;
        }
      }
    } else if (c == '"') {
      if (!parse_string_value(slot())) return false;
    } else if (c == '-' || is_digit(c)) {
      if (!parse_number(slot())) return false;
    } else {
      if (!parse_literal(slot())) return false;
    }

    // A value is complete: go on in its container, closing those that end.
    for (;;) {
      if (depth_ == 0) {
        skip_ws();
        if (p_ != end_) return syntax("unexpected text after the value");
        return true;
      }
      frame& f = frames_[static_cast<std::size_t>(depth_ - 1)];
      skip_ws();
      if (p_ == end_) return syntax("unexpected end of input");
      if (f.object) {
        if (*p_ == ',') {
          ++p_;
          skip_ws();
          if (!parse_key(f)) return false;
          break;
        }
        if (*p_ == '}') {
          ++p_;
          if (!close_object()) return false;
          continue;
        }
        return syntax("expected ',' or '}'");
      }
      if (*p_ == ',') {
        ++p_;
        break;
      }
      if (*p_ == ']') {
        ++p_;
        close_array();
        continue;
      }
      return syntax("expected ',' or ']'");
    }
  }
}

// Where the next value goes: a new member of the open object, a new
// element of the open array, or the root. Scalars are parsed in place.
jvalue& json_parser::slot() {
  if (depth_ == 0) return *root_;
  const frame& f = frames_[static_cast<std::size_t>(depth_ - 1)];
  if (f.object) {
    s_.members.push_back(jmember{f.key, jvalue{}});
    return s_.members.back().value;
  }
  return s_.elements.emplace_back();
}

bool json_parser::parse_string_value(jvalue& v) {
  const char* from = p_;
  std::string_view s;
  if (!parse_string(s)) return false;
  v.type_ = jtype::string;
  v.data_ = s.data();
  v.size_ = static_cast<std::uint32_t>(s.size());
  set_raw(v, from);
  return true;
}

bool json_parser::parse_key(frame& f) {
  if (p_ == end_) return syntax("unexpected end of input");
  if (*p_ != '"') return syntax("expected a string key");
  if (!parse_string(f.key)) return false;
  skip_ws();
  if (p_ == end_) return syntax("unexpected end of input");
  if (*p_ != ':') return syntax("expected ':'");
  ++p_;
  return true;
}

bool json_parser::parse_string(std::string_view& out) {
  ++p_;  // the opening quote
  const char* start = p_;
  const char* run = p_;  // start of the bytes not yet copied to s_.decoded
  bool escaped = false;
  for (;;) {
    p_ = skip_plain(p_, end_);
    if (p_ == end_) return syntax("unterminated string");
    const auto c = static_cast<unsigned char>(*p_);
    if (c == '"') break;
    if (c == '\\') {
      if (!escaped) {
        escaped = true;
        s_.decoded.clear();
      }
      s_.decoded.append(run, static_cast<std::size_t>(p_ - run));
      if (!parse_escape()) return false;
      run = p_;
    } else if (c < 0x20) {
      return syntax("control character in string");
    } else {
      const std::size_t n = utf8_length(reinterpret_cast<const unsigned char*>(p_),
                                        reinterpret_cast<const unsigned char*>(end_));
      if (n == 0) return syntax("invalid UTF-8 in string");
      p_ += n;
    }
  }
  if (!escaped) {
    out = std::string_view(start, static_cast<std::size_t>(p_ - start));
  } else {
    s_.decoded.append(run, static_cast<std::size_t>(p_ - run));
    char* mem = allocate<char>(s_.decoded.size() == 0 ? 1 : s_.decoded.size());
    std::memcpy(mem, s_.decoded.data(), s_.decoded.size());
    out = std::string_view(mem, s_.decoded.size());
  }
  ++p_;  // the closing quote
  return true;
}

// At a backslash: appends the decoded character to s_.decoded.
bool json_parser::parse_escape() {
  ++p_;
  if (p_ == end_) return syntax("unterminated string");
  const char e = *p_++;
  switch (e) {
    case '"':
    case '\\':
    case '/':
      s_.decoded.push_back(e);
      return true;
    case 'b':
      s_.decoded.push_back('\b');
      return true;
    case 'f':
      s_.decoded.push_back('\f');
      return true;
    case 'n':
      s_.decoded.push_back('\n');
      return true;
    case 'r':
      s_.decoded.push_back('\r');
      return true;
    case 't':
      s_.decoded.push_back('\t');
      return true;
    case 'u':
      break;
    default:
      --p_;
      return syntax("invalid escape in string");
  }
  auto hex4 = [this](std::uint32_t& cp) {
    if (end_ - p_ < 4) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_digit(p_[i]);
      if (d < 0) return false;
      cp = (cp << 4) | static_cast<std::uint32_t>(d);
    }
    p_ += 4;
    return true;
  };
  std::uint32_t cp = 0;
  if (!hex4(cp)) return syntax("invalid \\u escape in string");
  if (cp >= 0xDC00 && cp <= 0xDFFF) return syntax("lone low surrogate in string");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    std::uint32_t lo = 0;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
      return syntax("high surrogate not followed by a low surrogate");
    }
    p_ += 2;
    if (!hex4(lo)) return syntax("invalid \\u escape in string");
    if (lo < 0xDC00 || lo > 0xDFFF) {
      return syntax("high surrogate not followed by a low surrogate");
    }
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  append_utf8(s_.decoded, cp);
  return true;
}

bool json_parser::parse_number(jvalue& v) {
  const char* from = p_;
  if (*p_ == '-') ++p_;
  if (p_ == end_ || !is_digit(*p_)) return syntax("invalid number");
  if (*p_ == '0') {
    ++p_;  // a digit after it is caught by the caller as unexpected text
  } else {
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }
  bool integer = true;
  if (p_ < end_ && *p_ == '.') {
    ++p_;
    if (p_ == end_ || !is_digit(*p_)) return syntax("invalid number");
    while (p_ < end_ && is_digit(*p_)) ++p_;
    integer = false;
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    if (p_ == end_ || !is_digit(*p_)) return syntax("invalid number");
    while (p_ < end_ && is_digit(*p_)) ++p_;
    integer = false;
  }
  const std::string_view text(from, static_cast<std::size_t>(p_ - from));
  // Integers of up to 19 digits cannot overflow a double; others may.
  if ((!integer || text.size() > 19) && overflows_double(text)) {
    p_ = from;
    return syntax("number out of range");
  }
  v.type_ = jtype::number;
  v.data_ = from;
  v.size_ = static_cast<std::uint32_t>(text.size());
  if (integer) v.flags_ |= jvalue::k_integer;
  set_raw(v, from);
  return true;
}

bool json_parser::parse_literal(jvalue& v) {
  const char* from = p_;
  auto is = [this](std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size()) return false;
    if (std::memcmp(p_, word.data(), word.size()) != 0) return false;
    p_ += word.size();
    return true;
  };
  if (is("true")) {
    v.type_ = jtype::boolean;
    v.flags_ |= jvalue::k_true;
  } else if (is("false")) {
    v.type_ = jtype::boolean;
  } else if (is("null")) {
    v.type_ = jtype::null;
  } else {
    return syntax("unexpected character");
  }
  set_raw(v, from);
  return true;
}

bool json_parser::close_object() {
  frame& f = frames_[static_cast<std::size_t>(depth_ - 1)];
  const std::size_t n = s_.members.size() - f.start;
  jmember* mem = nullptr;
  if (n > 0) {
    mem = allocate<jmember>(n);
    std::memcpy(static_cast<void*>(mem), s_.members.data() + f.start, n * sizeof(jmember));
    if (!check_unique(mem, n)) return false;
  }
  s_.members.resize(f.start);
  jvalue v;
  v.type_ = jtype::object;
  v.data_ = mem;
  v.size_ = static_cast<std::uint32_t>(n);
  if (ws_runs_ != f.ws_runs) v.flags_ = 0;
  set_raw(v, f.raw_begin);
  --depth_;
  slot() = v;
  return true;
}

void json_parser::close_array() {
  frame& f = frames_[static_cast<std::size_t>(depth_ - 1)];
  const std::size_t n = s_.elements.size() - f.start;
  jvalue* mem = nullptr;
  if (n > 0) {
    mem = allocate<jvalue>(n);
    std::memcpy(static_cast<void*>(mem), s_.elements.data() + f.start, n * sizeof(jvalue));
  }
  s_.elements.resize(f.start);
  jvalue v;
  v.type_ = jtype::array;
  v.data_ = mem;
  v.size_ = static_cast<std::uint32_t>(n);
  if (ws_runs_ != f.ws_runs) v.flags_ = 0;
  set_raw(v, f.raw_begin);
  --depth_;
  slot() = v;
}

bool json_parser::check_unique(const jmember* m, std::size_t n) {
  constexpr std::size_t k_pairwise = 16;  // below this, n^2/2 compares win
  std::string_view dup;
  bool found = false;
  if (n <= k_pairwise) {
    for (std::size_t i = 1; i < n && !found; ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (m[i].key == m[j].key) {
          dup = m[i].key;
          found = true;
          break;
        }
      }
    }
  } else {
    s_.keys.clear();
    for (std::size_t i = 0; i < n; ++i) s_.keys.push_back(m[i].key);
    std::sort(s_.keys.begin(), s_.keys.end());
    auto it = std::adjacent_find(s_.keys.begin(), s_.keys.end());
    if (it != s_.keys.end()) {
      dup = *it;
      found = true;
    }
  }
  if (!found) return true;
  fail(json_errc::duplicate_key, fmt::format("duplicate key '{}'", dup));
  if (err_ != nullptr) err_->path = path_to(dup);
  return false;
}

// The path of key in the innermost open object: its ancestors' keys and
// indexes, "a.b[2].key".
std::string json_parser::path_to(std::string_view key) const {
  std::string out;
  for (int d = 0; d + 1 < depth_; ++d) {
    const frame& f = frames_[static_cast<std::size_t>(d)];
    if (f.object) {
      if (!out.empty()) out.push_back('.');
      out.append(f.key);
    } else {
      out += fmt::format("[{}]", index_in(d));
    }
  }
  if (!out.empty()) out.push_back('.');
  out.append(key);
  return out;
}

// The index of the element being parsed in the array of frame d: its
// elements end where those of the next open array begin.
std::size_t json_parser::index_in(int d) const noexcept {
  std::size_t end = s_.elements.size();
  for (int k = d + 1; k < depth_; ++k) {
    const frame& f = frames_[static_cast<std::size_t>(k)];
    if (!f.object) {
      end = f.start;
      break;
    }
  }
  return end - frames_[static_cast<std::size_t>(d)].start;
}

// ---- jdoc -------------------------------------------------------------------

namespace {

thread_local scratch t_scratch;

// The first arena block: values take about as many bytes as their text
// (ack items, all small numbers, take more; the arena then grows).
std::size_t arena_size(std::size_t text_size) {
  return std::max<std::size_t>(text_size + text_size / 2, 512);
}

}  // namespace

bool jdoc::parse(std::string_view text, json_error* err) {
  return parse_into(std::make_unique<storage>(arena_size(text.size())), text, err);
}

bool jdoc::parse_copy(std::string text, json_error* err) {
  auto store = std::make_unique<storage>(arena_size(text.size()));
  store->text = std::move(text);  // stays where it is from now on
  const std::string_view view = store->text;
  return parse_into(std::move(store), view, err);
}

bool jdoc::parse_into(std::unique_ptr<storage> store, std::string_view text, json_error* err) {
  root_ = jvalue{};
  store_.reset();
  if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
    if (err != nullptr) *err = json_error{json_errc::too_large, 0, "JSON text too large", {}};
    return false;
  }
  t_scratch.reset();
  json_parser parser(text, store->arena, t_scratch);
  jvalue root;
  if (!parser.run(root, err)) return false;
  root_ = root;
  store_ = std::move(store);
  return true;
}

// ---- writers ----------------------------------------------------------------

void append_minified(std::string& out, const jvalue& v) {
  const std::string_view raw = v.raw();
  if (v.compact()) {
    out.append(raw);
    return;
  }
  out.reserve(out.size() + raw.size());
  const char* p = raw.data();
  const char* const end = p + raw.size();
  const char* run = p;
  while (p < end) {
    const char c = *p;
    if (c == '"') {
      for (++p; p < end && *p != '"'; ++p) {
        if (*p == '\\' && p + 1 < end) ++p;  // the escaped byte cannot end the string
      }
      if (p < end) ++p;
    } else if (is_ws(c)) {
      out.append(run, static_cast<std::size_t>(p - run));
      do ++p;
      while (p < end && is_ws(*p));
      run = p;
    } else {
      ++p;
    }
  }
  out.append(run, static_cast<std::size_t>(p - run));
}

std::string minified(const jvalue& v) {
  std::string out;
  append_minified(out, v);
  return out;
}

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
