#include "http/params.hpp"

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

// The deepest nesting of arrays/objects in JSON text, counting only
// brackets outside strings. Stops early once over limit.
int json_depth(std::string_view s, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) deepest = depth;
        if (deepest > limit) return deepest;
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
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

result<nlohmann::json> parse_query(std::string_view query) {
  nlohmann::json obj = nlohmann::json::object();
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
    if (obj.contains(*name)) {
      return make_error(errc::invalid_argument,
                        fmt::format("query parameter '{}' is given more than once", *name));
    }
    obj[*name] = std::move(*value);
  }
  return obj;
}

result<params> read_params(std::string_view body, std::string_view query) {
  std::size_t first = 0;
  while (first < body.size() && is_space(body[first])) ++first;
  params p;
  if (first == body.size()) {
    auto q = parse_query(query);
    if (!q.ok()) return std::move(q).err();
    p.obj = std::move(*q);
    p.from_query = true;
    return p;
  }
  if (json_depth(body, k_max_json_depth) > k_max_json_depth) {
    return make_error(errc::invalid_argument,
                      fmt::format("JSON body nested deeper than {} levels", k_max_json_depth));
  }
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(errc::invalid_argument, "malformed JSON body");
  if (!j.is_object()) return make_error(errc::invalid_argument, "the JSON body must be an object");
  p.obj = std::move(j);
  return p;
}

}  // namespace onceq::http
