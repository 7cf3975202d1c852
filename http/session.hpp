#pragma once

// One HTTP/1.1 connection: reads requests one after another (keep-alive;
// pipelined requests are answered in order), hands each to the router and
// writes its answer, or streams chunked NDJSON for a streamed consume.
//
// Limits (http_options): max_body_bytes -> 413 PAYLOAD_TOO_LARGE, then
// close; max_header_bytes -> 400, then close; idle_timeout_ms between
// requests and while a body arrives; write_timeout_ms per write. Malformed
// HTTP gets 400 and the connection closes. "Expect: 100-continue" is
// answered before the body is read.
//
// Threading: everything runs on the session's strand (the socket's
// executor); the router's runner calls complete back onto it. shutdown()
// may be called from any thread.

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "http/router.hpp"
#include "http/session_registry.hpp"

namespace onceq::http {

namespace asio = boost::asio;
namespace beast = boost::beast;

class session final : public std::enable_shared_from_this<session> {
 public:
  session(asio::ip::tcp::socket socket, router& r, std::shared_ptr<session_registry> registry);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Registers with the registry and starts serving on the socket's executor.
  void start();

  // Closes the connection if it waits for a request; otherwise it closes
  // after the answer being prepared (a stream ends at its next poll).
  void shutdown();

 private:
  asio::awaitable<void> run();
  asio::awaitable<bool> write(response& res);
  asio::awaitable<void> send_stream(reply r);
  asio::awaitable<void> watch_peer();
  asio::awaitable<void> reject(const error& e, unsigned version, std::string request_id);
  asio::awaitable<void> close(bool drain);

  std::shared_ptr<session_registry> registry_;
  const http_options& opts_;  // owned by registry_
  router& router_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::uint64_t id_ = 0;
  bool registered_ = false;
  bool reading_ = false;    // waiting for a request: shutdown() closes at once
  bool closing_ = false;    // close after the current answer
  bool peer_gone_ = false;  // stream mode: the client closed its side
};

}  // namespace onceq::http
