#include "http/codec/common.hpp"

#include <fmt/format.h>

#include "broker/validation.hpp"
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
  if (!valid_topic_name(s)) fail(fmt::format("{} must match {}", f.path(), k_topic_name_pattern));
  return s;
}

std::string label_of(field& f) {
  std::string s(f.str());
  if (!valid_label(s)) {
    fail(fmt::format("{} must be 1..{} bytes", f.path(), k_max_label_bytes));
  }
  return s;
}

std::uint64_t token_of(field& f) {
  return static_cast<std::uint64_t>(f.integer(1, k_int_max));
}

}  // namespace codec_detail

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace onceq::http
