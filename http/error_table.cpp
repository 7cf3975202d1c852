#include "http/error_table.hpp"

#include <array>

#include <nlohmann/json.hpp>

namespace onceq::http {

namespace {

using bhttp::status;

// Indexed by the errc value: adding a code means adding a row here, and the
// unit test checks that every row sits at its own index.
constexpr std::array<error_entry, 13> k_table = {{
    {errc::ok, status::ok},
    {errc::invalid_argument, status::bad_request},
    {errc::unauthenticated, status::unauthorized},
    {errc::permission_denied, status::forbidden},
    {errc::not_found, status::not_found},
    {errc::method_not_allowed, status::method_not_allowed},
    {errc::already_exists, status::conflict},
    {errc::failed_precondition, status::conflict},
    {errc::payload_too_large, status::payload_too_large},
    {errc::resource_exhausted, status::too_many_requests},
    {errc::unavailable, status::service_unavailable},
    {errc::internal, status::internal_server_error},
    {errc::would_block, status::service_unavailable},
}};

}  // namespace

std::span<const error_entry> error_table() noexcept {
  return k_table;
}

bhttp::status status_of(errc code) noexcept {
  auto i = static_cast<std::size_t>(code);
  if (i >= k_table.size()) return status::internal_server_error;
  return k_table[i].status;
}

namespace {

// 503 without a hint from the error: the store's resume loop runs about
// every 500 ms, so a second is soon enough and not a hammering.
constexpr millis k_default_unavailable_retry_ms = 1'000;

// The error's own hint wins (the broker knows e.g. how long a full topic
// needs); else the caller's default for 429, and one second for every 503
// (shutting down behind a load balancer, or the store waiting for the disk).
millis retry_hint(const error& e, const error_extras& x) noexcept {
  const bool may_retry = e.code == errc::resource_exhausted || e.code == errc::unavailable;
  if (may_retry && e.retry_after_ms > 0) return e.retry_after_ms;
  if (e.code == errc::resource_exhausted && x.retry_after_ms > 0) return x.retry_after_ms;
  if (e.code == errc::unavailable) return k_default_unavailable_retry_ms;
  return 0;
}

}  // namespace

std::string error_body(const error& e, const error_extras& x) {
  nlohmann::json body = {{"error", to_string(e.code)}, {"message", e.message}};
  if (const millis hint = retry_hint(e, x); hint > 0) body["retry_after_ms"] = hint;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

response make_error_response(const error& e, unsigned version, const error_extras& x) {
  response res{status_of(e.code), version};
  res.set(bhttp::field::content_type, k_json_type);
  if (const millis hint = retry_hint(e, x); hint > 0) {
    // Retry-After counts whole seconds; round up so that a client honouring
    // it never comes back earlier than retry_after_ms.
    res.set(bhttp::field::retry_after, std::to_string((hint + 999) / 1000));
  }
  if (e.code == errc::unauthenticated) {
    // RFC 6750: a 401 names the scheme the client should use.
    res.set(bhttp::field::www_authenticate, "Bearer");
  }
  if (e.code == errc::method_not_allowed && !x.allow.empty()) {
    res.set(bhttp::field::allow, x.allow);
  }
  res.body() = error_body(e, x);
  res.prepare_payload();
  return res;
}

}  // namespace onceq::http
