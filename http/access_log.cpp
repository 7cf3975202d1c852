#include "http/access_log.hpp"

#include "base/log.hpp"

namespace onceq::http {

std::string redact_target(std::string_view target) {
  const auto q = target.find('?');
  std::string out(target.substr(0, q));
  if (q == std::string_view::npos) return out;
  out += '?';
  std::string_view rest = target.substr(q + 1);
  bool first = true;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (pair.empty()) continue;
    if (!first) out += '&';
    first = false;
    out += pair.substr(0, pair.find('='));
  }
  return out;
}

void log_access(const access_entry& e) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(e.duration).count();
  const std::string target = redact_target(e.target);
  if (e.bytes >= 0) {
    log(log_level::info, "access", "request",
        {{"method", std::string(e.method)},
         {"path", target},
         log_number("status", e.status),
         log_number("duration_us", micros),
         log_number("bytes", e.bytes),
         {"request_id", std::string(e.request_id)}});
  } else {
    log(log_level::info, "access", "request",
        {{"method", std::string(e.method)},
         {"path", target},
         log_number("status", e.status),
         log_number("duration_us", micros),
         {"request_id", std::string(e.request_id)}});
  }
}

}  // namespace onceq::http
