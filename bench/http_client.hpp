#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace onceq::bench {

struct http_response {
  int status = 0;
  std::string body;
  std::string node;  // X-Onceq-Node (a cluster node's id), "" if absent
};

// A blocking HTTP/1.1 keep-alive client on one connection (a plain socket,
// Beast's parser for the answer), with a deadline on every request. One request at a time, no
// pipelining. Used by one thread. Throws std::runtime_error on connect/IO errors and timeouts; it
// never retries a request by itself (a produce retry is the caller's decision).
//
// Not client/http_client.hpp, on purpose: this is the request driver of the
// measured load, one sendmsg and one recv per request (see http_client.cpp);
// the streaming consumer, which has no per-request cost, uses
// client::line_stream.
class http_client {
 public:
  http_client(std::string host, int port);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // Sends `body` (JSON, may be empty) and returns the answer. The returned
  // reference stays valid until the next call; callers may move the body out.
  http_response& request(boost::beast::http::verb method, std::string_view target, std::string body,
                         std::chrono::milliseconds timeout);

 private:
  void connect();
  void close_socket();
  // SO_RCVTIMEO and SO_SNDTIMEO, set only when t differs from the last.
  void set_timeout(std::chrono::milliseconds t);
  [[noreturn]] void fail(std::string_view what, boost::beast::http::verb method,
                         std::string_view target);

  std::string host_;
  int port_;
  int fd_ = -1;
  std::chrono::milliseconds timeout_set_{-1};
  boost::beast::flat_buffer buffer_;
  std::string head_;
  http_response last_;
};

}  // namespace onceq::bench
