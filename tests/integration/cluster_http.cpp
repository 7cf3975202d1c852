#include "cluster_http.hpp"

#include <limits>
#include <optional>
#include <system_error>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace onceq::itest {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Runs one asynchronous operation on ioc to completion and returns its error.
template <class Start>
beast::error_code run_one(net::io_context& ioc, Start&& start) {
  beast::error_code result;
  ioc.restart();
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.run();
  return result;
}

}  // namespace

struct host_client::impl {
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

host_client::host_client(std::string host, std::uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()), host_(std::move(host)), port_(port), timeout_(timeout) {}

host_client::~host_client() {
  close();
}

void host_client::close() {
  if (!impl_->stream) return;
  beast::error_code ignored;
  impl_->stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  impl_->stream->close();
  impl_->stream.reset();
  impl_->buffer.consume(impl_->buffer.size());
}

http_response host_client::request(std::string_view method, std::string_view target,
                                   std::string_view body, const header_list& headers) {
  http::request<http::string_body> req;
  const auto verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    req.method_string(method);
  } else {
    req.method(verb);
  }
  req.target(target);
  req.version(11);
  req.set(http::field::host, host_);
  req.keep_alive(true);
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty()) {
    req.body() = std::string(body);
    if (req.find(http::field::content_type) == req.end()) {
      req.set(http::field::content_type, "application/json");
    }
  }
  if (!body.empty() || verb == http::verb::post || verb == http::verb::put) req.prepare_payload();

  const std::string what =
      std::string(method) + " http://" + host_ + ":" + std::to_string(port_) + std::string(target);
  for (int attempt = 0;; ++attempt) {
    const bool reused = impl_->stream.has_value();
    if (!reused) {
      impl_->stream.emplace(impl_->ioc);
      impl_->stream->expires_after(timeout_);
      const tcp::endpoint ep(net::ip::make_address(host_), port_);
      auto ec =
          run_one(impl_->ioc, [&](auto h) { impl_->stream->async_connect(ep, std::move(h)); });
      if (ec) {
        close();
        throw std::system_error(ec, "connect " + what);
      }
      beast::error_code ignored;
      impl_->stream->socket().set_option(tcp::no_delay(true), ignored);
    }
    auto& s = *impl_->stream;
    s.expires_after(timeout_);
    auto write_ec = run_one(impl_->ioc, [&](auto h) { http::async_write(s, req, std::move(h)); });
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    s.expires_after(timeout_);
    auto read_ec = run_one(
        impl_->ioc, [&](auto h) { http::async_read(s, impl_->buffer, parser, std::move(h)); });
    if (read_ec) {
      const bool nothing_received = !parser.got_some();
      close();
      if (reused && nothing_received && attempt == 0 && read_ec != beast::error::timeout) {
        continue;  // a stale kept-alive connection
      }
      throw std::system_error(write_ec ? write_ec : read_ec, what);
    }
    auto res = parser.release();
    http_response out;
    out.status = res.result_int();
    for (const auto& f : res.base()) {
      out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    out.body = std::move(res.body());
    if (!res.keep_alive() || write_ec) close();
    return out;
  }
}

}  // namespace onceq::itest
