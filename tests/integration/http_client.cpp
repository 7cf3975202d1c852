#include "http_client.hpp"

#include <limits>
#include <stdexcept>
#include <system_error>

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace onceq::itest {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) {
      return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Runs one asynchronous operation on ioc to completion and returns its error.
template <class Start>
beast::error_code run_one(net::io_context& ioc, Start&& start) {
  beast::error_code result;
  ioc.restart();
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.run();
  return result;
}

[[noreturn]] void fail(beast::error_code ec, std::string_view what) {
  throw std::system_error(ec, std::string(what));
}

void connect(net::io_context& ioc, beast::tcp_stream& stream, std::uint16_t port,
             std::chrono::milliseconds timeout) {
  stream.expires_after(timeout);
  auto ec = run_one(ioc, [&](auto handler) {
    stream.async_connect(tcp::endpoint(net::ip::address_v4::loopback(), port), std::move(handler));
  });
  if (ec) fail(ec, std::string("connect to 127.0.0.1:").append(std::to_string(port)));
  beast::error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
}

http::request<http::string_body> make_request(std::string_view method, std::string_view target,
                                              std::string_view body, const header_list& headers) {
  http::request<http::string_body> req;
  auto verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    req.method_string(method);
  } else {
    req.method(verb);
  }
  req.target(target);
  req.version(11);
  req.set(http::field::host, "127.0.0.1");
  req.keep_alive(true);
  bool has_content_type = false;
  for (const auto& [name, value] : headers) {
    req.set(name, value);
    if (iequals(name, "content-type")) has_content_type = true;
  }
  if (!body.empty()) {
    req.body() = std::string(body);
    if (!has_content_type) req.set(http::field::content_type, "application/json");
  }
  if (!body.empty() || verb == http::verb::post || verb == http::verb::put) req.prepare_payload();
  return req;
}

template <class Fields>
header_list copy_headers(const Fields& fields) {
  header_list out;
  for (const auto& f : fields)
    out.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return out;
}

std::shared_ptr<net::ssl::context> make_client_context(const tls_client_options& tls) {
  auto ctx = std::make_shared<net::ssl::context>(net::ssl::context::tls_client);
  if (tls.ca_file.empty()) {
    ctx->set_verify_mode(net::ssl::verify_none);
  } else {
    ctx->load_verify_file(tls.ca_file);
    ctx->set_verify_mode(net::ssl::verify_peer);
  }
  return ctx;
}

}  // namespace

// One client connection, plain or TLS; the TLS layer runs over the
// tcp_stream, which carries every timeout.
struct client_connection {
  client_connection(std::uint16_t p, const tls_client_options* tls_opts) : port(p) {
    if (tls_opts != nullptr) {
      ctx = make_client_context(*tls_opts);
      verify = !tls_opts->ca_file.empty();
    }
  }

  void open(std::chrono::milliseconds timeout) {
    connect(ioc, tcp, port, timeout);
    if (!ctx) return;
    tls.emplace(tcp, *ctx);
    if (verify) X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tls->native_handle()), "127.0.0.1");
    tcp.expires_after(timeout);
    auto ec = run_one(ioc, [&](auto handler) {
      tls->async_handshake(net::ssl::stream_base::client, std::move(handler));
    });
    if (ec) {
      close();
      fail(ec, std::string("TLS handshake with 127.0.0.1:").append(std::to_string(port)));
    }
  }

  // No close_notify: the tests do not need one and the server must cope.
  void close() {
    beast::error_code ignored;
    tcp.socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp.close();
    tls.reset();
  }

  // Calls f with the stream to speak HTTP on.
  template <class F>
  void with_stream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(tcp);
    }
  }

  net::io_context ioc;
  beast::tcp_stream tcp{ioc};
  std::shared_ptr<net::ssl::context> ctx;  // null: plain HTTP
  bool verify = false;
  std::optional<net::ssl::stream<beast::tcp_stream&>> tls;
  std::uint16_t port;
};

std::string http_response::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return v;
  }
  return {};
}

bool http_response::has_header(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequals(h.first, name)) return true;
  }
  return false;
}

std::vector<nlohmann::json> http_response::ndjson() const {
  std::vector<nlohmann::json> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    std::string_view line(body.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    pos = end + 1;
  }
  return out;
}

struct http_client::impl {
  impl(std::uint16_t p, const tls_client_options* tls) : conn(p, tls) {}
  client_connection conn;
  beast::flat_buffer buffer;
  bool connected = false;
};

http_client::http_client(std::uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>(port, nullptr)), timeout_(timeout) {}

http_client::http_client(std::uint16_t port, tls_client_options tls,
                         std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>(port, &tls)), timeout_(timeout) {}

http_client::~http_client() {
  close();
}

void http_client::close() {
  if (!impl_->connected) return;
  impl_->conn.close();
  impl_->buffer.consume(impl_->buffer.size());
  impl_->connected = false;
}

