#pragma once

// The access log (--access-log): one line per answered request, written
// through onceq::log (component "access"). It records the method, the path
// with the query's keys but never their values (a value may be a token, a
// key or a message), the status, the duration, the body bytes and the
// request id. Request and response bodies and headers are never read here.
//
// Thread safety: stateless functions.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace onceq::http {

// "/v1/x?topic=a&max=5" -> "/v1/x?topic&max"; a path without query is kept.
std::string redact_target(std::string_view target);

struct access_entry {
  std::string_view method;
  std::string_view target;  // as received; redacted when written
  unsigned status = 0;
  std::chrono::steady_clock::duration duration{};
  std::int64_t bytes = -1;  // response body bytes; -1 = streamed, not counted
  std::string_view request_id;
};

void log_access(const access_entry& e);

}  // namespace onceq::http
