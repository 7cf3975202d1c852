#include "bench/http_client.hpp"

#include <boost/asio/ip/tcp.hpp>
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

}  // namespace onceq::bench