http_response http_client::request(std::string_view method, std::string_view target,
                                   std::string_view body, const header_list& headers) {
  auto req = make_request(method, target, body, headers);
  for (int attempt = 0;; ++attempt) {
    const bool reused = impl_->connected;
    auto& conn = impl_->conn;
    if (!impl_->connected) {
      conn.open(timeout_);
      impl_->connected = true;
    }
    conn.tcp.expires_after(timeout_);
    auto write_ec = run_one(conn.ioc, [&](auto handler) {
      conn.with_stream([&](auto& s) { http::async_write(s, req, std::move(handler)); });
    });

    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    // Even after a failed write the server may have answered (e.g. 413 and
    // close before reading the whole body): try to read that answer.
    conn.tcp.expires_after(timeout_);
    auto read_ec = run_one(conn.ioc, [&](auto handler) {
      conn.with_stream(
          [&](auto& s) { http::async_read(s, impl_->buffer, parser, std::move(handler)); });
    });
    if (read_ec) {
      const bool nothing_received = !parser.got_some();
      close();
      if (reused && nothing_received && attempt == 0 && read_ec != beast::error::timeout) {
        continue;  // a stale kept-alive connection: retry once on a fresh one
      }
      fail(write_ec ? write_ec : read_ec, std::string(method) + " " + std::string(target));
    }
    auto res = parser.release();
    http_response out;
    out.status = res.result_int();
    out.headers = copy_headers(res.base());
    out.body = std::move(res.body());
    if (!res.keep_alive() || write_ec) close();
    return out;
  }
}

struct ndjson_stream::impl {
  impl(std::uint16_t p, const tls_client_options* tls) : conn(p, tls) {
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  }
  client_connection conn;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
};

ndjson_stream::ndjson_stream(std::uint16_t port, std::string_view method, std::string_view target,
                             std::string_view body, std::chrono::milliseconds header_timeout)
    : impl_(std::make_unique<impl>(port, nullptr)) {
  start(method, target, body, header_timeout);
}

ndjson_stream::ndjson_stream(std::uint16_t port, const tls_client_options& tls,
                             std::string_view method, std::string_view target,
                             std::string_view body, std::chrono::milliseconds header_timeout)
    : impl_(std::make_unique<impl>(port, &tls)) {
  start(method, target, body, header_timeout);
}

void ndjson_stream::start(std::string_view method, std::string_view target, std::string_view body,
                          std::chrono::milliseconds header_timeout) {
  auto& conn = impl_->conn;
  conn.open(header_timeout);
  auto req = make_request(method, target, body, {});
  conn.tcp.expires_after(header_timeout);
  auto ec = run_one(conn.ioc, [&](auto handler) {
    conn.with_stream([&](auto& s) { http::async_write(s, req, std::move(handler)); });
  });
  if (ec) fail(ec, "stream request");
  ec = run_one(conn.ioc, [&](auto handler) {
    conn.with_stream([&](auto& s) {
      http::async_read_header(s, impl_->buffer, impl_->parser, std::move(handler));
    });
  });
  if (ec) fail(ec, "stream response header");
  conn.tcp.expires_never();
  status_ = impl_->parser.get().result_int();
  head_.status = status_;
  head_.headers = copy_headers(impl_->parser.get().base());
  ended_ = impl_->parser.is_done();
}

ndjson_stream::~ndjson_stream() {
  impl_->conn.close();
}

std::optional<nlohmann::json> ndjson_stream::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = pending_.find('\n');
    while (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) return nlohmann::json::parse(line);
      nl = pending_.find('\n');
    }
    if (ended_) {
      if (pending_.empty()) return std::nullopt;
      std::string line = std::move(pending_);
      pending_.clear();
      return nlohmann::json::parse(line);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;

    char chunk[8192];
    impl_->parser.get().body().data = chunk;
    impl_->parser.get().body().size = sizeof chunk;
    auto& conn = impl_->conn;
    net::steady_timer timer(conn.ioc);
    timer.expires_at(deadline);
    bool timed_out = false;
    beast::error_code read_ec;
    conn.ioc.restart();
    timer.async_wait([&](beast::error_code ec) {
      if (!ec) {
        timed_out = true;
        beast::error_code ignored;
        conn.tcp.socket().cancel(ignored);
      }
    });
    conn.with_stream([&](auto& s) {
      http::async_read_some(s, impl_->buffer, impl_->parser,
                            [&](beast::error_code ec, std::size_t) {
                              read_ec = ec;
                              timer.cancel();
                            });
    });
    conn.ioc.run();
    pending_.append(chunk, sizeof chunk - impl_->parser.get().body().size);
    if (read_ec == http::error::need_buffer) read_ec = {};
    if (impl_->parser.is_done()) {
      ended_ = true;
    } else if (read_ec) {
      if (timed_out && read_ec == net::error::operation_aborted) continue;  // deadline check
      ended_ = true;
    }
  }
}

}  // namespace onceq::itest
