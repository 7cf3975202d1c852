#include "http/session_rules.hpp"

#include <fmt/format.h>
#include <boost/beast/http/error.hpp>

namespace onceq::http {

std::optional<error> refusal_of(const boost::system::error_code& ec, const http_options& opts) {
  namespace bhttp = boost::beast::http;
  if (ec == bhttp::error::body_limit) {
    return make_error(errc::payload_too_large,
                      fmt::format("request body is larger than {} bytes", opts.max_body_bytes));
  }
  if (ec == bhttp::error::header_limit) {
    return make_error(errc::invalid_argument,
                      fmt::format("request header is larger than {} bytes", opts.max_header_bytes));
  }
  const bool parser_error =
      ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
  if (parser_error && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return make_error(errc::invalid_argument,
                      fmt::format("malformed HTTP request: {}", ec.message()));
  }
  return std::nullopt;
}

}  // namespace onceq::http
