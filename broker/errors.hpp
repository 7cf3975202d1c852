#pragma once

// The core's error shapes, one home each (docs/API.md, "Errors").

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "base/result.hpp"

namespace onceq {

// Bad input: nothing changes.
inline error invalid(std::string message) {
  return make_error(errc::invalid_argument, std::move(message));
}

// Fencing: the caller is not (or no longer) the one who may do this.
inline error fenced(std::string message) {
  return make_error(errc::failed_precondition, std::move(message));
}

// A topic named in the URL (or by ack) that does not exist. Produce and
// consume name an unknown topic with invalid() instead (docs/API.md).
inline error topic_not_found(std::string_view name) {
  return make_error(errc::not_found, fmt::format("topic '{}' not found", name));
}

}  // namespace onceq
