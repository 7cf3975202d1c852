#include "http/params/params.hpp"

#include <cstdint>
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

void throw_bad_input(std::string message) {
  throw bad_input{std::move(message)};
}

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

}  // namespace onceq::http
