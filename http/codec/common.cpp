#include "http/codec/common.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "http/codec/detail.hpp"

namespace onceq::http {

namespace codec_detail {

[[noreturn]] void required(const reader& r, std::string_view name) {
  fail(fmt::format("{} is required", r.path(name)));
}

[[noreturn]] void unknown(const reader& r, std::string_view name) {
  fail(fmt::format("unknown field '{}'", r.path(name)));
}

std::string topic_of(field& f) {
  std::string s(f.str());
  if (!valid_topic_name(s)) fail(fmt::format("{} must match [A-Za-z0-9._-]{{1,200}}", f.path()));
  return s;
}

std::string label_of(field& f) {
  std::string s(f.str());
  if (s.empty() || s.size() > k_max_label_bytes) {
    fail(fmt::format("{} must be 1..{} bytes", f.path(), k_max_label_bytes));
  }
  return s;
}

std::uint64_t token_of(field& f) {
  return static_cast<std::uint64_t>(f.integer(1, k_int_max));
}

}  // namespace codec_detail

bool valid_topic_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > k_max_label_bytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace onceq::http
