#pragma once

// A strict RFC 8259 JSON parser into a compact read-only DOM, and the small
// JSON writers the hot paths use. The request path (params -> codec) reads
// bodies through this instead of nlohmann::json: one pass, no per-value
// heap allocation, strings viewed in place.
//
// What is accepted is what nlohmann::json::parse accepts (RFC 8259 plus an
// optional leading UTF-8 BOM; numbers whose magnitude overflows a double are
// rejected as nlohmann does), except:
// - a key given twice in one object is an error (json_errc::duplicate_key);
// - nesting deeper than k_max_json_depth is an error (json_errc::too_deep).
//
// Ownership: a jdoc owns its values (an arena) and, after parse_copy, its
// text. After parse() it borrows the text: the text must outlive the jdoc
// and every view taken from it. jvalue / jmember views die with their jdoc.
// Moving a jdoc keeps every view valid.
//
// Thread safety: a jdoc is immutable once parsed and may be read from any
// thread; parsing uses per-thread scratch space.

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace onceq::http {

// Deepest nesting accepted (arrays and objects; the top-level value is 1).
inline constexpr int k_max_json_depth = 64;

enum class jtype : std::uint8_t { null, boolean, number, string, array, object };

struct jmember;

// One value. Trivially copyable; a view into its jdoc.
class jvalue {
 public:
  jtype type() const noexcept { return type_; }
  bool is_null() const noexcept { return type_ == jtype::null; }
  bool is_bool() const noexcept { return type_ == jtype::boolean; }
  bool is_number() const noexcept { return type_ == jtype::number; }
  bool is_string() const noexcept { return type_ == jtype::string; }
  bool is_array() const noexcept { return type_ == jtype::array; }
  bool is_object() const noexcept { return type_ == jtype::object; }

  // A number written without fraction or exponent ("-12", "0"), whatever
  // its size: read it with std::from_chars(number_text()).
  bool is_integer() const noexcept { return type_ == jtype::number && (flags_ & k_integer) != 0; }

  // Booleans: the value. Anything else: false.
  bool as_bool() const noexcept { return (flags_ & k_true) != 0; }

  // Strings: the decoded text (escapes resolved; may hold NUL bytes).
  // Anything else: "".
  std::string_view str() const noexcept {
    return type_ == jtype::string ? std::string_view(static_cast<const char*>(data_), size_)
                                  : std::string_view{};
  }

  // Numbers: the literal as written ("-1.5e3"). Anything else: "".
  std::string_view number_text() const noexcept {
    return type_ == jtype::number ? std::string_view(static_cast<const char*>(data_), size_)
                                  : std::string_view{};
  }

  // Objects: the members in input order (keys are unique). Else empty.
  std::span<const jmember> members() const noexcept;
  // Arrays: the elements in order. Else empty.
  std::span<const jvalue> elements() const noexcept;
  // Members of an object, elements of an array; 0 for anything else.
  std::size_t size() const noexcept {
    return type_ == jtype::object || type_ == jtype::array ? size_ : 0;
  }
  bool empty() const noexcept { return size() == 0; }

  // Objects: the member named key, or nullptr. Linear: objects are small.
  const jvalue* find(std::string_view key) const noexcept;

  // The value's text in the input, [first byte, last byte], whitespace
  // inside included (strings with their quotes and escapes as written).
  std::string_view raw() const noexcept { return {raw_, raw_size_}; }

  // Whether raw() holds no insignificant whitespace (minify is a copy).
  bool compact() const noexcept { return (flags_ & k_compact) != 0; }

 private:
  friend class json_parser;
  static constexpr std::uint8_t k_integer = 1;
  static constexpr std::uint8_t k_true = 2;
  static constexpr std::uint8_t k_compact = 4;

  const void* data_ = nullptr;  // string / number text, jmember[] or jvalue[]
  const char* raw_ = "null";
  std::uint32_t size_ = 0;  // bytes of data_ text, or members / elements
  std::uint32_t raw_size_ = 4;
  jtype type_ = jtype::null;
  std::uint8_t flags_ = k_compact;
};

struct jmember {
  std::string_view key;  // decoded
  jvalue value;
};

inline std::span<const jmember> jvalue::members() const noexcept {
  if (type_ != jtype::object) return {};
  return {static_cast<const jmember*>(data_), size_};
}

inline std::span<const jvalue> jvalue::elements() const noexcept {
  if (type_ != jtype::array) return {};
  return {static_cast<const jvalue*>(data_), size_};
}

inline const jvalue* jvalue::find(std::string_view key) const noexcept {
  for (const jmember& m : members()) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

enum class json_errc : std::uint8_t {
  syntax,         // not JSON (message says what and offset where)
  too_deep,       // nested deeper than k_max_json_depth
  duplicate_key,  // a key twice in one object (path names it)
  too_large,      // text of 4 GiB or more
};

struct json_error {
  json_errc code = json_errc::syntax;
  std::size_t offset = 0;  // byte of the text where the error was seen
  std::string message;     // e.g. "invalid escape in string"
  // duplicate_key: where the key is, as the codec names fields:
  // "messages[3].envelope.msg_id".
  std::string path;
};

// A parsed document. Default-constructed (or after a failed parse): root
// is null.
class jdoc {
 public:
  jdoc() noexcept;
  ~jdoc();
  jdoc(jdoc&&) noexcept;
  jdoc& operator=(jdoc&&) noexcept;
  jdoc(const jdoc&) = delete;
  jdoc& operator=(const jdoc&) = delete;

  // Parses text, which is borrowed (see the top of this file). Returns
  // false, filling *err when given, on any error; the document is then
  // empty. Never throws except std::bad_alloc; never recurses.
  [[nodiscard]] bool parse(std::string_view text, json_error* err = nullptr);
  // A temporary string would die before the views: use parse_copy.
  template <class S>
  requires std::same_as<S, std::string>
  bool parse(S&& text, json_error* err = nullptr) = delete;
  // The same over text that the document keeps.
  [[nodiscard]] bool parse_copy(std::string text, json_error* err = nullptr);

  const jvalue& root() const noexcept { return root_; }

 private:
  struct storage;
  bool parse_into(std::unique_ptr<storage> store, std::string_view text, json_error* err);
  std::unique_ptr<storage> store_;
  jvalue root_;
};

// ---- writers ---------------------------------------------------------------

// Appends the text of v (a value of a parsed document) without
// insignificant whitespace. Strings are copied as written (escapes kept),
// numbers as written.
void append_minified(std::string& out, const jvalue& v);
std::string minified(const jvalue& v);

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
