#include "http/session.hpp"

#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "http/access_log.hpp"
#include "http/params.hpp"  // k_json_padding
#include "http/plain_session.hpp"
#include "http/request_id.hpp"
#include "http/session_rules.hpp"
#include "http/stream_pump.hpp"
#include "base/log.hpp"

namespace onceq::http {

namespace {

namespace beast = boost::beast;
using asio::use_awaitable;
constexpr auto k_tuple = asio::as_tuple(use_awaitable);
constexpr auto k_relaxed = std::memory_order_relaxed;

std::chrono::milliseconds ms(millis v) {
  return std::chrono::milliseconds(v);
}

using tls_stream = beast::ssl_stream<beast::tcp_stream>;

// One TLS connection, as coroutines over Beast's stream (its timers and
// serializer): TLS's own cost dwarfs theirs. Plain connections take the
// callback path of plain_session.cpp.
class tls_session final : public session, public std::enable_shared_from_this<tls_session> {
 public:
  tls_session(router& r, std::shared_ptr<session_registry> registry, asio::ip::tcp::socket socket,
              asio::ssl::context& tls)
      : registry_(std::move(registry)),
        opts_(registry_->options()),
        router_(r),
        stream_(std::move(socket), tls) {}

  ~tls_session() override {
    if (registered_) registry_->remove(id_);
  }

  void start();
  void shutdown() override;

 private:
  enum class handshake_result { ok, failed, answered_plain };

  // The TCP layer: timeouts, shutdown and close apply here for both kinds.
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  asio::awaitable<handshake_result> handshake();
  asio::awaitable<void> run();
  asio::awaitable<bool> write(response& res);
  asio::awaitable<void> send_stream(reply r);
  asio::awaitable<void> watch_peer();
  asio::awaitable<void> reject(const error& e, unsigned version, std::string request_id);
  asio::awaitable<void> close(bool drain);
  std::shared_ptr<session_registry> registry_;
  const http_options& opts_;  // owned by registry_
  router& router_;
  tls_stream stream_;
  beast::flat_buffer buffer_;
  std::uint64_t id_ = 0;
  bool registered_ = false;
  bool reading_ = false;    // waiting for a request: shutdown() closes at once
  bool closing_ = false;    // close after the current answer
  bool peer_gone_ = false;  // stream mode: the client closed its side
  bool secured_ = false;    // TLS: the handshake finished
};

void tls_session::start() {
  id_ = registry_->add(this->weak_from_this());
  registered_ = true;
  asio::co_spawn(
      stream_.get_executor(),
      [self = this->shared_from_this()]() -> asio::awaitable<void> { co_await self->run(); },
      [](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log(log_level::error, "http", fmt::format("connection failed: {}", ex.what()));
        } catch (...) {
          log(log_level::error, "http", "connection failed");
        }
      });
}

void tls_session::shutdown() {
  asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
    self->closing_ = true;
    if (self->reading_) {
      beast::error_code ec;
      self->tcp().socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
      self->tcp().close();
    }
  });
}

asio::awaitable<typename tls_session::handshake_result> tls_session::handshake() {
  auto& stats = registry_->stats();
  // One deadline for the whole handshake, from accept.
  tcp().expires_after(ms(opts_.tls_handshake_timeout_ms));
  reading_ = true;
  auto [dec, is_tls] = co_await beast::async_detect_ssl(tcp(), buffer_, k_tuple);
  reading_ = false;
  if (dec || closing_) {
    stats.tls_handshake_failures.fetch_add(1, k_relaxed);
    co_return handshake_result::failed;
  }
  if (!is_tls) {
    // Plain HTTP on the TLS port: a readable answer beats a TLS alert the
    // client cannot parse.
    stats.tls_handshake_failures.fetch_add(1, k_relaxed);
    response res = router_.error_response(
        make_error(errc::invalid_argument,
                   "this port speaks HTTPS (TLS); the request was plain HTTP"),
        11, new_request_id());
    res.keep_alive(false);
    tcp().expires_after(ms(opts_.write_timeout_ms));
    auto [wec, wn] = co_await bhttp::async_write(tcp(), res, k_tuple);
    (void)wec;  // closing anyway
    co_return handshake_result::answered_plain;
  }
  reading_ = true;
  auto [hec, used] =
      co_await stream_.async_handshake(asio::ssl::stream_base::server, buffer_.data(), k_tuple);
  reading_ = false;
  if (hec || closing_) {
    stats.tls_handshake_failures.fetch_add(1, k_relaxed);
    co_return handshake_result::failed;
  }
  buffer_.consume(used);
  secured_ = true;
  co_return handshake_result::ok;
}

