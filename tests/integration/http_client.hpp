#pragma once

// The integration tests' HTTP clients: client/http_client.hpp (one
// keep-alive connection, every call bounded by a timeout, a request that
// met a stale kept-alive connection sent once more) with the tests'
// defaults: 127.0.0.1, a 15 s timeout.
//
// Thread safety: none; use one client per thread.
// Errors: network failures and timeouts throw client::error (a
// std::system_error); HTTP error statuses are ordinary responses.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "client/http_client.hpp"

namespace onceq::itest {

using client::header_list;
using http_response = client::response;
using tls_client_options = client::tls_options;

inline client::options client_options(std::string host, std::uint16_t port,
                                      std::chrono::milliseconds timeout,
                                      std::optional<tls_client_options> tls = std::nullopt) {
  client::options o;
  o.host = std::move(host);
  o.port = port;
  o.timeout = timeout;
  o.tls = std::move(tls);
  return o;
}

// To 127.0.0.1:<port>, plain or TLS (every connection does a handshake
// within timeout).
class http_client : public client::http_client {
 public:
  explicit http_client(std::uint16_t port,
                       std::chrono::milliseconds timeout = std::chrono::seconds(15))
      : client::http_client(client_options("127.0.0.1", port, timeout)) {}
  http_client(std::uint16_t port, tls_client_options tls,
              std::chrono::milliseconds timeout = std::chrono::seconds(15))
      : client::http_client(client_options("127.0.0.1", port, timeout, std::move(tls))) {}
};

// To any host:port: cluster nodes that do not listen on 127.0.0.1 (a node
// in a network namespace).
class host_client : public client::http_client {
 public:
  host_client(std::string host, std::uint16_t port,
              std::chrono::milliseconds timeout = std::chrono::seconds(5))
      : client::http_client(client_options(std::move(host), port, timeout)) {}
  const std::string& host() const { return opts().host; }
  std::uint16_t port() const { return opts().port; }
};

// A streaming response read line by line as JSON (GET /v1/consume without
// max_messages), on its own connection. Destroying it closes the connection.
class ndjson_stream : public client::line_stream {
 public:
  ndjson_stream(std::uint16_t port, std::string_view method, std::string_view target,
                std::string_view body = {},
                std::chrono::milliseconds header_timeout = std::chrono::seconds(15))
      : client::line_stream(client_options("127.0.0.1", port, header_timeout), method, target,
                            body) {}
  // Over TLS.
  ndjson_stream(std::uint16_t port, const tls_client_options& tls, std::string_view method,
                std::string_view target, std::string_view body = {},
                std::chrono::milliseconds header_timeout = std::chrono::seconds(15))
      : client::line_stream(client_options("127.0.0.1", port, header_timeout, tls), method, target,
                            body) {}

  // The next non-empty line as JSON, or nullopt if none arrived within
  // timeout or the response ended.
  std::optional<nlohmann::json> next(std::chrono::milliseconds timeout) {
    auto line = next_line(timeout);
    if (!line) return std::nullopt;
    return nlohmann::json::parse(*line);
  }
};

}  // namespace onceq::itest
