#include "bench/http_client.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace onceq::bench {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

constexpr std::size_t k_read_buffer = 64u << 10;

http_client::http_client(std::string host, int port)
    : host_(std::move(host)), port_(port), stream_(ioc_) {
  connect();
}

void http_client::connect() {
  beast::error_code ec;
  if (connected_) {
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    stream_.close();
  }
  connected_ = false;
  buffer_.clear();
  const net::ip::tcp::endpoint ep(net::ip::make_address(host_), static_cast<unsigned short>(port_));
  stream_.expires_after(std::chrono::seconds(10));
  stream_.async_connect(ep, [&](beast::error_code e) { ec = e; });
  ioc_.restart();
  ioc_.run();
  if (ec) throw std::runtime_error(fmt::format("connect {}:{}: {}", host_, port_, ec.message()));
  stream_.socket().set_option(net::ip::tcp::no_delay(true));
  connected_ = true;
}

http_response& http_client::request(http::verb method, std::string_view target, std::string body,
                                    std::chrono::milliseconds timeout) {
  if (!connected_) connect();
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, host_);
  req.keep_alive(true);
  if (!body.empty() || method == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  // Beast reads at most the buffer's free capacity per read: without room
  // a 40 KB consume answer takes ~80 reads of 512 bytes.
  if (buffer_.capacity() < k_read_buffer) buffer_.reserve(k_read_buffer);

  beast::error_code ec;
  stream_.expires_after(timeout);
  http::async_write(stream_, req, [&](beast::error_code e, std::size_t) {
    ec = e;
    if (ec) return;
    http::async_read(stream_, buffer_, parser, [&](beast::error_code e2, std::size_t) { ec = e2; });
  });
  ioc_.restart();
  ioc_.run();
  if (ec) {
    connected_ = false;
    stream_.close();
    throw std::runtime_error(
        fmt::format("HTTP {} {}: {}", std::string(http::to_string(method)), target, ec.message()));
  }
  auto res = parser.release();
  if (!res.keep_alive()) {
    connected_ = false;
    stream_.close();
  }
  last_.status = static_cast<int>(res.result_int());
  last_.body = std::move(res.body());
  return last_;
}

struct http_line_stream::impl {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  net::steady_timer timer{ioc};
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  std::size_t taken = 0;  // bytes of the body already returned as lines

  // Runs the I/O queued on ioc until it is done.
  void run() {
    ioc.restart();
    ioc.run();
  }
};

http_line_stream::http_line_stream(std::string host, int port, std::string_view target)
    : p_(std::make_unique<impl>()) {
  beast::error_code ec;
  const net::ip::tcp::endpoint ep(net::ip::make_address(host), static_cast<unsigned short>(port));
  p_->stream.expires_after(std::chrono::seconds(10));
  p_->stream.async_connect(ep, [&](beast::error_code e) { ec = e; });
  p_->run();
  if (ec) throw std::runtime_error(fmt::format("connect {}:{}: {}", host, port, ec.message()));
  p_->stream.socket().set_option(net::ip::tcp::no_delay(true));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, host);
  p_->parser.body_limit(boost::none);
  p_->buffer.reserve(k_read_buffer);
  http::async_write(p_->stream, req, [&](beast::error_code e, std::size_t) {
    ec = e;
    if (ec) return;
    http::async_read_header(p_->stream, p_->buffer, p_->parser,
                            [&](beast::error_code e2, std::size_t) { ec = e2; });
  });
  p_->run();
  if (ec) throw std::runtime_error(fmt::format("GET {}: {}", target, ec.message()));
  p_->stream.expires_never();
  if (p_->parser.get().result_int() != 200) {
    throw std::runtime_error(
        fmt::format("GET {}: status {}", target, p_->parser.get().result_int()));
  }
}

http_line_stream::~http_line_stream() = default;

std::size_t http_line_stream::read_lines(std::size_t max, std::chrono::milliseconds wait,
                                         std::vector<std::string>& out) {
  out.clear();
  std::string& body = p_->parser.get().body();
  auto take = [&] {
    while (out.size() < max) {
      const auto nl = body.find('\n', p_->taken);
      if (nl == std::string::npos) break;
      if (nl > p_->taken) out.emplace_back(body, p_->taken, nl - p_->taken);
      p_->taken = nl + 1;
    }
    // Drop what was returned: string_body's reader appends at the string's
    // current end, so erasing a prefix between reads is safe.
    if (p_->taken > 0) {
      body.erase(0, p_->taken);
      p_->taken = 0;
    }
  };
  take();
  if (!out.empty()) return out.size();
  if (p_->parser.is_done()) throw std::runtime_error("the server ended the stream");
  // One read, cancelled when the wait runs out (the connection stays open).
  beast::error_code ec;
  bool timed_out = false;
  p_->timer.expires_after(wait);
  p_->timer.async_wait([&](beast::error_code e) {
    if (e) return;
    timed_out = true;
    p_->stream.socket().cancel();
  });
  http::async_read_some(p_->stream, p_->buffer, p_->parser, [&](beast::error_code e, std::size_t) {
    ec = e;
    p_->timer.cancel();
  });
  p_->run();
  if (ec && !(timed_out && ec == net::error::operation_aborted)) {
    throw std::runtime_error(fmt::format("stream read: {}", ec.message()));
  }
  take();
  // A chunk arrives in several reads: take what has arrived meanwhile too,
  // without waiting, so that a batch is not cut into small ones.
  while (out.size() < max && !timed_out && p_->stream.socket().available() > 0) {
    http::async_read_some(p_->stream, p_->buffer, p_->parser,
                          [&](beast::error_code e, std::size_t) { ec = e; });
    p_->run();
    if (ec) throw std::runtime_error(fmt::format("stream read: {}", ec.message()));
    take();  // appends
  }
  return out.size();
}

}  // namespace onceq::bench