asio::awaitable<void> tls_session::run() {
  bool drain = false;
  auto hs_op = handshake();
  const handshake_result hs = co_await std::move(hs_op);
  if (hs != handshake_result::ok) {
    auto closed = close(hs == handshake_result::answered_plain);
    co_await std::move(closed);
    co_return;
  }
  bool first = true;
  while (!closing_ && !registry_->stopping()) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(opts_.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));

    reading_ = true;
    if (!first && buffer_.size() == 0) {
      // Between requests on a kept-alive connection: idle_timeout_ms until
      // the next request's first byte. Then header_timeout_ms for the rest
      // of its header block, so that a client trickling a header (or
      // sending half of one and stalling) cannot hold the connection for
      // the idle timeout, let alone forever.
      tcp().expires_after(ms(opts_.idle_timeout_ms));
      auto [iec, in] = co_await stream_.async_read_some(
          buffer_.prepare(beast::read_size(buffer_, k_max_read_bytes)), k_tuple);
      if (iec) {
        reading_ = false;
        break;  // idle timeout, the client left, or shutdown: just close
      }
      buffer_.commit(in);
    }
    first = false;
    tcp().expires_after(ms(opts_.header_timeout_ms));
    auto [ec, n] = co_await bhttp::async_read_header(stream_, buffer_, parser, k_tuple);
    reading_ = false;
    if (ec == beast::error::timeout) {
      registry_->stats().header_timeouts.fetch_add(1, k_relaxed);
    }

    if (!ec && !parser.is_done()) {
      const auto& head = parser.get();
      if (head.version() >= 11 && beast::iequals(head[bhttp::field::expect], "100-continue")) {
        tcp().expires_after(ms(opts_.write_timeout_ms));
        auto [wec, wn] = co_await asio::async_write(
            stream_, asio::buffer(k_continue.data(), k_continue.size()), k_tuple);
        if (wec) break;
      }
      // Beast reads at most the buffer's free capacity per read (512 bytes
      // minimum) and the parser drains it into the body after each read, so
      // a buffer sized for the header would take a 40 KB body in ~80 reads,
      // each with its own epoll re-arm and timer. Room for the body (up to
      // Beast's 64 KiB per read) makes that one or two reads.
      if (auto len = parser.content_length(); len && *len > buffer_.capacity() - buffer_.size()) {
        buffer_.reserve(std::min<std::uint64_t>(*len, k_max_read_bytes) + buffer_.size());
      }
      // The body's string gets simdjson's padding past its end now (Beast
      // then reserves only the Content-Length, which does not shrink it),
      // so read_params parses it in place instead of copying it. A chunked
      // body, of unknown length, is copied there instead.
      if (auto len = parser.content_length(); len && *len <= opts_.max_body_bytes) {
        parser.get().body().reserve(static_cast<std::size_t>(*len) + k_json_padding);
      }
      tcp().expires_after(ms(opts_.idle_timeout_ms));
      auto [bec, bn] = co_await bhttp::async_read(stream_, buffer_, parser, k_tuple);
      ec = bec;
    }

    if (ec) {
      const std::optional<error> why = refusal_of(ec, opts_);
      // Anything else (the client left, a timeout, shutdown): just close.
      if (why) {
        // The header may be complete (413): echo the client's request id.
        auto op = reject(*why, 11, request_id_for(parser.get()[k_request_id_header]));
        co_await std::move(op);
        drain = true;
      }
      break;
    }

    request req = parser.release();
    const bool keep_alive = req.keep_alive();
    // --access-log: what the line needs, taken before the router owns req.
    const auto started = std::chrono::steady_clock::now();
    std::string method, target;
    if (opts_.access_log) {
      method = std::string(req.method_string());
      target = std::string(req.target());
    }
    // (Operations are built first and awaited by name: GCC 12 mishandles
    // temporaries with destructors inside a co_await expression.)
    auto handled = router_.handle(std::move(req));
    reply r = co_await std::move(handled);
    if (opts_.access_log) {
      log_access({method, target, r.res.result_int(), std::chrono::steady_clock::now() - started,
                  r.stream ? -1 : static_cast<std::int64_t>(r.res.body().size()),
                  r.res[k_request_id_header]});
    }
    if (r.stream) {
      auto streamed = send_stream(std::move(r));
      co_await std::move(streamed);
      break;
    }
    const bool keep = keep_alive && !closing_ && !registry_->stopping();
    r.res.keep_alive(keep);
    auto written = write(r.res);
    if (!co_await std::move(written) || !keep) break;
  }
  auto closed = close(drain);
  co_await std::move(closed);
}

