#include "client/http_client.hpp"

#include <limits>
#include <string>

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

namespace onceq::client {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// How often a wait asks options::cancelled.
constexpr milliseconds k_poll_slice{100};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string where(const options& o) {
  return (o.tls ? "https://" : "http://") + o.host + ":" + std::to_string(o.port);
}

http::request<http::string_body> make_request(const options& o, std::string_view method,
                                              std::string_view target, std::string_view body,
                                              const header_list& headers) {
  http::request<http::string_body> req;
  const auto verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    req.method_string(method);
  } else {
    req.method(verb);
  }
  req.target(target);
  req.version(11);
  req.set(http::field::host, o.host);
  req.keep_alive(true);
  if (!o.user_agent.empty()) req.set(http::field::user_agent, o.user_agent);
  if (!o.token.empty()) req.set(http::field::authorization, "Bearer " + o.token);
  bool has_content_type = false;
  for (const auto& [name, value] : headers) {
    req.set(name, value);
    if (iequals(name, "content-type")) has_content_type = true;
  }
  if (!body.empty()) {
    req.body() = std::string(body);
    if (!has_content_type) req.set(http::field::content_type, "application/json");
  }
  req.prepare_payload();
  return req;
}

template <class Fields>
header_list copy_headers(const Fields& fields) {
  header_list out;
  for (const auto& f : fields)
    out.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return out;
}

}  // namespace

// One connection, plain or TLS; the TLS layer runs over the tcp_stream,
// which carries every timeout.
struct connection {
  explicit connection(const options& o) : opts(o) {
    if (!o.tls) return;
    ctx.emplace(net::ssl::context::tls_client);
    if (o.tls->ca_file.empty()) {
      ctx->set_verify_mode(net::ssl::verify_none);
    } else {
      ctx->load_verify_file(o.tls->ca_file);
      ctx->set_verify_mode(net::ssl::verify_peer);
    }
  }
  ~connection() { close(); }

  // Runs one asynchronous operation to completion and returns its error; with
  // options::cancelled, asks it every k_poll_slice.
  template <class Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    bool done = false;
    ioc.restart();
    start([&result, &done](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    if (!opts.cancelled) {
      ioc.run();
      return result;
    }
    while (!done) {
      ioc.run_one_for(k_poll_slice);
      if (!done && opts.cancelled()) {
        close();
        ioc.run();  // lets the cancelled operation finish
        throw error(step::cancelled, std::make_error_code(std::errc::operation_canceled),
                    "cancelled");
      }
    }
    ioc.poll();  // the completed operation's cancelled timers
    return result;
  }

  void open(milliseconds timeout) {
    close();
    const std::string what = where(opts);
    beast::error_code ec;
    tcp::resolver::results_type addrs;
    const auto address = net::ip::make_address(opts.host, ec);
    const bool host_is_ip = !ec;
    if (host_is_ip) {
      addrs = tcp::resolver::results_type::create(tcp::endpoint(address, opts.port), opts.host,
                                                  std::to_string(opts.port));
    } else {
      tcp::resolver resolver(ioc);
      addrs = resolver.resolve(opts.host, std::to_string(opts.port), ec);
      if (ec) throw error(step::resolve, ec, "resolve " + what);
    }
    tcp.expires_after(timeout);
    ec = run([&](auto h) { tcp.async_connect(addrs, std::move(h)); });
    if (ec) {
      close();
      throw error(step::connect, ec, "connect to " + what);
    }
    open_ = true;
    beast::error_code ignored;
    tcp.socket().set_option(tcp::no_delay(true), ignored);
    if (!ctx) return;
    tls.emplace(tcp, *ctx);
    if (!opts.tls->ca_file.empty()) {
      if (host_is_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tls->native_handle()), opts.host.c_str());
      } else {
        SSL_set1_host(tls->native_handle(), opts.host.c_str());
        SSL_set_tlsext_host_name(tls->native_handle(), opts.host.c_str());
      }
    }
    tcp.expires_after(timeout);
    ec = run([&](auto h) { tls->async_handshake(net::ssl::stream_base::client, std::move(h)); });
    if (ec) {
      close();
      throw error(step::tls_handshake, ec, "TLS handshake with " + what);
    }
  }

  // No close_notify: nothing waits for one, and the server must cope.
  void close() {
    if (open_) {
      beast::error_code ignored;
      tcp.socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
    tcp.close();
    tls.reset();
    buffer.consume(buffer.size());
    open_ = false;
  }

  bool is_open() const { return open_; }

  // Calls f with the stream to speak HTTP on.
  template <class F>
  void with_stream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(tcp);
    }
  }

  const options& opts;
  net::io_context ioc;
  beast::tcp_stream tcp{ioc};
  std::optional<net::ssl::context> ctx;  // none: plain HTTP
  std::optional<net::ssl::stream<beast::tcp_stream&>> tls;
  beast::flat_buffer buffer;
  bool open_ = false;
};

std::string response::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return v;
  }
  return {};
}

bool response::has_header(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequals(h.first, name)) return true;
  }
  return false;
}

