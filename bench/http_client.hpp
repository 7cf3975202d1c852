#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace onceq::bench {

struct http_response {
  int status = 0;
  std::string body;
};

// A blocking HTTP/1.1 keep-alive client on one connection (Beast), with a
// deadline on every request. One request at a time, no pipelining. Used by
// one thread. Throws std::runtime_error on connect/IO errors and timeouts;
// it never retries a request by itself (a produce retry is the caller's
// decision).
class http_client {
 public:
  http_client(std::string host, int port);

  // Sends `body` (JSON, may be empty) and returns the answer. The returned
  // reference stays valid until the next call; callers may move the body out.
  http_response& request(boost::beast::http::verb method, std::string_view target, std::string body,
                         std::chrono::milliseconds timeout);

 private:
  void connect();

  std::string host_;
  int port_;
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
  http_response last_;
};

}  // namespace onceq::bench
