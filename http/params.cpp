#include "http/params.hpp"

#include <functional>
#include <set>
#include <utility>

#include <fmt/format.h>

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

result<jdoc> parse_query(std::string_view query) {
  // The pairs become JSON text, parsed like a body: one DOM for the codec.
  std::string text = "{";
  std::set<std::string, std::less<>> names;
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
    if (!names.insert(*name).second) {
      return make_error(errc::invalid_argument,
                        fmt::format("query parameter '{}' is given more than once", *name));
    }
    if (text.size() > 1) text.push_back(',');
    append_json_string(text, *name);
    text.push_back(':');
    append_json_string(text, *value);
  }
  text.push_back('}');
  jdoc doc;
  json_error e;
  if (!doc.parse_copy(std::move(text), &e)) {
    // Unreachable: the text is made of escaped, valid UTF-8 strings.
    return make_error(errc::internal, fmt::format("query string as JSON: {}", e.message));
  }
  return doc;
}

result<params> read_params(std::string_view body, std::string_view query) {
  std::size_t first = 0;
  while (first < body.size() && is_space(body[first])) ++first;
  params p;
  if (first == body.size()) {
    auto q = parse_query(query);
    if (!q.ok()) return std::move(q).err();
    p.doc = std::move(*q);
    p.from_query = true;
    return p;
  }
  json_error e;
  if (!p.doc.parse(body, &e)) {
    switch (e.code) {
      case json_errc::too_deep:
        return make_error(errc::invalid_argument,
                          fmt::format("JSON body nested deeper than {} levels", k_max_json_depth));
      case json_errc::duplicate_key:
        return make_error(errc::invalid_argument,
                          fmt::format("duplicate field '{}' in the JSON body", e.path));
      case json_errc::syntax:
      case json_errc::too_large:
        break;
    }
    return make_error(errc::invalid_argument, "malformed JSON body");
  }
  if (!p.obj().is_object()) {
    return make_error(errc::invalid_argument, "the JSON body must be an object");
  }
  return p;
}

}  // namespace onceq::http
