#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

// One streaming GET (onceq's consume without max_messages): the answer's
// body is read as it arrives, line by line, on its own connection. Used by
// one thread.
class http_line_stream {
 public:
  // Connects, sends GET target and reads the answer's header; throws unless
  // it is 200.
  http_line_stream(std::string host, int port, std::string_view target);
  ~http_line_stream();
  http_line_stream(const http_line_stream&) = delete;
  http_line_stream& operator=(const http_line_stream&) = delete;

  // Moves up to `max` complete lines into `out` (cleared first), reading
  // for up to `wait` when none is buffered. Returns how many; 0 when the
  // wait ran out. Throws when the server ends the stream or on I/O errors.
  std::size_t read_lines(std::size_t max, std::chrono::milliseconds wait,
                         std::vector<std::string>& out);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace onceq::bench