std::vector<nlohmann::json> response::ndjson() const {
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

http_client::http_client(options opts)
    : opts_(std::move(opts)), conn_(std::make_unique<connection>(opts_)) {}

http_client::~http_client() = default;

void http_client::close() {
  conn_->close();
}

response http_client::request(std::string_view method, std::string_view target,
                              std::string_view body, const header_list& headers) {
  auto req = make_request(opts_, method, target, body, headers);
  auto& conn = *conn_;
  for (int attempt = 0;; ++attempt) {
    const bool reused = conn.is_open();
    if (!reused) conn.open(opts_.timeout);
    conn.tcp.expires_after(opts_.timeout);
    auto write_ec = conn.run([&](auto h) {
      conn.with_stream([&](auto& s) { http::async_write(s, req, std::move(h)); });
    });

    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    // Even after a failed write the server may have answered (e.g. 413 and
    // close before reading the whole body): try to read that answer.
    conn.tcp.expires_after(opts_.timeout);
    auto read_ec = conn.run([&](auto h) {
      conn.with_stream([&](auto& s) { http::async_read(s, conn.buffer, parser, std::move(h)); });
    });
    if (read_ec) {
      const bool nothing_received = !parser.got_some();
      conn.close();
      if (opts_.retry_stale_connection && reused && nothing_received && attempt == 0 &&
          read_ec != beast::error::timeout) {
        continue;  // a stale kept-alive connection: once more on a fresh one
      }
      throw error(step::request, write_ec ? write_ec : read_ec,
                  std::string(method) + " " + where(opts_) + std::string(target));
    }
    auto res = parser.release();
    response out;
    out.status = res.result_int();
    out.headers = copy_headers(res.base());
    out.body = std::move(res.body());
    if (!res.keep_alive() || write_ec) conn.close();
    return out;
  }
}

// The body is read into a string_body: its reader appends at the string's
// end, so lines taken from the front between reads are simply erased.
struct line_stream::impl {
  explicit impl(const options& o) : conn(o), timer(conn.ioc) {
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    conn.buffer.reserve(k_read_size);
  }
  static constexpr std::size_t k_read_size = 64u << 10;
  connection conn;
  net::steady_timer timer;
  http::response_parser<http::string_body> parser;
};

line_stream::line_stream(options opts, std::string_view method, std::string_view target,
                         std::string_view body, const header_list& headers)
    : opts_(std::move(opts)), impl_(std::make_unique<impl>(opts_)) {
  auto& conn = impl_->conn;
  conn.open(opts_.timeout);
  auto req = make_request(opts_, method, target, body, headers);
  const std::string what = std::string(method) + " " + where(opts_) + std::string(target);
  conn.tcp.expires_after(opts_.timeout);
  auto ec = conn.run(
      [&](auto h) { conn.with_stream([&](auto& s) { http::async_write(s, req, std::move(h)); }); });
  if (ec) throw error(step::request, ec, what);
  conn.tcp.expires_after(opts_.timeout);
  ec = conn.run([&](auto h) {
    conn.with_stream(
        [&](auto& s) { http::async_read_header(s, conn.buffer, impl_->parser, std::move(h)); });
  });
  if (ec) throw error(step::request, ec, what + " (answer header)");
  conn.tcp.expires_never();
  head_.status = impl_->parser.get().result_int();
  head_.headers = copy_headers(impl_->parser.get().base());
  ended_ = impl_->parser.is_done();
}

line_stream::~line_stream() = default;

bool line_stream::ended() const {
  return ended_ && impl_->parser.get().body().empty();
}

void line_stream::take(std::size_t max, std::vector<std::string>& out) {
  std::string& body = impl_->parser.get().body();
  std::size_t at = 0;
  while (out.size() < max) {
    const auto nl = body.find('\n', at);
    if (nl == std::string::npos) break;
    std::size_t end = nl;
    if (end > at && body[end - 1] == '\r') --end;
    if (end > at) out.emplace_back(body, at, end - at);
    at = nl + 1;
  }
  body.erase(0, at);
  if (ended_ && out.size() < max) {  // no newline left: the last line
    if (!body.empty() && body.back() == '\r') body.pop_back();
    if (!body.empty()) out.push_back(std::move(body));
    body.clear();
  }
}

void line_stream::read_some(std::optional<steady_clock::time_point> deadline) {
  auto& conn = impl_->conn;
  auto& parser = impl_->parser;
  // The timer cancels the read (the connection stays open): tcp_stream's
  // own timeout would close it.
  bool timed_out = false;
  if (deadline) {
    impl_->timer.expires_at(*deadline);
    impl_->timer.async_wait([&](beast::error_code ec) {
      if (ec) return;
      timed_out = true;
      beast::error_code ignored;
      conn.tcp.socket().cancel(ignored);
    });
  }
  auto ec = conn.run([&](auto h) {
    conn.with_stream([&](auto& s) {
      http::async_read_some(s, conn.buffer, parser,
                            [this, timer = deadline.has_value(), h = std::move(h)](
                                beast::error_code e, std::size_t n) mutable {
                              if (timer) impl_->timer.cancel();
                              h(e, n);
                            });
    });
  });
  if (parser.is_done()) {
    ended_ = true;
  } else if (ec && !(timed_out && ec == net::error::operation_aborted)) {
    ended_ = true;
    end_error_ = ec;
  }
}

std::size_t line_stream::read_lines(std::size_t max, milliseconds wait,
                                    std::vector<std::string>& out) {
  out.clear();
  take(max, out);
  const auto deadline = steady_clock::now() + wait;
  while (out.empty() && max > 0 && !ended_ && steady_clock::now() < deadline) {
    read_some(deadline);
    take(max, out);
  }
  // An answer arrives in several reads: take what has arrived meanwhile
  // too, without waiting, so that a batch is not cut into small ones.
  while (!out.empty() && out.size() < max && !ended_ && impl_->conn.tcp.socket().available() > 0) {
    // (A TLS record may have arrived in part: bounded by wait there.)
    read_some(opts_.tls ? std::optional(steady_clock::now() + wait) : std::nullopt);
    take(max, out);
  }
  return out.size();
}

std::optional<std::string> line_stream::next_line(milliseconds wait) {
  std::vector<std::string> one;
  if (read_lines(1, wait, one) == 0) return std::nullopt;
  return std::move(one.front());
}

std::string url_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace onceq::client
