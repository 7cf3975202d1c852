#include "cmd/cli/api_client.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "cmd/cli/exit_code.hpp"
#include "cmd/cli/interrupt.hpp"

namespace onceq::cli {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds k_max_retry_wait{5'000};
constexpr milliseconds k_default_retry_wait{500};
constexpr milliseconds k_poll_slice{100};  // how often a blocked call checks for SIGINT

// Runs one asynchronous operation to completion, checking for SIGINT in
// between; on SIGINT closes the stream and throws.
template <class Start>
beast::error_code run_one(net::io_context& ioc, beast::tcp_stream& stream, Start&& start) {
  beast::error_code result;
  bool done = false;
  ioc.restart();
  start([&](beast::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  while (!done) {
    ioc.run_one_for(k_poll_slice);
    if (!done && interrupted()) {
      stream.close();
      ioc.run();  // let the cancelled operation finish
      throw cli_error(exit_code::interrupted, "interrupted");
    }
  }
  return result;
}

milliseconds retry_wait(const api_reply& r) {
  milliseconds wait = k_default_retry_wait;
  int secs = 0;
  const auto& h = r.header_retry_after;
  if (!h.empty() && std::from_chars(h.data(), h.data() + h.size(), secs).ec == std::errc{}) {
    wait = milliseconds(secs * 1000);
  }
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("retry_after_ms") && j["retry_after_ms"].is_number_integer()) {
    wait = milliseconds(j["retry_after_ms"].get<std::int64_t>());
  }
  return std::clamp(wait, milliseconds(1), k_max_retry_wait);
}

void sleep_interruptibly(milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (interrupted()) throw cli_error(exit_code::interrupted, "interrupted");
    std::this_thread::sleep_for(std::min(k_poll_slice, d));
  }
}

}  // namespace

endpoint parse_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) {
    throw cli_error(exit_code::usage,
                    "--url must start with http:// (got '" + std::string(url) + "')");
  }
  url.remove_prefix(scheme.size());
  endpoint ep;
  auto slash = url.find('/');
  auto authority = url.substr(0, slash);
  if (slash != std::string_view::npos) {
    ep.prefix = std::string(url.substr(slash));
    while (!ep.prefix.empty() && ep.prefix.back() == '/') ep.prefix.pop_back();
  }
  auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    ep.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
    unsigned port = 0;
    auto [p, ec] = std::from_chars(ep.port.data(), ep.port.data() + ep.port.size(), port);
    if (ec != std::errc{} || p != ep.port.data() + ep.port.size() || port == 0 || port > 65535) {
      throw cli_error(exit_code::usage, "bad port in --url: '" + ep.port + "'");
    }
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) throw cli_error(exit_code::usage, "--url has no host");
  ep.host = std::string(authority);
  return ep;
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

void throw_reply_error(const api_reply& r) {
  auto code = exit_code_for_status(r.status);
  if (code == exit_code::ok) code = exit_code::failure;
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    std::string msg = j["error"].get<std::string>();
    if (j.contains("message") && j["message"].is_string()) {
      msg += ": " + j["message"].get<std::string>();
    }
    throw cli_error(code, msg);
  }
  throw cli_error(code, "HTTP " + std::to_string(r.status) +
                            (r.body.empty() ? std::string() : ": " + r.body.substr(0, 200)));
}

struct api_client::impl {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool connected = false;

  void close() {
    if (!connected) return;
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
    buffer.consume(buffer.size());
    connected = false;
  }
};

api_client::api_client(options opts)
    : impl_(std::make_unique<impl>()), opts_(std::move(opts)), ep_(parse_url(opts_.url)) {}

api_client::~api_client() {
  impl_->close();
}

api_reply api_client::send_once(std::string_view method, std::string_view target,
                                std::string_view body,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                milliseconds timeout) {
  bhttp::request<bhttp::string_body> req;
  req.method(bhttp::string_to_verb(method));
  req.target(ep_.prefix + std::string(target));
  req.version(11);
  req.set(bhttp::field::host, ep_.host);
  req.set(bhttp::field::user_agent, "onceq-cli");
  req.keep_alive(true);
  if (!opts_.token.empty()) req.set(bhttp::field::authorization, "Bearer " + opts_.token);
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty()) {
    req.body() = std::string(body);
    req.set(bhttp::field::content_type, "application/json");
  }
  req.prepare_payload();

  const std::string where = "http://" + ep_.host + ":" + ep_.port;
  for (int attempt = 0;; ++attempt) {
    const bool reused = impl_->connected;
    if (!impl_->connected) {
      tcp::resolver resolver(impl_->ioc);
      beast::error_code ec;
      auto addrs = resolver.resolve(ep_.host, ep_.port, ec);
      if (ec)
        throw cli_error(exit_code::unavailable, "cannot resolve " + where + ": " + ec.message());
      impl_->stream.expires_after(timeout);
      ec = run_one(impl_->ioc, impl_->stream,
                   [&](auto h) { impl_->stream.async_connect(addrs, std::move(h)); });
      if (ec)
        throw cli_error(exit_code::unavailable, "cannot connect to " + where + ": " + ec.message());
      impl_->connected = true;
    }
    impl_->stream.expires_after(timeout);
    auto write_ec = run_one(impl_->ioc, impl_->stream,
                            [&](auto h) { bhttp::async_write(impl_->stream, req, std::move(h)); });
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    // After a failed write the server may still have answered (413 + close).
    auto read_ec = run_one(impl_->ioc, impl_->stream, [&](auto h) {
      bhttp::async_read(impl_->stream, impl_->buffer, parser, std::move(h));
    });
    if (read_ec) {
      const bool nothing = !parser.got_some();
      impl_->close();
      // A kept-alive connection the server closed while idle: the request
      // never reached it, so one retry on a fresh connection is safe.
      if (reused && nothing && attempt == 0 && read_ec != beast::error::timeout) continue;
      auto ec = write_ec ? write_ec : read_ec;
      throw cli_error(exit_code::unavailable, std::string(method) + " " + where +
                                                  std::string(target) + ": " + ec.message());
    }
    auto res = parser.release();
    api_reply out;
    out.status = res.result_int();
    out.body = std::move(res.body());
    out.header_retry_after = std::string(res[bhttp::field::retry_after]);
    if (!res.keep_alive() || write_ec) impl_->close();
    return out;
  }
}

api_reply api_client::send(std::string_view method, std::string_view target, std::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& headers,
                           milliseconds extra_wait) {
  for (int attempt = 0;; ++attempt) {
    auto r = send_once(method, target, body, headers, opts_.timeout + extra_wait);
    if ((r.status != 429 && r.status != 503) || attempt >= opts_.retries) return r;
    sleep_interruptibly(retry_wait(r));
  }
}

json api_client::call(std::string_view method, std::string_view target, const json* body,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      milliseconds extra_wait) {
  std::string text = body != nullptr ? body->dump() : std::string();
  auto r = send(method, target, text, headers, extra_wait);
  if (r.status >= 300) throw_reply_error(r);
  if (r.body.empty()) return json();
  auto j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    throw cli_error(exit_code::failure,
                    "the server's answer is not JSON: " + r.body.substr(0, 200));
  }
  return j;
}

}  // namespace onceq::cli
