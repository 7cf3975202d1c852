#pragma once

// The one table mapping onceq::errc to an HTTP status and wire code
// (docs/API.md "Errors"), and the error response every part of http/ sends:
// body {"error":"<CODE>","message":"<text>"}, Content-Type application/json;
// 429 adds Retry-After (seconds) and "retry_after_ms" (the error's own
// retry_after_ms when set, else error_extras::retry_after_ms; a 503 gets
// them from the error, else 1 s); 401 adds WWW-Authenticate: Bearer; 405 adds
// Allow.

#include <span>
#include <string_view>

#include "base/clock.hpp"
#include "base/errc.hpp"
#include "http/message.hpp"

namespace onceq::http {

struct error_entry {
  errc code;
  bhttp::status status;
};

// Every errc, in enum order. errc::ok maps to 200.
std::span<const error_entry> error_table() noexcept;

// The status of a code; 500 for a value outside the enum.
bhttp::status status_of(errc code) noexcept;

struct error_extras {
  millis retry_after_ms = 0;  // 429: used when > 0 and the error carries no hint
  std::string_view allow;     // 405: the Allow header when non-empty
};

// The error body as JSON text (never throws on bad UTF-8 in message).
std::string error_body(const error& e, const error_extras& x = {});

// A complete error response (status from the table, body, headers above).
// The caller adds X-Request-Id and keep-alive.
response make_error_response(const error& e, unsigned version, const error_extras& x = {});

}  // namespace onceq::http
