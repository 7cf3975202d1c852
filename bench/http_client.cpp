#include "bench/http_client.hpp"

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <stdexcept>

namespace onceq::bench {

namespace beast = boost::beast;
namespace http = beast::http;

constexpr std::size_t k_read_buffer = 64u << 10;

// Blocking sockets, not an io_context: a request is one sendmsg() and
// usually one recv(), the two system calls a hiredis client makes for an
// XADD. The Asio version cost the client 2.4x hiredis's CPU per one-message
// produce (docs/BENCHMARKS.md, "Seventh session"), CPU taken from the
// server on a two-core machine.
http_client::http_client(std::string host, int port) : host_(std::move(host)), port_(port) {
  connect();
}

http_client::~http_client() {
  close_socket();
}

void http_client::close_socket() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  timeout_set_ = std::chrono::milliseconds(-1);
}

void http_client::connect() {
  close_socket();
  buffer_.clear();
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port_));
  if (::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1) {
    close_socket();
    throw std::runtime_error(fmt::format("connect {}:{}: not an IPv4 address", host_, port_));
  }
  set_timeout(std::chrono::seconds(10));
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close_socket();
    throw std::runtime_error(fmt::format("connect {}:{}: {}", host_, port_, std::strerror(e)));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void http_client::set_timeout(std::chrono::milliseconds t) {
  if (t == timeout_set_) return;  // one setsockopt per change, not per request
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  timeout_set_ = t;
}

[[noreturn]] void http_client::fail(std::string_view what, http::verb method,
                                    std::string_view target) {
  close_socket();
  throw std::runtime_error(
      fmt::format("HTTP {} {}: {}", std::string(http::to_string(method)), target, what));
}

http_response& http_client::request(http::verb method, std::string_view target, std::string body,
                                    std::chrono::milliseconds timeout) {
  if (fd_ < 0) connect();
  set_timeout(timeout);
  // A timeout bounds each send and recv; the request as a whole is bounded
  // by the deadline checked between them.
  const auto deadline = std::chrono::steady_clock::now() + timeout;

  head_.clear();
  fmt::format_to(std::back_inserter(head_), "{} {} HTTP/1.1\r\nHost: {}\r\n",
                 std::string_view(http::to_string(method)), target, host_);
  if (!body.empty() || method == http::verb::post) {
    fmt::format_to(std::back_inserter(head_),
                   "Content-Type: application/json\r\nContent-Length: {}\r\n", body.size());
  }
  head_ += "\r\n";
  iovec iov[2] = {{head_.data(), head_.size()}, {body.data(), body.size()}};
  std::size_t at = 0;
  const std::size_t total = head_.size() + body.size();
  while (at < total) {
    // Skips what was sent already, across the two pieces.
    iovec part[2];
    int n = 0;
    std::size_t skip = at;
    for (auto& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      part[n++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
      skip = 0;
    }
    msghdr msg{};
    msg.msg_iov = part;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      fail(errno == EAGAIN ? "timed out" : std::strerror(errno), method, target);
    }
    at += static_cast<std::size_t>(sent);
  }

  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  parser.eager(true);
  for (;;) {
    if (buffer_.size() > 0) {
      beast::error_code ec;
      const auto used = parser.put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec && ec != http::error::need_more) fail(ec.message(), method, target);
      if (parser.is_done()) break;
      if (!ec && used > 0) continue;  // a header and part of the body
    }
    if (std::chrono::steady_clock::now() >= deadline) fail("timed out", method, target);
    // Room for a whole 40 KB consume answer in one recv.
    auto room = buffer_.prepare(k_read_buffer);
    const ssize_t got = ::recv(fd_, room.data(), room.size(), 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(errno == EAGAIN ? "timed out" : std::strerror(errno), method, target);
    }
    if (got == 0) fail("the server closed the connection", method, target);
    buffer_.commit(static_cast<std::size_t>(got));
  }
  auto res = parser.release();
  if (!res.keep_alive()) close_socket();
  last_.status = static_cast<int>(res.result_int());
  last_.body = std::move(res.body());
  if (const auto it = res.find("X-Onceq-Node"); it != res.end()) {
    last_.node.assign(it->value().data(), it->value().size());
  } else {
    last_.node.clear();
  }
  return last_;
}

}  // namespace onceq::bench
