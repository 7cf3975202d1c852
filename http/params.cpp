#include "http/params.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <simdjson.h>

namespace onceq::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

}  // namespace

bool valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

result<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) {
        return make_error(errc::invalid_argument, "bad percent escape in the query string");
      }
      int hi = hex_value(s[i + 1]);
      int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) {
        return make_error(errc::invalid_argument, "bad percent escape in the query string");
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ---- simdjson -----------------------------------------------------------------

namespace od = simdjson::ondemand;
static_assert(k_json_padding >= simdjson::SIMDJSON_PADDING);
static_assert(std::is_trivially_copyable_v<od::object> &&
              std::is_trivially_destructible_v<od::object>);

void throw_bad_input(std::string message) {
  throw bad_input{std::move(message)};
}

namespace {

[[noreturn]] void fail(std::string message) {
  throw bad_input{std::move(message)};
}

constexpr std::int64_t k_int_max = std::numeric_limits<std::int64_t>::max();

[[noreturn]] void malformed() {
  fail("malformed JSON body");
}

[[noreturn]] void too_deep() {
  fail(fmt::format("JSON body nested deeper than {} levels", k_max_json_depth));
}

void check(simdjson::error_code e) {
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

thread_local thread_state t_state;

od::object& object_of(unsigned char* storage) {
  return *std::launder(reinterpret_cast<od::object*>(storage));
}

bool is_ws(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// simdjson's token of a scalar runs to the next token: drop the whitespace.
std::string_view trim_end(std::string_view s) noexcept {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// A number written without fraction or exponent.
bool integer_token(std::string_view t) noexcept {
  for (char c : t) {
    if (c == '.' || c == 'e' || c == 'E') return false;
  }
  return true;
}

// Strict decimal: an optional '-', then digits; nothing else.
std::optional<std::int64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.front() == '+') return std::nullopt;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
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

std::string walk_path(const walk_frame* f, std::string_view key) {
  std::vector<const walk_frame*> frames;
  for (; f != nullptr; f = f->up) frames.push_back(f);
  std::string out;
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    const walk_frame& w = **it;
    if (w.up == nullptr) {
      out.append(w.prefix);
    } else if (w.in_array) {
      out += fmt::format("[{}]", w.index);
    } else {
      if (!out.empty()) out.push_back('.');
      out.append(w.key);
    }
  }
  if (!out.empty()) out.push_back('.');
  out.append(key);
  return out;
}

// Throws if the keys from `first` on in t_state.keys hold one twice.
void check_unique(std::size_t first, const walk_frame* at) {
  auto& keys = t_state.keys;
  const std::size_t n = keys.size() - first;
  std::string_view dup;
  if (n <= 16) {
    for (std::size_t i = first + 1; i < keys.size() && dup.empty(); ++i) {
      for (std::size_t j = first; j < i; ++j) {
        if (keys[i] == keys[j]) {
          dup = keys[i];
          break;
        }
      }
    }
    if (dup.data() == nullptr) return;
  } else {
    std::vector<std::string_view> sorted(keys.begin() + static_cast<std::ptrdiff_t>(first),
                                         keys.end());
    std::sort(sorted.begin(), sorted.end());
    auto it = std::adjacent_find(sorted.begin(), sorted.end());
    if (it == sorted.end()) return;
    dup = *it;
  }
  fail(fmt::format("duplicate field '{}' in the JSON body", walk_path(at, dup)));
}

// Validates v whole: every string decoded, number and literal parsed, key
// unique in its object; depth is that of v's container (the top level: 0).
void validate(od::value v, int depth, const walk_frame* at) {
  od::json_type type;
  check(v.type().get(type));
  switch (type) {
    case od::json_type::object: {
      if (depth + 1 > k_max_json_depth) too_deep();
      od::object obj;
      check(v.get_object().get(obj));
      const std::size_t first = t_state.keys.size();
      walk_frame f{at, {}, 0, false, {}};
      for (auto member : obj) {
        od::field fl;
        check(std::move(member).get(fl));
        std::string_view key;
        check(fl.unescaped_key().get(key));
        t_state.keys.push_back(key);
        f.key = key;
        validate(fl.value(), depth + 1, &f);
      }
      check_unique(first, at);
      t_state.keys.resize(first);
      return;
    }
    case od::json_type::array: {
      if (depth + 1 > k_max_json_depth) too_deep();
      od::array arr;
      check(v.get_array().get(arr));
      walk_frame f{at, {}, 0, true, {}};
      for (auto element : arr) {
        od::value ev;
        check(std::move(element).get(ev));
        validate(ev, depth + 1, &f);
        ++f.index;
      }
      return;
    }
    case od::json_type::string: {
      std::string_view s;
      check(v.get_string().get(s));
      return;
    }
    case od::json_type::number: {
      double d = 0;
      if (integer_token(trim_end(v.raw_json_token()))) {
        std::int64_t i = 0;
        if (v.get_int64().get(i) == simdjson::SUCCESS) return;
      }
      check(v.get_double().get(d));
      return;
    }
    case od::json_type::boolean: {
      bool b = false;
      check(v.get_bool().get(b));
      return;
    }
    case od::json_type::null: {
      bool null = false;
      check(v.is_null().get(null));
      if (!null) malformed();
      return;
    }
  }
  malformed();
}

// Only whitespace may follow the top-level value.
void check_end(od::document& doc) {
  auto loc = doc.current_location();
  if (loc.error() != simdjson::OUT_OF_BOUNDS) malformed();
}

// Validates a whole document that is not an object (read_params rejects
// it; this says whether as malformed or as not an object).
void validate_document(od::document& doc, od::json_type type, std::string_view prefix) {
  walk_frame top{nullptr, {}, 0, false, prefix};
  switch (type) {
    case od::json_type::object:
    case od::json_type::array: {
      od::value v;
      check(doc.get_value().get(v));
      validate(v, 0, &top);
      break;
    }
    case od::json_type::string: {
      std::string_view s;
      check(doc.get_string().get(s));
      break;
    }
    case od::json_type::number: {
      double d = 0;
      check(doc.get_double().get(d));
      break;
    }
    case od::json_type::boolean:
    case od::json_type::null: {
      // simdjson 3.0.1 misreads a top-level true / false / null followed
      // by whitespace: the token is checked here, and that it ends the text
      // (a token runs to the next one, or to the end).
      std::string_view token;
      check(doc.raw_json_token().get(token));
      const std::string_view atom = trim_end(token);
      if (atom != "true" && atom != "false" && atom != "null") malformed();
      if (token.data() + token.size() != t_state.end) malformed();
      return;
    }
  }
  check_end(doc);
}

// Starts t_state.doc on text, which has k_json_padding readable bytes past
// its end. A leading UTF-8 BOM is skipped.
od::document& start(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  check(t_state.parser.iterate(text.data(), text.size(), text.size() + k_json_padding)
            .get(t_state.doc));
  t_state.keys.clear();
  t_state.end = text.data() + text.size();
  return t_state.doc;
}

}  // namespace

// ---- params -----------------------------------------------------------------

params params::json(std::string_view body) {
  params p;
  p.copy_.reserve(body.size() + k_json_padding);
  p.copy_.assign(body);
  p.body_ = p.copy_;
  return p;
}

result<params> read_params(std::string_view body, std::string_view query,
                           std::size_t body_capacity) {
  std::size_t first = 0;
  while (first < body.size() && is_space(body[first])) ++first;
  if (first < body.size()) {
    if (body_capacity >= body.size() + k_json_padding) {
      params p;
      p.body_ = body;
      return p;
    }
    return params::json(body);
  }
  params p;
  p.from_query_ = true;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string_view raw_name = pair.substr(0, eq);
    std::string_view raw_value =
        eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    auto name = percent_decode(raw_name, true);
    if (!name.ok()) return std::move(name).err();
    auto value = percent_decode(raw_value, true);
    if (!value.ok()) return std::move(value).err();
    if (!valid_utf8(*name) || !valid_utf8(*value)) {
      return make_error(errc::invalid_argument, "the query string is not valid UTF-8");
    }
    for (const auto& [n, v] : p.query_) {
      if (n == *name) {
        return make_error(errc::invalid_argument,
                          fmt::format("query parameter '{}' is given more than once", *name));
      }
    }
    p.query_.emplace_back(std::move(*name), std::move(*value));
  }
  return p;
}

// ---- reader -------------------------------------------------------------------

reader::reader(reader&&) noexcept = default;
reader::~reader() = default;

reader::reader(const params& p) : name_(""), top_(true) {
  static_assert(sizeof(od::object) <= sizeof(object_) && alignof(od::object) <= 8);
  if (p.from_query_) {
    query_ = &p.query_;
    return;
  }
  od::document& doc = start(p.body_);
  od::json_type type;
  check(doc.type().get(type));
  if (type != od::json_type::object) {
    validate_document(doc, type, "");
    fail("the JSON body must be an object");
  }
  od::object obj;
  check(doc.get_object().get(obj));
  new (object_) od::object(obj);
}

std::string reader::where() const {
  std::string out = parent_ == nullptr ? std::string(name_) : parent_->path(name_);
  if (index_ != static_cast<std::size_t>(-1)) out += fmt::format("[{}]", index_);
  return out;
}

std::string reader::path(std::string_view name) const {
  std::string w = where();
  return w.empty() ? std::string(name) : fmt::format("{}.{}", w, name);
}

void reader::each_field(std::initializer_list<std::string_view> names, callback cb, void* ctx) {
  static constexpr std::size_t k_max_names = 64;
  std::uint64_t seen = 0;
  auto index_of = [&](std::string_view key) {
    std::size_t i = 0;
    for (std::string_view n : names) {
      if (n == key) return i;
      ++i;
    }
    fail(fmt::format("unknown field '{}'", path(key)));
  };
  auto once = [&](std::size_t i) {
    if (i < k_max_names) {
      if ((seen >> i) & 1U) {
        fail(fmt::format("duplicate field '{}' in the JSON body", path(names.begin()[i])));
      }
      seen |= std::uint64_t{1} << i;
    }
  };
  if (query_ != nullptr) {
    for (const auto& [name, value] : *query_) {
      const std::size_t i = index_of(name);
      field f(*this, names.begin()[i], nullptr, &value);
      cb(ctx, i, f);
    }
    return;
  }
  od::object& obj = object_of(object_);
  for (auto member : obj) {
    check(member.error());
    od::field& fl = member.value_unsafe();  // by reference: no copies of it
    // Names are plain ASCII: compared with the key as written; a key with
    // escapes ("\u0061") is decoded first.
    // (Reading k[n.size()] stays inside the text or its padding.)
    const char* k = reinterpret_cast<const char*>(fl.key().raw());
    std::size_t i = 0;
    for (std::string_view n : names) {
      if (k[n.size()] == '"' && std::memcmp(k, n.data(), n.size()) == 0) break;
      ++i;
    }
    if (i == names.size()) {
      std::string_view key;
      check(fl.unescaped_key().get(key));
      i = index_of(key);
    }
    once(i);
    field f(*this, names.begin()[i], &fl.value(), nullptr);
    cb(ctx, i, f);
  }
  if (top_) check_end(t_state.doc);
}

// ---- field --------------------------------------------------------------------

namespace {

od::value& value_of(void* v) {
  return *static_cast<od::value*>(v);
}

od::json_type type_of(od::value& v) {
  od::json_type type;
  check(v.type().get(type));
  return type;
}

}  // namespace

void field::wrong(std::string_view what) const {
  // A malformed value is reported as such, as it would be had it been read.
  if (value_ != nullptr) {
    walk_frame top{nullptr, {}, 0, false, {}};
    std::string prefix = path();
    top.prefix = prefix;
    validate(value_of(value_), parent_.depth_, &top);
  }
  fail(fmt::format("{} must be {}", path(), what));
}

void field::not_null() {
  if (value_ == nullptr) return;
  od::value& v = value_of(value_);
  if (type_of(v) == od::json_type::null) {
    bool null = false;
    check(v.is_null().get(null));
    if (!null) malformed();
    fail(fmt::format("{} must not be null", path()));
  }
}

bool field::is_null() {
  if (value_ == nullptr) return false;
  od::value& v = value_of(value_);
  if (type_of(v) != od::json_type::null) return false;
  bool null = false;
  check(v.is_null().get(null));
  if (!null) malformed();
  return true;
}

std::string_view field::str() {
  if (text_ != nullptr) return *text_;
  od::value& v = value_of(value_);
  std::string_view s;
  // The common case first: anything but a string fails without moving on.
  if (v.get_string().get(s) == simdjson::SUCCESS) return s;
  not_null();
  if (type_of(v) != od::json_type::string) wrong("a string");
  check(v.get_string().get(s));  // a string that does not decode
  return s;
}

std::int64_t field::integer(std::int64_t lo, std::int64_t hi) {
  auto out_of_range = [&]() {
    if (hi == k_int_max) fail(fmt::format("{} must be >= {}", path(), lo));
    fail(fmt::format("{} must be between {} and {}", path(), lo, hi));
  };
  std::int64_t x = 0;
  if (text_ != nullptr) {
    auto d = parse_decimal(*text_);
    if (!d) fail(fmt::format("{} must be a decimal integer", path()));
    x = *d;
  } else {
    od::value& v = value_of(value_);
    // The common case first: get_int64 takes only integers ("1.0" and
    // "1e2" fail) and fails without moving on.
    if (v.get_int64().get(x) != simdjson::SUCCESS) {
      not_null();
      if (type_of(v) != od::json_type::number) wrong("an integer");
      // Not an int64. Up to uint64 max it is an integer out of range;
      // beyond, below int64 min, and fractions are not integers.
      const std::string_view t = trim_end(v.raw_json_token());
      std::uint64_t u = 0;
      if (integer_token(t) && v.get_uint64().get(u) == simdjson::SUCCESS) out_of_range();
      double d = 0;
      check(v.get_double().get(d));  // a malformed number is malformed JSON
      fail(fmt::format("{} must be an integer", path()));
    }
  }
  if (x < lo || x > hi) out_of_range();
  return x;
}

bool field::boolean() {
  if (text_ != nullptr) {
    if (*text_ == "true" || *text_ == "false") return *text_ == "true";
    fail(fmt::format("{} must be true or false", path()));
  }
  od::value& v = value_of(value_);
  bool b = false;
  if (v.get_bool().get(b) == simdjson::SUCCESS) return b;
  not_null();
  if (type_of(v) != od::json_type::boolean) wrong("true or false");
  check(v.get_bool().get(b));  // "tru", "falsey"
  return b;
}

std::vector<std::string> field::strings(std::size_t max) {
  not_null();
  std::vector<std::string> out;
  if (text_ != nullptr) {
    std::string_view rest = *text_;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      out.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  } else {
    od::value& v = value_of(value_);
    if (type_of(v) != od::json_type::array) wrong("an array of strings");
    od::array arr;
    check(v.get_array().get(arr));
    std::size_t i = 0;
    for (auto element : arr) {
      od::value ev;
      check(std::move(element).get(ev));
      if (type_of(ev) != od::json_type::string) {
        walk_frame top{nullptr, {}, 0, false, {}};
        validate(ev, parent_.depth_ + 1, &top);
        fail(fmt::format("{}[{}] must be a string", path(), i));
      }
      std::string_view s;
      check(ev.get_string().get(s));
      out.emplace_back(s);
      ++i;
    }
  }
  if (out.size() > max) fail(fmt::format("{} holds at most {} items", path(), max));
  return out;
}

reader field::object() {
  not_null();
  if (text_ != nullptr) fail(fmt::format("{} must be an object", path()));
  od::value& v = value_of(value_);
  if (type_of(v) != od::json_type::object) wrong("an object");
  od::object obj;
  check(v.get_object().get(obj));
  reader r;
  r.parent_ = &parent_;
  r.name_ = name_;
  r.depth_ = parent_.depth_ + 1;
  new (r.object_) od::object(obj);
  return r;
}

void field::each_object(std::size_t max, void (*cb)(void*, std::size_t, reader&), void* ctx) {
  not_null();
  if (text_ != nullptr) fail(fmt::format("{} must be an array", path()));
  od::value& v = value_of(value_);
  if (type_of(v) != od::json_type::array) wrong("an array");
  od::array arr;
  check(v.get_array().get(arr));
  auto bad_count = [&] { fail(fmt::format("{} must hold 1..{} items", path(), max)); };
  std::size_t i = 0;
  for (auto element : arr) {
    if (i == max) bad_count();
    check(element.error());
    od::value& ev = element.value_unsafe();
    reader r;
    r.parent_ = &parent_;
    r.name_ = name_;
    r.index_ = i;
    r.depth_ = parent_.depth_ + 2;
    if (type_of(ev) != od::json_type::object) {
      walk_frame top{nullptr, {}, 0, false, {}};
      validate(ev, parent_.depth_ + 1, &top);
      fail(fmt::format("{} must be an object", r.where()));
    }
    od::object obj;
    check(ev.get_object().get(obj));
    new (r.object_) od::object(obj);
    cb(ctx, i, r);
    ++i;
  }
  if (i == 0) bad_count();
}

void field::string_map() {
  not_null();
  if (text_ != nullptr) fail(fmt::format("{} must be an object", path()));
  od::value& v = value_of(value_);
  if (type_of(v) != od::json_type::object) wrong("an object");
  od::object obj;
  check(v.get_object().get(obj));
  const std::string where = path();
  walk_frame top{nullptr, {}, 0, false, where};
  const std::size_t first = t_state.keys.size();
  for (auto member : obj) {
    od::field fl;
    check(std::move(member).get(fl));
    std::string_view key;
    check(fl.unescaped_key().get(key));
    t_state.keys.push_back(key);
    od::value hv = fl.value();
    if (type_of(hv) != od::json_type::string) {
      walk_frame f{&top, key, 0, false, {}};
      validate(hv, parent_.depth_ + 1, &f);
      fail(fmt::format("{}.{} must be a string", where, key));
    }
    std::string_view s;
    check(hv.get_string().get(s));
  }
  check_unique(first, &top);
  t_state.keys.resize(first);
}

namespace {

// raw, validated, without insignificant whitespace.
std::string minify(std::string_view raw) {
  // Most clients send compact JSON: then a copy. (Valid JSON has no byte
  // below 0x20 in strings, so any byte <= ' ' may be whitespace.)
  if (std::none_of(raw.begin(), raw.end(),
                   [](char c) { return static_cast<unsigned char>(c) <= ' '; })) {
    return std::string(raw);
  }
  std::string out(raw.size(), '\0');
  std::size_t n = 0;
  if (simdjson::minify(raw.data(), raw.size(), out.data(), n) != simdjson::SUCCESS) malformed();
  out.resize(n);
  return out;
}

}  // namespace

std::string field::json() {
  not_null();
  if (text_ != nullptr) {
    std::string out;
    append_json_string(out, *text_);
    return out;
  }
  od::value& v = value_of(value_);
  const std::string where = path();
  walk_frame top{nullptr, {}, 0, false, where};
  std::string_view raw;
  switch (type_of(v)) {
    case od::json_type::object: {
      // The text first (raw_json skips to the end unchecked), then back to
      // the start to validate it all.
      if (parent_.depth_ + 1 > k_max_json_depth) too_deep();
      od::object obj;
      check(v.get_object().get(obj));
      check(obj.raw_json().get(raw));
      bool ignored = false;
      check(obj.reset().get(ignored));
      const std::size_t first = t_state.keys.size();
      walk_frame f{&top, {}, 0, false, {}};
      for (auto member : obj) {
        od::field fl;
        check(std::move(member).get(fl));
        std::string_view key;
        check(fl.unescaped_key().get(key));
        t_state.keys.push_back(key);
        f.key = key;
        validate(fl.value(), parent_.depth_ + 1, &f);
      }
      check_unique(first, &top);
      t_state.keys.resize(first);
      break;
    }
    case od::json_type::array: {
      if (parent_.depth_ + 1 > k_max_json_depth) too_deep();
      od::array arr;
      check(v.get_array().get(arr));
      check(arr.raw_json().get(raw));
      bool ignored = false;
      check(arr.reset().get(ignored));
      walk_frame f{&top, {}, 0, true, {}};
      for (auto element : arr) {
        od::value ev;
        check(std::move(element).get(ev));
        validate(ev, parent_.depth_ + 1, &f);
        ++f.index;
      }
      break;
    }
    default:
      raw = trim_end(v.raw_json_token());
      validate(v, parent_.depth_, &top);
      break;
  }
  return minify(raw);
}

std::string field::object_text_of(void (*cb)(void*, reader&), void* ctx) {
  not_null();
  if (text_ != nullptr) fail(fmt::format("{} must be an object", path()));
  od::value& v = value_of(value_);
  if (type_of(v) != od::json_type::object) wrong("an object");
  od::object obj;
  check(v.get_object().get(obj));
  std::string_view raw;
  check(obj.raw_json().get(raw));
  bool ignored = false;
  check(obj.reset().get(ignored));
  reader r;
  r.parent_ = &parent_;
  r.name_ = name_;
  r.depth_ = parent_.depth_ + 1;
  new (r.object_) od::object(obj);
  cb(ctx, r);
  return minify(raw);
}

// ---- json_field ---------------------------------------------------------------

result<std::string> json_field(std::string_view doc_text, std::string_view dot_path) {
  std::string& copy = t_state.copy;
  copy.reserve(doc_text.size() + k_json_padding);
  copy.assign(doc_text);
  try {
    od::document& doc = start(copy);
    od::json_type type;
    check(doc.type().get(type));
    validate_document(doc, type, "");
    if (type != od::json_type::object) return make_error(errc::not_found, "absent");
    doc.rewind();
    od::value v;
    check(doc.get_value().get(v));
    std::string_view rest = dot_path;
    for (;;) {
      auto dot = rest.find('.');
      const std::string_view name = rest.substr(0, dot);
      if (type_of(v) != od::json_type::object) return make_error(errc::not_found, "absent");
      od::object obj;
      check(v.get_object().get(obj));
      bool found = false;
      for (auto member : obj) {
        od::field fl;
        check(std::move(member).get(fl));
        std::string_view key;
        check(fl.unescaped_key().get(key));
        if (key == name) {
          v = fl.value();
          found = true;
          break;
        }
      }
      if (!found) return make_error(errc::not_found, "absent");
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    switch (type_of(v)) {
      case od::json_type::null:
        return make_error(errc::not_found, "null");
      case od::json_type::string: {
        std::string_view s;
        check(v.get_string().get(s));
        return std::string(s);
      }
      case od::json_type::number:
        return std::string(trim_end(v.raw_json_token()));
      case od::json_type::boolean: {
        bool b = false;
        check(v.get_bool().get(b));
        return std::string(b ? "true" : "false");
      }
      default:
        return make_error(errc::invalid_argument, "names an object or array, not a value");
    }
  } catch (const bad_input&) {
    return make_error(errc::invalid_argument, "the document is not JSON");
  }
}

}  // namespace onceq::http
