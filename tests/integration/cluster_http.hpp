#pragma once

// An HTTP/1.1 client to any IPv4 host:port, for cluster nodes that do not
// listen on 127.0.0.1 (a node in a network namespace; http_client only
// speaks to loopback). One keep-alive connection, every call bounded by a
// timeout; a request that fails on a reused connection before any byte of
// the answer arrived is retried once on a fresh one.
//
// Thread safety: none; use one client per thread.
// Errors: network failures and timeouts throw std::system_error; HTTP error
// statuses are ordinary responses.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "http_client.hpp"

namespace onceq::itest {

class host_client {
 public:
  host_client(std::string host, std::uint16_t port,
              std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~host_client();
  host_client(const host_client&) = delete;
  host_client& operator=(const host_client&) = delete;

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
  const std::string& host() const { return host_; }
  std::uint16_t port() const { return port_; }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string host_;
  std::uint16_t port_;
  std::chrono::milliseconds timeout_;
};

}  // namespace onceq::itest