asio::awaitable<bool> tls_session::write(response& res) {
  tcp().expires_after(ms(opts_.write_timeout_ms));
  // Beast's serializer: its ssl_stream (a flat_stream) stalled on a
  // gathered write whose second buffer is large (a 27 KB /metrics body
  // never left), and TLS's own cost dwarfs the serializer's. (The plain
  // session renders by hand: plain_session.cpp.)
  auto [ec, n] = co_await bhttp::async_write(stream_, res, k_tuple);
  co_return !ec;
}

asio::awaitable<void> tls_session::reject(const error& e, unsigned version,
                                          std::string request_id) {
  response res = router_.error_response(e, version, request_id);
  res.keep_alive(false);
  auto written = write(res);
  co_await std::move(written);
}

asio::awaitable<void> tls_session::send_stream(reply r) {
  bhttp::response<bhttp::empty_body> head{r.res.result(), r.res.version()};
  for (const auto& f : r.res) head.set(f.name_string(), f.value());
  head.keep_alive(false);  // the connection ends with the stream
  // HTTP/1.0 has no chunked encoding: the body then simply ends at the close.
  const bool chunked = head.version() >= 11;
  head.chunked(chunked);
  bhttp::response_serializer<bhttp::empty_body> sr{head};
  tcp().expires_after(ms(opts_.write_timeout_ms));
  auto [ec, n] = co_await bhttp::async_write_header(stream_, sr, k_tuple);
  if (ec) co_return;

  // The watcher's read must not time out: a stream may send nothing for
  // long. tcp_stream arms a read's timer when the read starts, and a later
  // expires_after() only moves the timers of operations not pending, so
  // the writes below keep their own timeout.
  tcp().expires_never();
  asio::co_spawn(
      stream_.get_executor(),
      [self = this->shared_from_this()]() -> asio::awaitable<void> { co_await self->watch_peer(); },
      asio::detached);

  auto op = pump_stream(
      stream_, *r.stream, chunked, peer_gone_, [this] { return closing_ || registry_->stopping(); },
      [this](bool on) {
        if (on) tcp().expires_after(ms(opts_.write_timeout_ms));
      });
  co_await std::move(op);
}

asio::awaitable<void> tls_session::watch_peer() {
  // A streaming client sends nothing more; a read that ends means it left.
  // Through the TLS layer (records, close_notify), concurrently with the
  // stream's writes, which Asio's SSL stream allows (one read and one write
  // at a time).
  std::array<char, 1024> sink;
  while (true) {
    auto [ec, n] = co_await stream_.async_read_some(asio::buffer(sink), k_tuple);
    if (ec) break;
  }
  peer_gone_ = true;
}

asio::awaitable<void> tls_session::close(bool drain) {
  if (secured_ && !peer_gone_ && tcp().socket().is_open()) {
    // close_notify, so that the client can tell the end of a response
    // that ends at the close (HTTP/1.0 streams) from a cut. One-way: we
    // do not wait for the client's own close_notify (RFC 8446 6.1 allows
    // it), which Asio's shutdown would otherwise wait for.
    SSL_set_shutdown(stream_.native_handle(), SSL_RECEIVED_SHUTDOWN);
    tcp().expires_after(std::min(ms(opts_.write_timeout_ms), k_drain_time));
    auto [sec] = co_await stream_.async_shutdown(k_tuple);
    (void)sec;  // closing anyway
  }
  beast::error_code ec;
  tcp().socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (drain && tcp().socket().is_open()) {
    // Raw bytes, also for TLS: the rest of the request is discarded unread.
    std::array<char, 8192> sink;
    std::size_t drained = 0;
    tcp().expires_after(k_drain_time);
    while (drained < k_drain_bytes) {
      auto [rec, n] = co_await tcp().async_read_some(asio::buffer(sink), k_tuple);
      if (rec) break;
      drained += n;
    }
  }
  tcp().close();
}

}  // namespace

void start_session(asio::ip::tcp::socket socket, router& r,
                   std::shared_ptr<session_registry> registry, std::optional<std::uint32_t> home,
                   std::string pending, bool adopted) {
  if (asio::ssl::context* tls = registry->tls()) {
    auto s = std::make_shared<tls_session>(r, std::move(registry), std::move(socket), *tls);
    s->start();
  } else {
    start_plain_session(std::move(socket), r, std::move(registry), home, std::move(pending),
                        adopted);
  }
}

}  // namespace onceq::http
