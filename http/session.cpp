#include "http/session.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "http/request_id.hpp"

namespace onceq::http {

namespace {

using asio::use_awaitable;
constexpr auto k_tuple = asio::as_tuple(use_awaitable);

// After a rejected request, how long and how much of the rest of it to read
// and discard before closing, so that the client reads our answer instead
// of a connection reset.
constexpr std::chrono::milliseconds k_drain_time{1000};
constexpr std::size_t k_drain_bytes = 8u << 20;

// Beast's largest single read (http::read_some asks for at most 64 KiB).
constexpr std::uint64_t k_max_read_bytes = 64u << 10;

std::chrono::milliseconds ms(millis v) {
  return std::chrono::milliseconds(v);
}

bool is_http_error(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
}

}  // namespace

session::session(asio::ip::tcp::socket socket, router& r,
                 std::shared_ptr<session_registry> registry)
    : registry_(std::move(registry)),
      opts_(registry_->options()),
      router_(r),
      stream_(std::move(socket)) {}

session::~session() {
  if (registered_) registry_->remove(id_);
}

void session::start() {
  id_ = registry_->add(weak_from_this());
  registered_ = true;
  asio::co_spawn(
      stream_.get_executor(),
      [self = shared_from_this()]() -> asio::awaitable<void> { co_await self->run(); },
      [](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          fmt::print(stderr, "onceqd: connection failed: {}\n", ex.what());
        } catch (...) {
          fmt::print(stderr, "onceqd: connection failed\n");
        }
      });
}

void session::shutdown() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    self->closing_ = true;
    if (self->reading_) {
      beast::error_code ec;
      self->stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
      self->stream_.close();
    }
  });
}

asio::awaitable<void> session::run() {
  bool drain = false;
  while (!closing_ && !registry_->stopping()) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(opts_.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));

    stream_.expires_after(ms(opts_.idle_timeout_ms));
    reading_ = true;
    auto [ec, n] = co_await bhttp::async_read_header(stream_, buffer_, parser, k_tuple);
    reading_ = false;

    if (!ec && !parser.is_done()) {
      const auto& head = parser.get();
      if (head.version() >= 11 && beast::iequals(head[bhttp::field::expect], "100-continue")) {
        static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
        stream_.expires_after(ms(opts_.write_timeout_ms));
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
      stream_.expires_after(ms(opts_.idle_timeout_ms));
      auto [bec, bn] = co_await bhttp::async_read(stream_, buffer_, parser, k_tuple);
      ec = bec;
    }

    if (ec) {
      std::optional<error> why;
      if (ec == bhttp::error::body_limit) {
        why = make_error(errc::payload_too_large,
                         fmt::format("request body is larger than {} bytes", opts_.max_body_bytes));
      } else if (ec == bhttp::error::header_limit) {
        why = make_error(
            errc::invalid_argument,
            fmt::format("request header is larger than {} bytes", opts_.max_header_bytes));
      } else if (is_http_error(ec) && ec != bhttp::error::end_of_stream &&
                 ec != bhttp::error::partial_message) {
        why = make_error(errc::invalid_argument,
                         fmt::format("malformed HTTP request: {}", ec.message()));
      }
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
    // (Operations are built first and awaited by name: GCC 12 mishandles
    // temporaries with destructors inside a co_await expression.)
    auto handled = router_.handle(std::move(req));
    reply r = co_await std::move(handled);
    if (r.stream) {
      auto streamed = send_stream(std::move(r));
      co_await std::move(streamed);
      break;
    }
    const bool keep = keep_alive && !closing_ && !registry_->stopping();
    r.res.keep_alive(keep);
    if (!co_await write(r.res) || !keep) break;
  }
  co_await close(drain);
}

asio::awaitable<bool> session::write(response& res) {
  stream_.expires_after(ms(opts_.write_timeout_ms));
  auto [ec, n] = co_await bhttp::async_write(stream_, res, k_tuple);
  co_return !ec;
}

asio::awaitable<void> session::reject(const error& e, unsigned version, std::string request_id) {
  response res = router_.error_response(e, version, request_id);
  res.keep_alive(false);
  co_await write(res);
}

asio::awaitable<void> session::send_stream(reply r) {
  bhttp::response<bhttp::empty_body> head{r.res.result(), r.res.version()};
  for (const auto& f : r.res) head.set(f.name_string(), f.value());
  head.keep_alive(false);  // the connection ends with the stream
  // HTTP/1.0 has no chunked encoding: the body then simply ends at the close.
  const bool chunked = head.version() >= 11;
  head.chunked(chunked);
  bhttp::response_serializer<bhttp::empty_body> sr{head};
  stream_.expires_after(ms(opts_.write_timeout_ms));
  auto [ec, n] = co_await bhttp::async_write_header(stream_, sr, k_tuple);
  if (ec) co_return;

  asio::co_spawn(
      stream_.get_executor(),
      [self = shared_from_this()]() -> asio::awaitable<void> { co_await self->watch_peer(); },
      asio::detached);

  std::string chunk = r.stream->take_initial();
  while (true) {
    if (!chunk.empty()) {
      stream_.expires_after(ms(opts_.write_timeout_ms));
      beast::error_code wec;
      if (chunked) {
        auto body = bhttp::make_chunk(asio::buffer(chunk));
        std::tie(wec, std::ignore) = co_await asio::async_write(stream_, body, k_tuple);
      } else {
        std::tie(wec, std::ignore) =
            co_await asio::async_write(stream_, asio::buffer(chunk), k_tuple);
      }
      if (wec) {
        r.stream->abandon_last();
        co_return;
      }
    }
    if (peer_gone_ || closing_ || registry_->stopping()) break;
    auto next = co_await r.stream->next();
    if (!next.ok()) break;
    if (peer_gone_) {
      // The poll was parked in the core when the client left and may have
      // leased messages to it: hand them back.
      r.stream->abandon_last();
      co_return;
    }
    chunk = std::move(*next);
  }
  if (peer_gone_ || !chunked) co_return;
  stream_.expires_after(ms(opts_.write_timeout_ms));
  auto last = bhttp::make_chunk_last();
  auto [lec, ln] = co_await asio::async_write(stream_, last, k_tuple);
  (void)lec;  // closing anyway
}

asio::awaitable<void> session::watch_peer() {
  // A streaming client sends nothing more; a read that ends means it left.
  // Reads on the raw socket: the stream's timeout must not apply here.
  std::array<char, 1024> sink;
  while (true) {
    auto [ec, n] = co_await stream_.socket().async_read_some(asio::buffer(sink), k_tuple);
    if (ec) break;
  }
  peer_gone_ = true;
}

asio::awaitable<void> session::close(bool drain) {
  beast::error_code ec;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (drain && stream_.socket().is_open()) {
    std::array<char, 8192> sink;
    std::size_t drained = 0;
    stream_.expires_after(k_drain_time);
    while (drained < k_drain_bytes) {
      auto [rec, n] = co_await stream_.async_read_some(asio::buffer(sink), k_tuple);
      if (rec) break;
      drained += n;
    }
  }
  stream_.close();
}

}  // namespace onceq::http
