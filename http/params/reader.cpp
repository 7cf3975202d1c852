#include "http/params/reader.hpp"

#include <charconv>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "http/json_write.hpp"
#include "http/params/detail.hpp"

namespace onceq::http {

using namespace params_detail;  // this folder's own simdjson walks

namespace {

constexpr std::int64_t k_int_max = std::numeric_limits<std::int64_t>::max();

// Strict decimal: an optional '-', then digits; nothing else.
std::optional<std::int64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.front() == '+') return std::nullopt;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

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

}  // namespace onceq::http
