#pragma once

// A small synchronous HTTP/1.1 client for the integration tests: one
// keep-alive connection to 127.0.0.1:<port>, every call bounded by a timeout.
//
// Thread safety: none; use one client per thread.
// Errors: network failures and timeouts throw std::system_error; HTTP error
// statuses are ordinary responses.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace onceq::itest {

using header_list = std::vector<std::pair<std::string, std::string>>;

// Speak TLS to the server (onceqd --tls-cert/--tls-key).
struct tls_client_options {
  // PEM certificate(s) to verify the server with; its certificate must also
  // name IP 127.0.0.1 (subjectAltName). Empty: no verification.
  std::string ca_file;
};

struct http_response {
  unsigned status = 0;
  header_list headers;  // as received, names in their original case
  std::string body;

  // The first header with that name (case-insensitive), or "" if none.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // The body as JSON; throws nlohmann::json::parse_error if it is not.
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  // The body as NDJSON: one JSON value per non-empty line.
  std::vector<nlohmann::json> ndjson() const;
};

class http_client {
 public:
  explicit http_client(std::uint16_t port,
                       std::chrono::milliseconds timeout = std::chrono::seconds(15));
  // Over TLS: every (re)connection does a handshake within timeout.
  http_client(std::uint16_t port, tls_client_options tls,
              std::chrono::milliseconds timeout = std::chrono::seconds(15));
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // Sends one request on the kept-alive connection (opening one if needed)
  // and reads the whole response. A request that fails on a reused
  // connection before any byte of the answer arrived is retried once on a
  // fresh connection (the server may have closed an idle one).
  http_response request(std::string_view method, std::string_view target,
                        std::string_view body = {}, const header_list& headers = {});

  http_response get(std::string_view target, const header_list& headers = {}) {
    return request("GET", target, {}, headers);
  }
  http_response post(std::string_view target, const nlohmann::json& body,
                     const header_list& headers = {}) {
    return request("POST", target, body.dump(), headers);
  }

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  void close();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::chrono::milliseconds timeout_;
};

// A streaming response read line by line (GET /v1/consume without
// max_messages), on its own connection. Destroying it closes the connection.
class ndjson_stream {
 public:
  ndjson_stream(std::uint16_t port, std::string_view method, std::string_view target,
                std::string_view body = {},
                std::chrono::milliseconds header_timeout = std::chrono::seconds(15));
  // Over TLS.
  ndjson_stream(std::uint16_t port, const tls_client_options& tls, std::string_view method,
                std::string_view target, std::string_view body = {},
                std::chrono::milliseconds header_timeout = std::chrono::seconds(15));
  ~ndjson_stream();
  ndjson_stream(const ndjson_stream&) = delete;
  ndjson_stream& operator=(const ndjson_stream&) = delete;

  unsigned status() const { return status_; }
  const http_response& head() const { return head_; }  // status and headers; body empty
  // The next non-empty line as JSON, or nullopt if none arrived within
  // timeout or the response ended.
  std::optional<nlohmann::json> next(std::chrono::milliseconds timeout);
  bool ended() const { return ended_; }

 private:
  void start(std::string_view method, std::string_view target, std::string_view body,
             std::chrono::milliseconds header_timeout);

  struct impl;
  std::unique_ptr<impl> impl_;
  unsigned status_ = 0;
  http_response head_;
  std::string pending_;
  bool ended_ = false;
};

}  // namespace onceq::itest
