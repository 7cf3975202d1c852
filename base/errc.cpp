#include "base/errc.hpp"

namespace onceq {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::ok:
      return "OK";
    case errc::invalid_argument:
      return "INVALID_ARGUMENT";
    case errc::unauthenticated:
      return "UNAUTHENTICATED";
    case errc::permission_denied:
      return "PERMISSION_DENIED";
    case errc::not_found:
      return "NOT_FOUND";
    case errc::method_not_allowed:
      return "METHOD_NOT_ALLOWED";
    case errc::already_exists:
      return "ALREADY_EXISTS";
    case errc::failed_precondition:
      return "FAILED_PRECONDITION";
    case errc::payload_too_large:
      return "PAYLOAD_TOO_LARGE";
    case errc::resource_exhausted:
      return "RESOURCE_EXHAUSTED";
    case errc::unavailable:
      return "UNAVAILABLE";
    case errc::internal:
      return "INTERNAL";
    case errc::would_block:
      return "UNAVAILABLE";
  }
  return "INTERNAL";
}

}  // namespace onceq
