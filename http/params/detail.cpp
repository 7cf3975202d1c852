#include "http/params/detail.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace onceq::http::params_detail {

[[noreturn]] void fail(std::string message) {
  throw bad_input{std::move(message)};
}

[[noreturn]] void malformed() {
  fail("malformed JSON body");
}

[[noreturn]] void too_deep() {
  fail(fmt::format("JSON body nested deeper than {} levels", k_max_json_depth));
}

thread_local thread_state t_state;

namespace {

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

}  // namespace

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

void check_end(od::document& doc) {
  auto loc = doc.current_location();
  if (loc.error() != simdjson::OUT_OF_BOUNDS) malformed();
}

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

od::document& start(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  check(t_state.parser.iterate(text.data(), text.size(), text.size() + k_json_padding)
            .get(t_state.doc));
  t_state.keys.clear();
  t_state.end = text.data() + text.size();
  return t_state.doc;
}

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

}  // namespace onceq::http::params_detail
